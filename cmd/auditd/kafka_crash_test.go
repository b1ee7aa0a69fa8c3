package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// TestKafkaCrashRecovery fills a Kafka-protocol broker (kfake, in this
// process, on loopback), runs the daemon binary consuming it, kills it with
// SIGKILL at random moments of the consumption, restarts it on the same data
// directory each time and lets it finish. With the daemon stopped it opens
// the ledger and checks that every offset of every partition is ledgered
// exactly once (entry i of payments.p is offset i), that each entry is the
// record the producer sent, and that every root, at every size, equals that
// of a reference run that consumed the same partitions without a crash.
//
// Each restart joins a new consumer group, which shows that consumption
// resumes from the ledger's position: the new group has no committed
// offsets. (Restarts in the same group, which static membership makes
// immediate, are TestKafkaCrashLoopSameGroup's.)
func TestKafkaCrashRecovery(t *testing.T) {
	records, kills := 100_000, 12
	switch {
	case testing.Short():
		records, kills = 20_000, 4
	case raceEnabled():
		// The broker, the producer and the checks run in this process,
		// which the race detector slows several times (Pebble's race-build
		// invariants most: ledger.Open reads each entry since the last
		// index chunk); the daemon is built without it.
		records, kills = 24_000, 8
	}
	// A bound for the whole test, so a hang fails instead of blocking.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0xcafe))
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
	start := time.Now()
	want, hwm := fillPayments(t, ctx, broker, records, rng.Uint64())
	t.Logf("produced %d records in %v; high watermarks %v", records, time.Since(start).Round(time.Millisecond), hwm)
	<-built
	t.Logf("binary built %v after the start", time.Since(start).Round(time.Millisecond))
	if bin == "" {
		bin = buildDaemon(t, ctx) // again, to report the error
	}

	h := &kafkaCrashHarness{t: t, bin: bin, broker: broker, hwm: hwm}
	t.Cleanup(h.cleanup)
	crashDir := filepath.Join(t.TempDir(), "crash")
	var total int64
	for _, n := range hwm {
		total += n
	}

	for run := 0; run < kills; run++ {
		// Each run ledgers in batches of another size: the leaves must
		// not depend on where the commits fell.
		batch := []int{256, 1000, 4096}[rng.IntN(3)]
		d := h.start(ctx, run, crashDir, fmt.Sprintf("auditd-crash-%d", run), batch)
		sizes := h.sizes(ctx, d)
		before := sum(sizes)
		// Kill at a random moment: now and then in the first few hundred
		// milliseconds (group join, offset adjustment, first fetches),
		// otherwise once a random share of the rest has been ledgered.
		var how string
		if left := total - before; left < 1000 || rng.IntN(4) == 0 {
			delay := time.Duration(rng.IntN(300)) * time.Millisecond
			time.Sleep(delay)
			how = fmt.Sprintf("after %v", delay)
		} else {
			target := before + max(1, int64(float64(left)/float64(kills-run)*(0.1+0.9*rng.Float64())))
			how = fmt.Sprintf("at %d entries", target)
			deadline := time.Now().Add(20 * time.Second)
			for sum(h.sizes(ctx, d)) < target && time.Now().Before(deadline) {
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
			}
		}
		m := h.scrape(ctx, d)
		d.kill()
		h.dead = append(h.dead, d)
		h.cur = nil
		t.Logf("run %d: batches of %d, serving %v after exec, resumed at %s = %d entries; SIGKILL %s (%s); redelivered %v, conflicts %v",
			run, batch, d.startup.Round(time.Millisecond), h.fromOffsets(d), before, how, d.exitStatus(),
			m["auditd_kafka_redelivered_records_total"], m["auditd_kafka_offset_conflicts_total"])
		if m["auditd_kafka_redelivered_records_total"] != 0 || m["auditd_kafka_offset_conflicts_total"] != 0 {
			t.Errorf("run %d: a restart re-read offsets the ledger holds: it should resume from the ledger's position", run)
		}
	}

	// The last run finishes whatever the kills left.
	d := h.start(ctx, kills, crashDir, fmt.Sprintf("auditd-crash-%d", kills), 4096)
	h.finish(ctx, d)
	t.Logf("run %d: resumed at %s and finished", kills, h.fromOffsets(d))
	h.checkKilledGroups(ctx, kills)

	refDir := filepath.Join(t.TempDir(), "reference")
	start = time.Now()
	ref := h.start(ctx, -1, refDir, "auditd-reference", 0)
	h.finish(ctx, ref)
	t.Logf("reference run: %d records in %v without a crash", total, time.Since(start).Round(time.Millisecond))
	h.checkGroupOffsets(ctx, "auditd-reference")
	if t.Failed() {
		t.FailNow()
	}
	start = time.Now()
	checkKafkaLedgers(t, ctx, crashDir, refDir, want, hwm)
	t.Logf("ledgers checked in %v", time.Since(start).Round(time.Millisecond))
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// buildDaemonQuiet is buildDaemon for a goroutine: "" on failure.
func buildDaemonQuiet(ctx context.Context, dir string) string {
	bin := filepath.Join(dir, "auditd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/auditd/auditd/cmd/auditd")
	if err := cmd.Run(); err != nil {
		return ""
	}
	return bin
}

// wantRecord is what the ledger must hold for one produced record.
type wantRecord struct {
	id      string
	key     []byte
	time    time.Time
	headers []merkle.Header
	value   []byte
	marks   uint8
}

// fillPayments produces n payment records to the payments topic: JSON values
// of about 200 bytes, keyed by account, most with an id header; a few with
// no key, no id, an empty id, an id an earlier record of the partition
// took, an empty value, text that is not JSON, or bytes that are not UTF-8.
// It returns what each partition's log must hold, by offset, and the
// partitions' high watermarks.
func fillPayments(t *testing.T, ctx context.Context, broker string, n int, seed uint64) ([][]wantRecord, []int64) {
	t.Helper()
	pp := newPaymentProducer(t, broker, seed)
	defer pp.close()
	pp.produce(ctx, n)
	return pp.finish(ctx)
}

// paymentProducer produces the records fillPayments describes, in as many
// calls as wanted (records keep arriving while a daemon consumes), and
// then says what the logs must hold.
type paymentProducer struct {
	t     *testing.T
	cl    *kgo.Client
	rng   *rand.Rand
	base  time.Time
	byKey map[string][]string // ids given to each key, for reuse
	n     int                 // records produced so far

	wg       sync.WaitGroup
	mu       sync.Mutex
	out      []producedRecord
	firstErr error
}

type producedRecord struct {
	rec  *kgo.Record
	part int32
	off  int64
}

func newPaymentProducer(t *testing.T, broker string, seed uint64) *paymentProducer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("payments"),
		kgo.MaxBufferedRecords(100_000), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return &paymentProducer{t: t, cl: cl, rng: rand.New(rand.NewPCG(seed, 1)),
		base: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), byKey: map[string][]string{}}
}

