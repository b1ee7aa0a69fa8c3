//go:build linux && (amd64 || arm64)

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/internal/netns"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// The reference deployment's timings (docs/operations.md), short so the
// test's failover and outage take seconds.
const (
	mhPartitions     = 6
	mhSessionTimeout = 3 * time.Second
	mhStallWindow    = 2 * time.Second
	mhRate           = 1000 // records produced per second
)

// mhHost is one auditd host of the multi-host test: its namespace, data
// directory, configuration, and the daemon running in it.
type mhHost struct {
	name, group string
	ns          *netns.NS
	dir, cfg    string
	d           *kafkaDaemon
}

// TestMultiHostNetns runs the reference deployment of docs/operations.md
// on one machine: three auditd binaries, each in its own network namespace
// joined to a hub namespace by a veth pair (no route anywhere else), and
// one Kafka-protocol broker (kfake) listening in the hub, with a topic of
// six partitions that a producer keeps writing to. Hosts a and b share
// group "ledger" and split the partitions; host c, in group "replica",
// reads all six and runs the peer check against a and b. The test
// SIGKILLs a: its partitions move to b, which resumes each from its own
// ledger (from offset 0 for one it never had), and the time until b
// ledgers past a's last entry on every one of them is the failover time.
// Then b loses its network for longer than its stall window and session
// timeout: it must answer /readyz 503 and stay alive, and catch up once
// the link is back. At the end every record is in the group's log of its
// partition exactly once (b's log: one entry per offset, each entry the
// produced record), a's logs are prefixes of b's (identical leaves), c's
// logs are equal to b's leaf by leaf and root by root, and c's peer check
// ran, compared with both a and b, and found no fork.
func TestMultiHostNetns(t *testing.T) {
	if why := netns.Usable(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the multi-host test needs network namespaces: %s (CI runs as root with iproute2)", why)
		}
		t.Skipf("skipped: the multi-host test makes network namespaces and %s; run it as root with iproute2 (ip)", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nw, err := netns.New("auditd-mh", "a", "b", "c")
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Errorf("tearing the namespaces down: %v", err)
		}
	})
	if err != nil {
		// Root without the capability (an unprivileged container).
		if os.Getenv("CI") == "true" {
			t.Fatalf("making the namespaces: %v", err)
		}
		t.Skipf("skipped: cannot make network namespaces here: %v", err)
	}
	hub := nw.Hub
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(mhPartitions, "payments"),
		kfake.GroupMinSessionTimeout(500*time.Millisecond),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return hub.Listen(network, hub.Addr+":9092") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	broker := cluster.ListenAddrs()[0]
	bin := buildDaemon(t, ctx)

	// The producer, in the test's own namespace, reaches the broker
	// through the hub.
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d; namespaces %s*; broker %s", seed, nw.Prefix, broker)
	pp := newPaymentProducer(t, broker, seed)
	pp.cl.Close()
	pp.cl, err = kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("payments"),
		kgo.MaxBufferedRecords(100_000), kgo.ProducerLinger(5*time.Millisecond), kgo.Dialer(hub.Dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pp.close)

	a, b, c := mhSetup(t, nw, broker)
	t.Cleanup(func() {
		for _, h := range []*mhHost{a, b, c} {
			if h.d == nil {
				continue
			}
			h.d.kill()
			if t.Failed() {
				ls := h.d.stderr.lines()
				t.Logf("stderr tail of %s (%s):\n%s", h.name, h.d.exitStatus(), strings.Join(ls[max(0, len(ls)-30):], "\n"))
			}
		}
	})
	for i, h := range []*mhHost{a, b, c} {
		h.d = mhStart(t, ctx, bin, h, i)
	}
	stopProducing := mhProduce(ctx, pp)

	// a and b split the partitions; c has them all.
	aParts, bParts := mhSplit(t, ctx, a, b, c)
	t.Logf("a owns %v, b owns %v", aParts, bParts)
	cAgreedA := mhAgreed(t, ctx, c, a, 20*time.Second)
	// a holds some history, which b must read for itself at the failover.
	kh := &kafkaCrashHarness{t: t, hwm: make([]int64, mhPartitions)}
	mhWait(t, 30*time.Second, "a's logs reaching 1,000 entries", func() (bool, string) {
		s := kh.sizes(ctx, a.d)
		for _, p := range aParts {
			if s[p] < 1000 {
				return false, fmt.Sprintf("a's sizes %v", s)
			}
		}
		return true, ""
	})

	// Failover: SIGKILL a. b does not own a's partitions, so its logs of
	// them (if any) stand still until it is given them.
	bBefore := kh.sizes(ctx, b.d)
	bAssigns := mhAssigns(b.d)
	killed := time.Now()
	a.d.kill()
	aSizes := mhLedgerSizes(t, a.dir)
	assignedAfter, resumedAfter := mhFailover(t, ctx, b, aParts, aSizes, killed)
	// b resumed each from its own log's position: 0 for a partition it
	// never had, not a's position nor the group's committed offset.
	after := mhAssigns(b.d)
	for _, p := range aParts {
		if len(after[p]) <= len(bAssigns[p]) {
			t.Fatalf("b logged no assignment of payments.%d after the kill", p)
		}
		if from := after[p][len(bAssigns[p])]; from != bBefore[p] {
			t.Errorf("b resumed payments.%d from offset %d; its own log held %d entries", p, from, bBefore[p])
		}
	}
	t.Logf("failover: SIGKILL of a -> a's partitions %v assigned on b after %v, all ledgering past a's last entries %v after %v (session_timeout %v); load average %s",
		aParts, assignedAfter.Round(time.Millisecond), aSizes, resumedAfter.Round(time.Millisecond), mhSessionTimeout, loadAvg())

	// b loses its network, then gets it back.
	mhOutage(t, ctx, nw, b)

	stopProducing()
	want, hwm := pp.finish(ctx)
	t.Logf("%d records produced, partitions %v", sum(hwm), hwm)
	for _, h := range []*mhHost{b, c} {
		mhWaitSizes(t, ctx, h, hwm)
	}
	mhCheckRoots(t, ctx, b, c, hwm)
	mhCheckPeers(t, ctx, c, b, hwm, cAgreedA)
	for _, h := range []*mhHost{b, c} {
		if err := h.d.stop(ctx); err != nil {
			t.Errorf("%s: SIGTERM: %v", h.name, err)
		}
	}
	// Exactly once per group: b's log of each partition holds every
	// offset once, as produced, leaf for leaf equal to c's.
	mhCheckPrefixes(t, ctx, a.dir, b.dir, aSizes)
	checkKafkaLedgers(t, ctx, b.dir, c.dir, want, hwm)
}

