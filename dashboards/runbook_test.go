package dashboards_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// anchors returns the GitHub-style anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	strip := regexp.MustCompile(`[^a-z0-9 _-]`)
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		out[strings.ReplaceAll(strip.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return out
}

// TestAlertRunbooks: every alert rule has a summary, a description and a
// runbook_url naming a section of docs/runbook.md that exists, and every
// section of the runbook's alerts is one a rule points at.
func TestAlertRunbooks(t *testing.T) {
	b, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	have := anchors(t, "../docs/runbook.md")
	pointed := map[string]bool{}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("rule %s has no %s annotation", r.Alert, k)
				}
			}
			u := r.Annotations["runbook_url"]
			if u == "" {
				continue
			}
			// Relative to the repository, or under Prometheus's external
			// label runbook_base_url when it is set.
			rel, templated := strings.CutPrefix(u, runbookBaseTemplate)
			file, anchor, ok := strings.Cut(rel, "#")
			if !templated || !ok || file != "runbook.md" {
				t.Errorf("rule %s: runbook_url %q is not %srunbook.md#<section>", r.Alert, u, runbookBaseTemplate)
				continue
			}
			if !have[anchor] {
				t.Errorf("rule %s: runbook_url %q: docs/runbook.md has no section #%s", r.Alert, u, anchor)
			}
			if anchor != strings.ToLower(r.Alert) {
				t.Errorf("rule %s: runbook_url %q should point at its own section #%s", r.Alert, u, strings.ToLower(r.Alert))
			}
			pointed[anchor] = true
		}
	}
	if n == 0 {
		t.Fatal("alerts.yml has no alert rules")
	}
	for a := range have {
		if strings.HasPrefix(a, "auditd") && !pointed[a] {
			t.Errorf("docs/runbook.md has a section #%s that no alert rule points at (a rule renamed or removed?)", a)
		}
	}
}

// runbookBaseTemplate starts every rule's runbook_url: the external label
// runbook_base_url when Prometheus has it, docs/ otherwise.
const runbookBaseTemplate = "{{ with $externalLabels.runbook_base_url }}{{ . }}{{ else }}docs/{{ end }}"