func (pp *paymentProducer) close() { pp.cl.Close() }

// produce sends n more records without waiting for their acknowledgments.
func (pp *paymentProducer) produce(ctx context.Context, n int) {
	rng, byKey := pp.rng, pp.byKey
	for range n {
		i := pp.n
		pp.n++
		acct := rng.IntN(500)
		r := &kgo.Record{Timestamp: pp.base.Add(time.Duration(i) * time.Millisecond)}
		key := "acct-" + strconv.Itoa(acct)
		if rng.IntN(50) != 0 {
			r.Key = []byte(key)
		}
		id := fmt.Sprintf("pay-%07d", i)
		switch x := rng.IntN(2000); {
		case x < 100: // no id header
			id = ""
		case x < 120:
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "id", Value: []byte{}})
			id = ""
		case x < 121 && r.Key != nil && len(byKey[key]) > 0: // a producer retry's id
			id = byKey[key][rng.IntN(len(byKey[key]))]
		}
		if id != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "id", Value: []byte(id)})
			if r.Key != nil {
				byKey[key] = append(byKey[key], id)
			}
		}
		if rng.IntN(3) == 0 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "trace", Value: fmt.Appendf(nil, "%016x", rng.Uint64())})
		}
		switch x := rng.IntN(200); {
		case x == 0:
			r.Value = nil
		case x == 1:
			r.Value = []byte("plain text, not json " + strconv.Itoa(i))
		case x == 2:
			r.Value = []byte{0xff, 0xfe, 'x', byte(i)}
		default:
			v := fmt.Appendf(nil, `{"n":%d,"type":"transfer","from":"acct-%d","to":"acct-%d","amount":%d,"currency":"EUR","memo":"`,
				i, acct, rng.IntN(500), 1+rng.IntN(100_000))
			for len(v) < 198 {
				v = append(v, loadtest.Alnum[rng.IntN(len(loadtest.Alnum))])
			}
			r.Value = append(v, '"', '}')
		}
		pp.wg.Add(1)
		pp.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer pp.wg.Done()
			pp.mu.Lock()
			defer pp.mu.Unlock()
			if err != nil && pp.firstErr == nil {
				pp.firstErr = err
			}
			pp.out = append(pp.out, producedRecord{rec: r, part: r.Partition, off: r.Offset})
		})
	}
}