// mhSetup makes the hosts' data directories, keys and configurations.
func mhSetup(t *testing.T, nw *netns.Network, broker string) (a, b, c *mhHost) {
	t.Helper()
	hs := make([]*mhHost, 3)
	for i, name := range []string{"a", "b", "c"} {
		dir := t.TempDir()
		hs[i] = &mhHost{name: name, group: "ledger", ns: nw.Hosts[i],
			dir: filepath.Join(dir, "data"), cfg: filepath.Join(dir, "auditd.yaml")}
		if name == "c" {
			hs[i].group = "replica"
		}
		if err := writeNewKey(filepath.Join(hs[i].dir, "auditd.key"), "auditd-"+name+".example"); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hs {
		cfg := mhConfig(h, broker)
		if h.name == "c" {
			cfg += mhPeers(hs[0], hs[1])
		}
		if err := os.WriteFile(h.cfg, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return hs[0], hs[1], hs[2]
}

// mhConfig is a host's serve configuration (docs/operations.md, Reference
// deployment), with short timings.
func mhConfig(h *mhHost, broker string) string {
	return fmt.Sprintf(`data_dir: %s
listen: 0.0.0.0:8080
kafka:
  brokers: [%s]
  topics: [payments]
  group: %s
  session_timeout: %s
  stall_window: %s
`, h.dir, broker, h.group, mhSessionTimeout, mhStallWindow)
}

// mhPeers is the checks section of the replica: a peer pass every 100ms
// against each host of the group.
func mhPeers(hs ...*mhHost) string {
	s := "checks:\n  peers:\n    interval: 100ms\n    list:\n"
	for _, h := range hs {
		s += fmt.Sprintf("      - url: http://%s:8080\n        key_file: %s\n", h.ns.Addr, filepath.Join(h.dir, "auditd.key.pub"))
	}
	return s
}

var mhServing = regexp.MustCompile(`msg="auditd serving"`)

// mhStart runs the daemon in h's namespace (ip netns exec) and waits until
// it serves and answers /healthz. The test reaches it on the namespace's
// loopback, through a socket opened inside the namespace, so it still can
// when the host's link is down.
func mhStart(t *testing.T, ctx context.Context, bin string, h *mhHost, run int) *kafkaDaemon {
	t.Helper()
	started := time.Now()
	cmd := h.ns.Cmd(bin, "serve", "--config", h.cfg, "--checkpoint-interval", "20ms", "--log-format", "text")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{run: run, cmd: cmd, url: "http://127.0.0.1:8080", stderr: &lineBuffer{}, exited: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{DialContext: h.ns.Dial, MaxIdleConnsPerHost: 4}, Timeout: 10 * time.Second}}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(nil, 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			d.stderr.add(sc.Text())
			if mhServing.MatchString(sc.Text()) {
				once.Do(func() { close(serving) })
			}
		}
		d.err = cmd.Wait()
		close(d.exited)
	}()
	kd := &kafkaDaemon{daemon: d}
	select {
	case <-serving:
	case <-d.exited:
		t.Fatalf("%s exited before serving: %v\n%s", h.name, d.err, strings.Join(d.stderr.lines(), "\n"))
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not serving after 30s", h.name)
	}
	mhWait(t, 30*time.Second, h.name+" /healthz", func() (bool, string) {
		code, body, err := d.get(ctx, "/healthz")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
	})
	kd.startup = time.Since(started)
	return kd
}

// mhWait polls cond every 20ms until it holds, failing after limit with
// cond's last word.
func mhWait(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %s", what, limit, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mhProduce produces mhRate records a second until the returned function
// is called (which returns once production stopped).
func mhProduce(ctx context.Context, pp *paymentProducer) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				pp.produce(ctx, mhRate/20)
			}
		}
	}()
	return func() { close(stop); <-done }
}

