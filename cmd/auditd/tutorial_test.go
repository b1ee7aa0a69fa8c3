package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/spec"
)

// TestTutorialCommands keeps docs/tutorial.md true to the code: every
// `./auditd <command>` it runs exists and accepts each flag it passes
// (checked against the command's own -h), the derivation file parses, the
// daemon configuration loads and validates, and, when promtool is there
// (always in CI), the Prometheus configuration with the shipped rules
// checks.
func TestTutorialCommands(t *testing.T) {
	b, err := os.ReadFile("../../docs/tutorial.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```(\\w+)\\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	dir := t.TempDir()
	help := map[string]string{}
	calls, yamls := 0, map[string]string{}
	for _, bl := range blocks {
		lang, body := bl[1], strings.ReplaceAll(bl[2], "\\\n", " ")
		if lang == "yaml" {
			switch {
			case strings.HasPrefix(body, "derivations:"):
				yamls["balances.yaml"] = body
			case strings.HasPrefix(body, "data_dir:"):
				yamls["auditd.yaml"] = body
			case strings.HasPrefix(body, "global:"):
				yamls["prometheus.yml"] = body
			}
			continue
		}
		for _, line := range strings.Split(body, "\n") {
			i := strings.Index(line, "./auditd ")
			if i < 0 {
				continue
			}
			cmdline := line[i+len("./auditd "):]
			if j := strings.IndexAny(cmdline, ">|&;#"); j >= 0 {
				cmdline = cmdline[:j]
			}
			f := strings.Fields(cmdline)
			sub := f[0]
			if _, ok := help[sub]; !ok {
				out, _ := exec.Command(bin, sub, "-h").CombinedOutput()
				help[sub] = string(out)
				if strings.Contains(help[sub], "unknown command") {
					t.Errorf("tutorial runs ./auditd %s: no such command", sub)
				}
			}
			for _, a := range f[1:] {
				if !strings.HasPrefix(a, "-") {
					continue
				}
				name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
				if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(name) + `\b`).MatchString(help[sub]) {
					t.Errorf("tutorial runs ./auditd %s with --%s, which its -h does not list:\n%s", sub, name, help[sub])
				}
			}
			calls++
		}
	}
	if calls < 5 || len(yamls) != 3 {
		t.Fatalf("found %d auditd commands and YAML files %v in the tutorial", calls, keys(yamls))
	}
	specs, err := spec.Parse("balances.yaml", []byte(yamls["balances.yaml"]))
	if err != nil || len(specs) != 1 {
		t.Errorf("the tutorial's balances.yaml: %d derivations, %v", len(specs), err)
	}
	conf := filepath.Join(dir, "auditd.yaml")
	writeFile(t, conf, yamls["auditd.yaml"])
	if cfg, err := loadConfig(conf); err != nil {
		t.Errorf("the tutorial's auditd.yaml: %v", err)
	} else if err := cfg.validate(); err != nil || cfg.Kafka == nil || len(cfg.Derivations) != 1 {
		t.Errorf("the tutorial's auditd.yaml: %v (kafka %v, derivations %v)", err, cfg.Kafka, cfg.Derivations)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and promtool is missing")
		}
		t.Log("promtool missing: the Prometheus configuration is not checked")
		return
	}
	os.MkdirAll(filepath.Join(dir, "dashboards"), 0o755)
	rules, err := os.ReadFile("../../dashboards/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "dashboards", "alerts.yml"), string(rules))
	writeFile(t, filepath.Join(dir, "prometheus.yml"), yamls["prometheus.yml"])
	if out, err := exec.Command(promtool, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput(); err != nil {
		t.Errorf("promtool check config of the tutorial's prometheus.yml: %v\n%s", err, out)
	}
}