// finish waits for every record's acknowledgment and returns what each
// partition's log must hold, by offset, and the partitions' high
// watermarks.
func (pp *paymentProducer) finish(ctx context.Context) ([][]wantRecord, []int64) {
	t := pp.t
	t.Helper()
	pp.wg.Wait()
	if pp.firstErr != nil {
		t.Fatalf("produce: %v", pp.firstErr)
	}
	adm := kadm.NewClient(pp.cl)
	ends, err := adm.ListEndOffsets(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	hwm := make([]int64, len(ends["payments"]))
	ends.Each(func(o kadm.ListedOffset) { hwm[o.Partition] = o.Offset })
	want := make([][]wantRecord, len(hwm))
	for p := range want {
		want[p] = make([]wantRecord, hwm[p])
	}
	if n := sum(hwm); n != int64(pp.n) || len(pp.out) != pp.n {
		t.Fatalf("produced %d records (%d acknowledged), the partitions hold %d", pp.n, len(pp.out), n)
	}
	for _, pr := range pp.out {
		if pr.part < 0 || int(pr.part) >= len(hwm) || pr.off < 0 || pr.off >= hwm[pr.part] {
			t.Fatalf("record produced to partition %d offset %d, outside the watermarks %v", pr.part, pr.off, hwm)
		}
		want[pr.part][pr.off] = wantOf(pr.rec)
	}
	// The id a record gets depends on the records before it in its
	// partition: a taken id is replaced by the position.
	for p, ws := range want {
		taken := map[string]bool{}
		for off := range ws {
			w := &ws[off]
			pos := fmt.Sprintf("payments/%d/%d", p, off)
			if w.id == "" {
				w.id = pos
			} else if taken[w.id] {
				w.id = pos
				w.marks |= merkle.MarkDuplicateID
			}
			taken[w.id] = true
		}
	}
	return want, hwm
}

// wantOf is the entry a record must become, except that its id is the
// header's (or "" when the position must stand in).
func wantOf(r *kgo.Record) wantRecord {
	w := wantRecord{key: r.Key, time: r.Timestamp, value: r.Value}
	for _, h := range r.Headers {
		if h.Key == "id" && w.id == "" && len(h.Value) > 0 {
			w.id = string(h.Value)
		}
		w.headers = append(w.headers, merkle.Header{Key: h.Key, Value: h.Value})
	}
	switch {
	case len(r.Value) == 0:
		w.marks = merkle.MarkEmpty | merkle.MarkNotJSON
	case !utf8.Valid(r.Value):
		w.marks = merkle.MarkNotUTF8 | merkle.MarkNotJSON
	case r.Value[0] != '{':
		w.marks = merkle.MarkNotJSON
	}
	return w
}

type kafkaCrashHarness struct {
	t      *testing.T
	bin    string
	broker string
	hwm    []int64
	cur    *kafkaDaemon
	dead   []*kafkaDaemon
}

func (h *kafkaCrashHarness) cleanup() {
	if h.cur != nil {
		h.cur.kill()
		h.dead = append(h.dead, h.cur)
	}
	if !h.t.Failed() {
		return
	}
	for _, d := range h.dead[max(0, len(h.dead)-3):] {
		ls := d.stderr.lines()
		h.t.Logf("stderr tail of daemon run %d (%s):\n%s", d.run, d.exitStatus(), strings.Join(ls[max(0, len(ls)-40):], "\n"))
	}
}

// start runs the daemon on dataDir consuming payments in group, in ledger
// requests of batch records (0: the default), and waits until it serves.
func (h *kafkaCrashHarness) start(ctx context.Context, run int, dataDir, group string, batch int) *kafkaDaemon {
	h.t.Helper()
	args := []string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "20ms", "--log-format", "text",
		"--kafka-brokers", h.broker, "--kafka-topics", "payments", "--kafka-group", group}
	if batch > 0 {
		cfg := filepath.Join(h.t.TempDir(), "auditd.yaml")
		if err := os.WriteFile(cfg, fmt.Appendf(nil, "kafka:\n  batch_records: %d\n", batch), 0o600); err != nil {
			h.t.Fatal(err)
		}
		args = append(args, "--config", cfg)
	}
	d, err := startKafkaDaemon(ctx, h.bin, run, args...)
	if d != nil {
		h.cur = d
	}
	if err != nil {
		h.t.Fatalf("run %d: daemon did not start on the data dir the previous run left: %v", run, err)
	}
	return d
}