var mhPartLine = regexp.MustCompile(`msg="kafka partition (assigned|released)" log=payments\.([0-9]+)`)

// mhOwned returns the partitions a daemon owns now, from the assignments
// and releases it logged, and how many assignment lines it logged.
func mhOwned(d *kafkaDaemon) ([]int, int) {
	own := map[int]bool{}
	assigned := 0
	for _, l := range d.stderr.lines() {
		if m := mhPartLine.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[2])
			own[p] = m[1] == "assigned"
			if m[1] == "assigned" {
				assigned++
			}
		}
	}
	var out []int
	for p, ok := range own {
		if ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, assigned
}

// mhAssigns returns, for each partition, the offsets a daemon started
// it at, one for each assignment it logged, in order.
func mhAssigns(d *kafkaDaemon) map[int][]int64 {
	out := map[int][]int64{}
	for _, l := range d.stderr.lines() {
		if m := assignedLine.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			off, _ := strconv.ParseInt(m[2], 10, 64)
			out[p] = append(out[p], off)
		}
	}
	return out
}

// mhSplit waits until a and b own disjoint, non-empty sets of partitions
// covering all six, each growing on its owner, and c has all six growing.
func mhSplit(t *testing.T, ctx context.Context, a, b, c *mhHost) (aParts, bParts []int) {
	t.Helper()
	h := &kafkaCrashHarness{t: t, hwm: make([]int64, mhPartitions)}
	base := map[*mhHost][]int64{a: h.sizes(ctx, a.d), b: h.sizes(ctx, b.d), c: h.sizes(ctx, c.d)}
	mhWait(t, 40*time.Second, "a and b splitting the partitions", func() (bool, string) {
		aParts, _ = mhOwned(a.d)
		bParts, _ = mhOwned(b.d)
		all := slices.Concat(aParts, bParts)
		slices.Sort(all)
		if len(aParts) == 0 || len(bParts) == 0 || len(slices.Compact(all)) != mhPartitions || len(all) != mhPartitions {
			return false, fmt.Sprintf("a owns %v, b owns %v", aParts, bParts)
		}
		for hh, parts := range map[*mhHost][]int{a: aParts, b: bParts, c: {0, 1, 2, 3, 4, 5}} {
			s := h.sizes(ctx, hh.d)
			for _, p := range parts {
				if s[p] <= base[hh][p] {
					return false, fmt.Sprintf("%s: partition %d not growing: %v", hh.name, p, s)
				}
			}
		}
		return true, ""
	})
	return aParts, bParts
}

// mhAgreed waits until c's peer check has agreed with peer at least once,
// and returns c's count of agreeing comparisons then.
func mhAgreed(t *testing.T, ctx context.Context, c, peer *mhHost, limit time.Duration) float64 {
	t.Helper()
	var n float64
	label := fmt.Sprintf(`peer="http://%s:8080"`, peer.ns.Addr)
	mhWait(t, limit, "c's peer check agreeing with "+peer.name, func() (bool, string) {
		m := scrapeAll(ctx, c.d)
		n = m.sum("auditd_peer_comparisons_total", `result="agree"`)
		withPeer := m.sum("auditd_peer_comparisons_total", label+`,result="agree"`)
		return withPeer > 0, fmt.Sprintf("agreeing comparisons %v, with %s %v", n, peer.name, withPeer)
	})
	return n
}

