package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestPeersAgreeAcrossKills runs two daemon binaries, each the other's
// peer (a peer pass every 50ms), consuming the same four partitions of a
// Kafka-protocol broker (kfake) in their own consumer groups while records
// keep arriving, and SIGKILLs one of them five times during ingestion,
// restarting it on its data directory each time. Two honest instances of
// deterministic ledgers must agree: at the end both hold the same roots at
// equal sizes, neither raised a fork (nor a bad checkpoint, nor a
// rollback: a restarted daemon serves no checkpoint smaller than one it
// served before its SIGKILL) at any time
// (the survivor's finding counters cover its whole run, each killed run's
// are read just before its SIGKILL, and the alerts, which persist, are
// listed on both), and the peer checks did run and compare (passes
// completed on both, comparisons that agreed at the final sizes, and
// comparisons made by the survivor while the other was being killed).
func TestPeersAgreeAcrossKills(t *testing.T) {
	records, kills := 24_000, 5
	if testing.Short() {
		records = 8_000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0xfeed))
	t.Logf("seed %d: %d records, %d kills", seed, records, kills)

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	broker := cluster.ListenAddrs()[0]
	var bin string
	built := make(chan struct{})
	binDir := t.TempDir()
	go func() {
		defer close(built)
		bin = buildDaemonQuiet(ctx, binDir)
	}()
	pp := newPaymentProducer(t, broker, rng.Uint64())
	defer pp.close()
	pp.produce(ctx, records/2)
	<-built
	if bin == "" {
		bin = buildDaemon(t, ctx)
	}

	// a and b: own keys, fixed addresses (a restarted b keeps its URL),
	// each other's peer.
	type node struct {
		name, dir, key, addr, cfg, group string
	}
	nodes := [2]*node{}
	for i, name := range []string{"a", "b"} {
		dir := t.TempDir()
		nodes[i] = &node{name: name, dir: filepath.Join(dir, "data"), key: filepath.Join(dir, "auditd.key"),
			addr: freeAddr(t), cfg: filepath.Join(dir, "auditd.yaml"), group: "auditd-peer-" + name}
		if err := writeNewKey(nodes[i].key, "auditd-"+name+".example"); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range nodes {
		other := nodes[1-i]
		cfg := fmt.Sprintf("key_file: %s\nchecks:\n  peers:\n    interval: 50ms\n    list:\n      - url: http://%s\n        key_file: %s.pub\n",
			n.key, other.addr, other.key)
		if err := os.WriteFile(n.cfg, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := &kafkaCrashHarness{t: t, bin: bin, broker: broker, hwm: make([]int64, 4)}
	var live []*kafkaDaemon
	t.Cleanup(func() {
		for _, d := range live {
			d.kill()
		}
		if t.Failed() {
			for _, d := range live {
				ls := d.stderr.lines()
				t.Logf("stderr tail of run %d:\n%s", d.run, strings.Join(ls[max(0, len(ls)-30):], "\n"))
			}
		}
	})
	start := func(n *node, run int) *kafkaDaemon {
		t.Helper()
		d, err := startKafkaDaemon(ctx, bin, run, "serve", "--data-dir", n.dir, "--listen", n.addr,
			"--checkpoint-interval", "20ms", "--log-format", "text", "--config", n.cfg,
			"--kafka-brokers", broker, "--kafka-topics", "payments", "--kafka-group", n.group)
		if d != nil {
			live = append(live, d)
		}
		if err != nil {
			t.Fatalf("%s run %d: %v", n.name, run, err)
		}
		return d
	}
	a := start(nodes[0], 0)
	b := start(nodes[1], 1)

	var bAgreed float64   // agreeing comparisons b's killed runs made
	var aAgreed []float64 // a's agreeing comparisons at each kill
	for k := range kills {
		pp.produce(ctx, records/2/kills)
		// Kill b at a random moment of its consumption: after it has
		// ledgered a random number of further entries, or at once.
		produced := int64(records/2 + (k+1)*(records/2/kills))
		before := sum(h.sizes(ctx, b))
		target := before + rng.Int64N(max(1, produced-before))
		deadline := time.Now().Add(20 * time.Second)
		for sum(h.sizes(ctx, b)) < target && time.Now().Before(deadline) {
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
		m := scrapeAll(ctx, b)
		killedAt := sum(h.sizes(ctx, b))
		checkPeersNoFork(t, fmt.Sprintf("b run %d", b.run), m)
		bAgreed += m.sum("auditd_peer_comparisons_total", `result="agree"`)
		aAgreed = append(aAgreed, scrapeAll(ctx, a).sum("auditd_peer_comparisons_total", `result="agree"`))
		b.kill()
		live = without(live, b)
		t.Logf("kill %d: b killed at %d entries (%d at its start, %d produced), %v agreeing comparisons in its run", k, killedAt, before, produced,
			m.sum("auditd_peer_comparisons_total", `result="agree"`))
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond) // a checks b while it is down
		b = start(nodes[1], 2+k)
	}
	_, hwm := pp.finish(ctx)
	h.hwm = hwm
	for _, d := range []*kafkaDaemon{a, b} {
		deadline := time.Now().Add(60 * time.Second)
		for !slicesEqual(h.sizes(ctx, d), hwm) {
			if time.Now().After(deadline) {
				t.Fatalf("run %d: sizes %v, the partitions hold %v", d.run, h.sizes(ctx, d), hwm)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Same roots at equal sizes, checkpoint by checkpoint.
	for p := range hwm {
		log := fmt.Sprintf("payments.%d", p)
		var cps [2]string
		for i, d := range []*kafkaDaemon{a, b} {
			deadline := time.Now().Add(10 * time.Second)
			for {
				note, err := d.getText(ctx, "/v1/logs/"+log+"/checkpoint")
				if err == nil {
					if _, size, root, err := parseCheckpointText(note); err == nil && size == uint64(hwm[p]) {
						cps[i] = fmt.Sprintf("%d %x", size, root)
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: no checkpoint of size %d on run %d: %q %v", log, hwm[p], d.run, note, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if cps[0] != cps[1] {
			t.Errorf("%s: a signed %s, b %s", log, cps[0], cps[1])
		}
	}

	// Passes after the final sizes: each daemon's comparisons agree at a
	// size that is one of the partitions' final sizes.
	final := map[float64]bool{}
	for _, n := range hwm {
		final[float64(n)] = true
	}
	for i, d := range []*kafkaDaemon{a, b} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			m := scrapeAll(ctx, d)
			if size := m.sum("auditd_peer_agreed_size", ""); final[size] && size >= float64(records/8) &&
				m.sum("auditd_checks_runs_total", `checker="peers",result="ok"`) > 0 {
				t.Logf("%s: %v passes ok, %v failed (peer down), %v comparisons agreed, last at size %v", nodes[i].name,
					m.sum("auditd_checks_runs_total", `checker="peers",result="ok"`), m.sum("auditd_checks_runs_total", `checker="peers",result="error"`),
					m.sum("auditd_peer_comparisons_total", `result="agree"`), size)
				checkPeersNoFork(t, nodes[i].name, m)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the peer check never agreed at a final size %v: agreed size %v, passes ok %v", nodes[i].name, hwm,
					m.sum("auditd_peer_agreed_size", ""), m.sum("auditd_checks_runs_total", `checker="peers",result="ok"`))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The checks ran during the kills, not only at the end.
	if bAgreed == 0 || aAgreed[kills-1] <= aAgreed[0] {
		t.Errorf("agreeing comparisons during the kills: %v by b's killed runs, %v by a at each kill", bAgreed, aAgreed)
	}
	// No fork alert, firing or resolved, and no fork in the last pass.
	for i, d := range []*kafkaDaemon{a, b} {
		var al struct {
			Alerts []struct {
				ID string `json:"id"`
			} `json:"alerts"`
		}
		if err := d.getJSON(ctx, "/v1/alerts?limit=1000", &al); err != nil {
			t.Fatal(err)
		}
		for _, x := range al.Alerts {
			if strings.Contains(x.ID, "checks/peers/") {
				t.Errorf("%s: alert %s", nodes[i].name, x.ID)
			}
		}
		var st struct {
			Findings       []any          `json:"findings"`
			FindingsByKind map[string]int `json:"findings_by_kind"`
		}
		if err := d.getJSON(ctx, "/v1/checks/peers", &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Findings) != 0 || len(st.FindingsByKind) != 0 {
			t.Errorf("%s: peer findings %v %v", nodes[i].name, st.Findings, st.FindingsByKind)
		}
	}
}

func without(ds []*kafkaDaemon, d *kafkaDaemon) []*kafkaDaemon {
	out := ds[:0]
	for _, x := range ds {
		if x != d {
			out = append(out, x)
		}
	}
	return out
}

// checkPeersNoFork fails the test if the metrics count a fork, a bad
// checkpoint or a rollback found by the peer check.
func checkPeersNoFork(t *testing.T, who string, m metricSamples) {
	t.Helper()
	for kind, result := range map[string]string{"fork": "fork", "peer_checkpoint_bad": "bad", "peer_rollback": "rollback"} {
		if n := m.sum("auditd_checks_findings_total", `checker="peers",kind="`+kind+`"`); n != 0 {
			t.Errorf("%s: %v %s findings", who, n, kind)
		}
		if n := m.sum("auditd_peer_comparisons_total", `result="`+result+`"`); n != 0 {
			t.Errorf("%s: %v comparisons found %s", who, n, kind)
		}
	}
}

// metricSamples are a scrape's samples: name, label text, value.
type metricSamples []struct {
	name, labels string
	value        float64
}

// sum adds the samples of name whose labels contain labels.
func (m metricSamples) sum(name, labels string) float64 {
	var s float64
	for _, x := range m {
		if x.name == name && strings.Contains(x.labels, labels) {
			s += x.value
		}
	}
	return s
}

var sampleLine = regexp.MustCompile(`^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$`)

// scrapeAll reads the daemon's /metrics.
func scrapeAll(ctx context.Context, d *kafkaDaemon) metricSamples {
	var out metricSamples
	_, body, err := d.get(ctx, "/metrics")
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if m := sampleLine.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[3], 64)
			out = append(out, struct {
				name, labels string
				value        float64
			}{m[1], m[2], v})
		}
	}
	return out
}