// sizes returns the payments logs' sizes (missing logs: 0).
func (h *kafkaCrashHarness) sizes(ctx context.Context, d *kafkaDaemon) []int64 {
	var logs []struct {
		Name string `json:"name"`
		Size int64  `json:"size"`
	}
	out := make([]int64, len(h.hwm))
	if err := d.getJSON(ctx, "/v1/logs", &logs); err != nil {
		return out
	}
	for _, l := range logs {
		if p, ok := strings.CutPrefix(l.Name, "payments."); ok {
			if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(out) {
				out[i] = l.Size
			}
		}
	}
	return out
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// finish waits until every partition's log reaches its high watermark,
// checks what GET /v1/logs/{log} and /readyz say, and stops the daemon
// with SIGTERM.
func (h *kafkaCrashHarness) finish(ctx context.Context, d *kafkaDaemon) {
	t := h.t
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := h.sizes(ctx, d)
		if slicesEqual(s, h.hwm) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %d: logs at sizes %v after 60s; the partitions end at %v", d.run, s, h.hwm)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var unknown []string
	wait := time.Now().Add(3 * time.Second)
	for p, end := range h.hwm {
		// The position follows the ledger; the high watermark comes with
		// a fetch that returns records, so give it a moment.
		var st struct {
			Source *ingest.Status `json:"source"`
		}
		name := ingest.LogName("payments", int32(p))
		for {
			if err := d.getJSON(ctx, "/v1/logs/"+name, &st); err != nil {
				t.Fatal(err)
			}
			if st.Source != nil && st.Source.HighWatermark == end || time.Now().After(wait) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		s := st.Source
		switch {
		case s == nil:
			t.Errorf("run %d: GET /v1/logs/%s has no source", d.run, name)
		case s.Topic != "payments" || s.Partition != int32(p) || s.Next != end || s.LastOffset != end-1 || !s.Assigned ||
			s.GapOffsets != 0 || s.GapCount != 0 || s.Conflicts != 0:
			t.Errorf("run %d: GET /v1/logs/%s source %+v; want payments/%d next %d, assigned, no gaps or conflicts", d.run, name, *s, p, end)
		case s.HighWatermark == -1 && s.Lag == -1:
			// No fetch has returned records since the start: a daemon
			// restarted at the end of a partition does not know its
			// watermark until a new record arrives.
			unknown = append(unknown, name)
		case s.HighWatermark != end || s.Lag != 0:
			t.Errorf("run %d: GET /v1/logs/%s: high watermark %d lag %d, want %d and 0", d.run, name, s.HighWatermark, s.Lag, end)
		}
	}
	if len(unknown) > 0 {
		t.Logf("run %d: high watermark and lag unknown (-1) for %v: nothing fetched since the start", d.run, unknown)
	}
	if code, body, err := d.get(ctx, "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("run %d: /readyz: %d %v %s", d.run, code, err, body)
	}
	if err := d.stop(ctx); err != nil {
		t.Errorf("run %d: SIGTERM: %v", d.run, err)
	}
	h.dead = append(h.dead, d)
	h.cur = nil
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkGroupOffsets checks that a group that consumed every partition and
// stopped cleanly has committed the partitions' ends.
func (h *kafkaCrashHarness) checkGroupOffsets(ctx context.Context, group string) {
	offs := h.groupOffsets(ctx, group)
	for p, end := range h.hwm {
		if o, ok := offs[int32(p)]; !ok || o != end {
			h.t.Errorf("group %s: committed offset of payments/%d is %d (committed: %v), want %d", group, p, o, ok, end)
		}
	}
}

// checkKilledGroups checks that no killed run's group committed an offset
// beyond what its ledger held: the group offset follows the ledger, never
// leads it. The ledger's position after run r is where a later run resumed.
func (h *kafkaCrashHarness) checkKilledGroups(ctx context.Context, kills int) {
	committed := 0
	for r := 0; r < kills; r++ {
		group := fmt.Sprintf("auditd-crash-%d", r)
		for p, o := range h.groupOffsets(ctx, group) {
			committed++
			for _, later := range h.dead[r+1:] {
				if next, ok := resumeOffsets(later)[p]; ok {
					if o > next {
						h.t.Errorf("group %s committed offset %d of payments/%d, beyond the ledger's position %d after the kill", group, o, p, next)
					}
					break
				}
			}
		}
	}
	h.t.Logf("killed runs' groups: %d partition offsets committed, none beyond the ledger", committed)
}

func (h *kafkaCrashHarness) groupOffsets(ctx context.Context, group string) map[int32]int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // killed before it joined
	}
	if err != nil {
		h.t.Fatalf("group %s offsets: %v", group, err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == "payments" && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

var metricLine = regexp.MustCompile(`^(auditd_kafka_[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$`)

// scrape sums the daemon's auditd_kafka_* metrics over their labels.
func (h *kafkaCrashHarness) scrape(ctx context.Context, d *kafkaDaemon) map[string]float64 {
	out := map[string]float64{}
	_, body, err := d.get(ctx, "/metrics")
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if m := metricLine.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[3], 64)
			out[m[1]] += v
		}
	}
	return out
}

var assignedLine = regexp.MustCompile(`msg="kafka partition assigned" log=payments\.([0-9]+) from_offset=([0-9]+)`)

// resumeOffsets returns the offsets a run started its partitions at, as it
// logged them.
func resumeOffsets(d *kafkaDaemon) map[int32]int64 {
	out := map[int32]int64{}
	for _, l := range d.stderr.lines() {
		if m := assignedLine.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			out[int32(p)], _ = strconv.ParseInt(m[2], 10, 64)
		}
	}
	return out
}