// mhOpen opens a stopped host's data directory with its key; the caller
// closes it.
func mhOpen(t *testing.T, dir string) *ledger.Store {
	t.Helper()
	k, _, err := loadOrCreateKey(filepath.Join(dir, "auditd.key"), "") // the key's own name
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(dir, k.signer, k.verifier)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return st
}

// mhLedgerSizes returns a stopped host's payments logs' sizes.
func mhLedgerSizes(t *testing.T, dir string) []int64 {
	t.Helper()
	st := mhOpen(t, dir)
	defer st.Close()
	out := make([]int64, mhPartitions)
	for p := range out {
		if l, err := st.Log(ingest.LogName("payments", int32(p))); err == nil {
			out[p] = int64(l.Size())
		}
	}
	return out
}

// mhFailover waits until b owns every one of aParts and has ledgered past
// a's last entry on each, and returns when b had been assigned them all
// and when it had ledgered past a on all, both counted from the kill.
func mhFailover(t *testing.T, ctx context.Context, b *mhHost, aParts []int, aSizes []int64, killed time.Time) (assigned, resumed time.Duration) {
	t.Helper()
	h := &kafkaCrashHarness{t: t, hwm: make([]int64, mhPartitions)}
	mhWait(t, 10*mhSessionTimeout+30*time.Second, "b taking a's partitions over", func() (bool, string) {
		own, _ := mhOwned(b.d)
		for _, p := range aParts {
			if !slices.Contains(own, p) {
				return false, fmt.Sprintf("b owns %v", own)
			}
		}
		if assigned == 0 {
			assigned = time.Since(killed)
		}
		s := h.sizes(ctx, b.d)
		for _, p := range aParts {
			if s[p] <= aSizes[p] {
				return false, fmt.Sprintf("b's sizes %v, a's at its kill %v", s, aSizes)
			}
		}
		return true, ""
	})
	return assigned, time.Since(killed)
}

// mhOutage takes b's link down until b answers /readyz 503 and both its
// stall window and session timeout have passed, checks it is alive and
// still not ready, brings the link back and waits until it is ready and
// ledgering again.
func mhOutage(t *testing.T, ctx context.Context, nw *netns.Network, b *mhHost) {
	t.Helper()
	h := &kafkaCrashHarness{t: t, hwm: make([]int64, mhPartitions)}
	down := time.Now()
	if err := nw.SetLink(b.ns, false); err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			_ = nw.SetLink(b.ns, true)
		}
	})
	readyz := func() (int, string) {
		code, body, err := b.d.get(ctx, "/readyz")
		if err != nil {
			return code, err.Error()
		}
		return code, strings.TrimSpace(string(body))
	}
	mhWait(t, 30*time.Second, "b not ready without its network", func() (bool, string) {
		code, body := readyz()
		return code == http.StatusServiceUnavailable, fmt.Sprintf("%d %s", code, body)
	})
	notReadyAfter := time.Since(down)
	// The outage lasts past both windows, so the source has both given up
	// on its session and tried to restart its consumer.
	time.Sleep(time.Until(down.Add(2 * max(mhStallWindow, mhSessionTimeout))))
	code, body := readyz()
	select {
	case <-b.d.exited:
		t.Fatalf("b exited without its network: %s", b.d.exitStatus())
	default:
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("b answers /readyz %d after %v without its network: %s", code, time.Since(down), body)
	}
	t.Logf("b without network: /readyz 503 after %v, alive and still 503 after %v: %.200s", notReadyAfter.Round(time.Millisecond), time.Since(down).Round(time.Millisecond), body)
	before := h.sizes(ctx, b.d)
	if err := nw.SetLink(b.ns, true); err != nil {
		t.Fatal(err)
	}
	restored = true
	up := time.Now()
	mhWait(t, 60*time.Second, "b ready and ledgering after its network returned", func() (bool, string) {
		code, body := readyz()
		s := h.sizes(ctx, b.d)
		return code == http.StatusOK && sum(s) > sum(before), fmt.Sprintf("%d %s, sizes %v (%v before)", code, body, s, before)
	})
	t.Logf("b back: ready and ledgering %v after its link came up", time.Since(up).Round(time.Millisecond))
}

