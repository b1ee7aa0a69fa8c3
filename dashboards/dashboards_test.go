// Package dashboards_test checks that the Grafana dashboard and the
// Prometheus alert rules shipped here refer only to metrics auditd exports.
package dashboards_test

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/internal/buildinfo"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/witness"
	wserver "github.com/auditd/auditd/witness/server"
	"github.com/auditd/auditd/witness/submit"
)

// exported returns the names of every series auditd's components export,
// with the auditd_ prefix main registers them under.
func exported(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for _, ns := range exportedBy(t) {
		for n := range ns {
			names[n] = true
		}
	}
	return names
}

// exportedBy returns the series exported by each component, by component.
func exportedBy(t *testing.T) map[string]map[string]bool {
	skey, vkey, err := note.GenerateKey(rand.Reader, "test")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	store, err := ledger.Open(t.TempDir(), signer, verifier)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	kv, err := store.Bucket("alerts")
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := alert.NewManager(kv, alert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alerts.Close() })
	kcfg := ingest.KafkaConfig{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}}
	kafka, err := ingest.NewKafka(store, kcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	peers, err := checkers.NewPeerCheck(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	reread, err := checkers.NewKafkaReread(store, kcfg, checkers.KafkaRereadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	components := map[string][]prometheus.Collector{
		"ledger":        store.Collectors(),
		"kafka":         kafka.Collectors(),
		"derivations":   rederive.NewMetrics().Collectors(),
		"alerts":        alerts.Collectors(),
		"http":          api.New(store, vkey, api.Options{}).Collectors(),
		"checks":        checkers.NewRunner(kv, checkers.Options{}).Collectors(),
		"peers":         peers.Collectors(),
		"kafka re-read": reread.Collectors(),
		"build":         {buildinfo.Read().Collector()},
		"witnesses":     witnessCollectors(t, kv),
		"retention":     ledger.NewRetention(store, nil).Collectors(),
	}
	out := map[string]map[string]bool{}
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	for comp, cs := range components {
		names := map[string]bool{}
		for _, c := range cs {
			ch := make(chan *prometheus.Desc, 16)
			go func() { c.Describe(ch); close(ch) }()
			for d := range ch {
				m := re.FindStringSubmatch(d.String())
				if m == nil {
					t.Fatalf("cannot read the name of %s", d)
				}
				n := "auditd_" + m[1]
				names[n] = true
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[n+s] = true
				}
			}
		}
		out[comp] = names
	}
	return out
}

var metricRef = regexp.MustCompile(`\bauditd_[a-z0-9_]+`)

func checkRefs(t *testing.T, file, text string, names map[string]bool) int {
	n := 0
	for _, ref := range metricRef.FindAllString(text, -1) {
		n++
		if !names[ref] {
			var known []string
			for k := range names {
				if !strings.HasSuffix(k, "_bucket") && !strings.HasSuffix(k, "_sum") && !strings.HasSuffix(k, "_count") {
					known = append(known, k)
				}
			}
			sort.Strings(known)
			t.Errorf("%s refers to %s, which auditd does not export (it exports %s)", file, ref, strings.Join(known, ", "))
		}
	}
	return n
}

func TestDashboardMetricsExist(t *testing.T) {
	names := exported(t)
	b, err := os.ReadFile("auditd.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("auditd.json is not valid JSON: %v", err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("auditd.json: uid %q, %d panels", d.UID, len(d.Panels))
	}
	refs := 0
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			refs += checkRefs(t, "auditd.json panel "+p.Title, tg.Expr, names)
		}
	}
	if refs == 0 {
		t.Fatal("the dashboard queries no auditd metric")
	}
	// Every component that exports metrics has a panel querying one.
	var all strings.Builder
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			all.WriteString(tg.Expr + "\n")
		}
	}
	queried := map[string]bool{}
	for _, ref := range metricRef.FindAllString(all.String(), -1) {
		queried[ref] = true
	}
	for comp, ns := range exportedBy(t) {
		found := false
		for n := range ns {
			found = found || queried[n]
		}
		if !found {
			t.Errorf("no dashboard panel queries a metric of component %s", comp)
		}
	}
}

func TestAlertRuleMetricsExist(t *testing.T) {
	names := exported(t)
	b, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			exprs = append(exprs, line)
		}
	}
	if checkRefs(t, "alerts.yml", strings.Join(exprs, "\n"), names) == 0 {
		t.Fatal("the alert rules query no auditd metric")
	}
}

func witnessCollectors(t *testing.T, kv *ledger.Bucket) []prometheus.Collector {
	wkey, _, _ := witness.GenerateKey(rand.Reader, "w.example")
	c, _ := witness.ParseKey(wkey)
	srv, err := wserver.New(kv, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := submit.New(func() []submit.Log { return nil }, nil, submit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return append(srv.Collectors(), sub.Collectors()...)
}