// fromOffsets lists the offsets a run started its partitions at.
func (h *kafkaCrashHarness) fromOffsets(d *kafkaDaemon) string {
	offs := resumeOffsets(d)
	if len(offs) == 0 {
		return "(no partition assigned yet)"
	}
	parts := make([]string, len(h.hwm))
	for p := range parts {
		parts[p] = "?"
		if o, ok := offs[int32(p)]; ok {
			parts[p] = strconv.FormatInt(o, 10)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// kafkaDaemon is one run of the daemon binary consuming Kafka.
type kafkaDaemon struct {
	*daemon
	startup time.Duration // from exec to serving HTTP and healthy
}

// startKafkaDaemon starts the daemon with args and records how long it
// took to serve.
func startKafkaDaemon(ctx context.Context, bin string, run int, args ...string) (*kafkaDaemon, error) {
	started := time.Now()
	d, err := startDaemonArgs(ctx, bin, run, args...)
	if d == nil {
		return nil, err
	}
	return &kafkaDaemon{daemon: d, startup: time.Since(started)}, err
}

// checkKafkaLedgers opens both data directories with the ledger package and
// compares each partition's log with what was produced and with the
// reference, entry by entry and root by root.
func checkKafkaLedgers(t *testing.T, ctx context.Context, crashDir, refDir string, want [][]wantRecord, hwm []int64) {
	crash, ref := openLedger(t, crashDir), openLedger(t, refDir)
	for p := range hwm {
		name := ingest.LogName("payments", int32(p))
		cl, err := crash.Log(name)
		if err != nil {
			t.Fatalf("crash run: %v", err)
		}
		rl, err := ref.Log(name)
		if err != nil {
			t.Fatalf("reference run: %v", err)
		}
		size := uint64(hwm[p])
		if cl.Size() != size || rl.Size() != size {
			t.Errorf("%s: size %d after the crashes, %d in the reference; the partition holds %d records", name, cl.Size(), rl.Size(), size)
			continue
		}
		pos, err := ingest.DecodePosition(cl.SourcePosition())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if pos.Next != hwm[p] || pos.GapOffsets != 0 || pos.Conflicts != 0 {
			t.Errorf("%s: recorded position %+v; want next %d, no gaps, no conflicts", name, *pos, hwm[p])
		}
		bad := 0
		var flagged, dupIDs int
		// The reference's leaf hashes first, then the crashed log's
		// entries one by one against them and against what was produced.
		refLeaves := make([]merkle.Hash, 0, size)
		err = rl.Entries(ctx, 0, size, func(r *ledger.Record) error {
			refLeaves = append(refLeaves, r.LeafHash)
			return nil
		})
		if err != nil {
			t.Fatalf("%s reference: %v", name, err)
		}
		err = cl.Entries(ctx, 0, size, func(c *ledger.Record) error {
			i := c.Index
			if msg := entryMismatch(c, name, int32(p), want[p][i]); msg != "" {
				if bad++; bad <= 10 {
					t.Errorf("%s: entry %d: %s", name, i, msg)
				}
			}
			if c.LeafHash != refLeaves[i] {
				if bad++; bad <= 10 {
					t.Errorf("%s: entry %d has leaf %s after the crashes, %s in the reference", name, i, c.LeafHash, refLeaves[i])
				}
			}
			if c.Leaf.Marks != 0 {
				flagged++
			}
			if c.Leaf.Marks&merkle.MarkDuplicateID != 0 {
				dupIDs++
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d entries wrong", name, bad, size)
			continue
		}
		// Equal leaves make equal trees. The scrub of each ledger rebuilds
		// its tree from its entries and compares every stored tile (which
		// proofs and roots are read from) and every checkpoint's root with
		// it, so a clean scrub of both means equal roots at every size;
		// the stored roots are also compared directly at every
		// checkpoint's size and a sample of the others.
		for run, st := range map[string]*ledger.Store{"crash run": crash, "reference run": ref} {
			k := kafkaLedgerKeys[st]
			var fs crashFindings
			src := checkers.OnlyLog(checkers.StoreSource(st), name)
			for _, c := range []checkers.Checker{checkers.NewScrub(src, k.verifier), checkers.NewCheckpointAudit(src, k.verifier)} {
				if err := c.Run(ctx, &fs); err != nil {
					t.Fatalf("%s %s: %s: %v", run, name, c.Name(), err)
				}
			}
			for _, f := range fs.list {
				t.Errorf("%s: %v", run, f)
			}
			if fs.entries != size {
				t.Errorf("%s %s: the scrub checked %d entries of %d", run, name, fs.entries, size)
			}
		}
		cps, err := cl.Checkpoints(0, size, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		atCheckpoint := map[uint64]bool{}
		for _, cp := range cps {
			atCheckpoint[cp.Size] = true
		}
		roots := 0
		for n := uint64(1); n <= size; n++ {
			if n%97 != 0 && n != size && !atCheckpoint[n] {
				continue
			}
			roots++
			a, err := cl.RootAt(n)
			if err != nil {
				t.Fatalf("%s: root at %d: %v", name, n, err)
			}
			b, err := rl.RootAt(n)
			if err != nil {
				t.Fatalf("%s reference: root at %d: %v", name, n, err)
			}
			if a != b {
				t.Fatalf("%s: root at size %d is %s after the crashes, %s in the reference", name, n, a, b)
			}
		}
		// Every checkpoint signed before, between and after the kills is
		// over the reference's tree.
		for _, cp := range cps {
			if r, err := rl.RootAt(cp.Size); err != nil || r != cp.Root {
				t.Errorf("%s: checkpoint at size %d has root %s; the reference's tree at that size %s (%v)", name, cp.Size, cp.Root, r, err)
			}
		}
		t.Logf("%s: %d entries, offsets 0..%d each once, %d marked (%d duplicate ids), leaves and roots equal to the reference (stored roots compared at %d sizes), %d checkpoints signed across the kills over the reference's tree",
			name, size, size-1, flagged, dupIDs, roots, len(cps))
	}
}

// entryMismatch describes how rec differs from what record w of the
// partition must have become, or returns "".
func entryMismatch(rec *ledger.Record, log string, part int32, w wantRecord) string {
	l := &rec.Leaf
	s := l.Source
	switch {
	case s == nil || s.Topic != "payments" || s.Partition != part || uint64(s.Offset) != rec.Index:
		return fmt.Sprintf("source %+v", s)
	case l.Log != log || l.ID != w.id:
		return fmt.Sprintf("log %q id %q, want %q %q", l.Log, l.ID, log, w.id)
	case l.HasKey != (w.key != nil) || !bytes.Equal(l.Key, w.key):
		return fmt.Sprintf("key %q (has %v), want %q", l.Key, l.HasKey, w.key)
	case l.Time != w.time.UnixNano() || l.TimeAssigned:
		return fmt.Sprintf("time %d (assigned %v), want %d", l.Time, l.TimeAssigned, w.time.UnixNano())
	case l.Marks != w.marks:
		return fmt.Sprintf("marks %v, want %v", merkle.MarkNames(l.Marks), merkle.MarkNames(w.marks))
	case l.PayloadSHA256 != sha256.Sum256(w.value) || !bytes.Equal(rec.Payload, w.value):
		return fmt.Sprintf("payload %.60q, want %.60q", rec.Payload, w.value)
	case len(l.Headers) != len(w.headers):
		return fmt.Sprintf("%d headers, want %d", len(l.Headers), len(w.headers))
	}
	for i, h := range l.Headers {
		if h.Key != w.headers[i].Key || !bytes.Equal(h.Value, w.headers[i].Value) {
			return fmt.Sprintf("header %d %q=%q, want %q=%q", i, h.Key, h.Value, w.headers[i].Key, w.headers[i].Value)
		}
	}
	return ""
}

// kafkaLedgerKeys holds the key of each store openLedger opened.
var kafkaLedgerKeys = map[*ledger.Store]*signingKey{}

// openLedger opens a stopped daemon's data directory with its own key.
func openLedger(t *testing.T, dir string) *ledger.Store {
	t.Helper()
	k, _, err := loadOrCreateKey(filepath.Join(dir, "auditd.key"), "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(dir, k.signer, k.verifier)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	kafkaLedgerKeys[st] = k
	t.Cleanup(func() { st.Close(); delete(kafkaLedgerKeys, st) })
	return st
}