// mhWaitSizes waits until h's logs reach the partitions' high watermarks.
func mhWaitSizes(t *testing.T, ctx context.Context, h *mhHost, hwm []int64) {
	t.Helper()
	kh := &kafkaCrashHarness{t: t, hwm: make([]int64, len(hwm))}
	mhWait(t, 60*time.Second, h.name+" catching up", func() (bool, string) {
		s := kh.sizes(ctx, h.d)
		return slicesEqual(s, hwm), fmt.Sprintf("sizes %v, partitions %v", s, hwm)
	})
}

// mhCheckRoots compares b's and c's signed checkpoints at the final sizes.
func mhCheckRoots(t *testing.T, ctx context.Context, b, c *mhHost, hwm []int64) {
	t.Helper()
	for p := range hwm {
		log := ingest.LogName("payments", int32(p))
		var cps [2]string
		for i, h := range []*mhHost{b, c} {
			mhWait(t, 10*time.Second, h.name+" checkpoint of "+log, func() (bool, string) {
				note, err := h.d.getText(ctx, "/v1/logs/"+log+"/checkpoint")
				if err != nil {
					return false, err.Error()
				}
				_, size, root, err := parseCheckpointText(note)
				cps[i] = fmt.Sprintf("%d %v", size, root)
				return err == nil && size == uint64(hwm[p]), cps[i]
			})
		}
		if cps[0] != cps[1] {
			t.Errorf("%s: the group (b) signed %s, the replica (c) %s", log, cps[0], cps[1])
		}
	}
}

// mhCheckPeers checks c's peer check: it agreed with b at a final size
// after agreeing with a before a's kill, and never found a fork, a bad
// checkpoint or a rollback.
func mhCheckPeers(t *testing.T, ctx context.Context, c, b *mhHost, hwm []int64, agreedBefore float64) {
	t.Helper()
	final := map[float64]bool{}
	for _, n := range hwm {
		final[float64(n)] = true
	}
	var m metricSamples
	label := fmt.Sprintf(`peer="http://%s:8080"`, b.ns.Addr)
	mhWait(t, 20*time.Second, "c's peer check agreeing with b at a final size", func() (bool, string) {
		m = scrapeAll(ctx, c.d)
		size := m.sum("auditd_peer_agreed_size", label)
		return final[size] && m.sum("auditd_peer_comparisons_total", `result="agree"`) > agreedBefore,
			fmt.Sprintf("agreed size %v, final sizes %v", size, hwm)
	})
	checkPeersNoFork(t, "c", m)
	var st struct {
		Findings       []any          `json:"findings"`
		FindingsByKind map[string]int `json:"findings_by_kind"`
	}
	if err := c.d.getJSON(ctx, "/v1/checks/peers", &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Findings) != 0 || len(st.FindingsByKind) != 0 {
		t.Errorf("c: peer findings %v %v", st.Findings, st.FindingsByKind)
	}
	t.Logf("c's peer check: %v passes ok, %v with a peer down, %v comparisons agreed (%v before a's kill)",
		m.sum("auditd_checks_runs_total", `checker="peers",result="ok"`), m.sum("auditd_checks_runs_total", `checker="peers",result="error"`),
		m.sum("auditd_peer_comparisons_total", `result="agree"`), agreedBefore)
}

// mhCheckPrefixes checks that a's log of each partition is a prefix of b's:
// where both hold an offset, the leaves are identical.
func mhCheckPrefixes(t *testing.T, ctx context.Context, aDir, bDir string, aSizes []int64) {
	t.Helper()
	as, bs := mhOpen(t, aDir), mhOpen(t, bDir)
	defer as.Close()
	defer bs.Close()
	overlap := 0
	for p, n := range aSizes {
		if n == 0 {
			continue
		}
		name := ingest.LogName("payments", int32(p))
		al, err := as.Log(name)
		if err != nil {
			t.Fatal(err)
		}
		bl, err := bs.Log(name)
		if err != nil {
			t.Fatal(err)
		}
		var leaves []merkle.Hash
		if err := bl.Entries(ctx, 0, uint64(n), func(r *ledger.Record) error {
			leaves = append(leaves, r.LeafHash)
			return nil
		}); err != nil {
			t.Fatalf("b %s: %v", name, err)
		}
		bad := 0
		if err := al.Entries(ctx, 0, uint64(n), func(r *ledger.Record) error {
			if r.LeafHash != leaves[r.Index] {
				if bad++; bad <= 5 {
					t.Errorf("%s entry %d: leaf %s on a, %s on b", name, r.Index, r.LeafHash, leaves[r.Index])
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("a %s: %v", name, err)
		}
		overlap += int(n)
	}
	t.Logf("a's logs %v: %d entries, each identical to b's at its offset", aSizes, overlap)
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
