package rederive

// Helpers of the runner and daemon tests: a real ledger of transfer events,
// an oracle that computes the balances in plain Go, derived stores in the
// real PostgreSQL and Redis, and exact expectations of a report.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/rederive/store/storetest"
)

// rtT0 is the time of entry 0 of every test log; entry i is i seconds
// later.
var rtT0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// rtTime is the event time of entry index of a test log.
func rtTime(index int) time.Time { return rtT0.Add(time.Duration(index) * time.Second) }

// rtEvent is one transfer event. Raw, if set, is the payload instead (a
// malformed event the derivation fails on and the oracle skips).
type rtEvent struct {
	From, To string
	Amount   int64
	Raw      string
}

func (e rtEvent) payload() []byte {
	if e.Raw != "" {
		return []byte(e.Raw)
	}
	return fmt.Appendf(nil, `{"type":"transfer","from":%q,"to":%q,"amount":%d}`, e.From, e.To, e.Amount)
}

// rtTransfers returns n transfers between accounts prefix0..prefix(k-1),
// the same for the same seed.
func rtTransfers(seed uint64, n, accounts int, prefix string) []rtEvent {
	rng := mrand.New(mrand.NewPCG(seed, seed^0x5eed))
	evs := make([]rtEvent, n)
	for i := range evs {
		from := rng.IntN(accounts)
		to := (from + 1 + rng.IntN(accounts-1)) % accounts
		evs[i] = rtEvent{
			From:   fmt.Sprintf("%s%d", prefix, from),
			To:     fmt.Sprintf("%s%d", prefix, to),
			Amount: int64(rng.IntN(1000) + 1),
		}
	}
	return evs
}

// rtBalances is the oracle: the balance of every account over evs, in
// plain Go, leaving out the entries skip says to (nil: none).
func rtBalances(evs []rtEvent, skip func(i int) bool) map[string]int64 {
	out := map[string]int64{}
	for i, e := range evs {
		if e.Raw != "" || skip != nil && skip(i) {
			continue
		}
		out[e.From] -= e.Amount
		out[e.To] += e.Amount
	}
	return out
}

// rtMerge returns the balances of several logs' events together.
func rtMerge(ms ...map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, m := range ms {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// rtLedger is a real ledger in t.TempDir(), signing a checkpoint within
// milliseconds of each append.
type rtLedger struct {
	store    *ledger.Store
	verifier note.Verifier
	events   map[string][]rtEvent // appended, by log
}

// newRTLedger opens the ledger; opts override the defaults.
func newRTLedger(t testing.TB, opts ...ledger.Option) *rtLedger {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "rederive-runner-test.example")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]ledger.Option{ledger.WithCheckpointInterval(5 * time.Millisecond), ledger.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	s, err := ledger.Open(t.TempDir(), signer, verifier, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the ledger: %v", err)
		}
	})
	return &rtLedger{store: s, verifier: verifier, events: map[string][]rtEvent{}}
}

// log returns the named log, creating it if needed.
func (l *rtLedger) log(t testing.TB, name string) *ledger.Log {
	t.Helper()
	lg, err := l.store.Log(name)
	if err == nil {
		return lg
	}
	if lg, err = l.store.CreateLog(name); err != nil {
		t.Fatalf("create log %s: %v", name, err)
	}
	return lg
}

// append appends evs to the named log and waits for the checkpoint that
// covers them, so a run pins them.
func (l *rtLedger) append(t testing.TB, name string, evs []rtEvent) {
	t.Helper()
	size := l.appendUnsigned(t, name, evs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, err := l.log(t, name).WaitCheckpoint(ctx, size)
	if err != nil {
		t.Fatalf("checkpoint of %s: %v", name, err)
	}
	if cp.Size != size {
		t.Fatalf("checkpoint of %s at %d, want %d", name, cp.Size, size)
	}
}

// appendUnsigned appends evs to the named log without waiting for a
// checkpoint and returns the log's new size. Entry i has id "<log>-<i>"
// and time rtTime(i).
func (l *rtLedger) appendUnsigned(t testing.TB, name string, evs []rtEvent) uint64 {
	t.Helper()
	lg := l.log(t, name)
	start := int(lg.Size())
	es := make([]ledger.Entry, len(evs))
	for i, e := range evs {
		idx := start + i
		es[i] = ledger.Entry{ID: rtID(name, idx), Time: rtTime(idx), Payload: e.payload(), PayloadJSON: e.Raw == ""}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := lg.Append(ctx, es); err != nil {
		t.Fatalf("append to %s: %v", name, err)
	}
	l.events[name] = append(l.events[name], evs...)
	return uint64(start + len(evs))
}

func rtID(log string, index int) string { return fmt.Sprintf("%s-%03d", log, index) }

// root returns the root of the named log's tree of size n.
func (l *rtLedger) root(t testing.TB, name string, n uint64) merkle.Hash {
	t.Helper()
	r, err := l.log(t, name).RootAt(n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkpoint returns the named log's latest signed checkpoint.
func (l *rtLedger) checkpoint(t testing.TB, name string) *ledger.SignedCheckpoint {
	t.Helper()
	cp := l.log(t, name).Checkpoint()
	if cp == nil {
		t.Fatalf("log %s has no checkpoint", name)
	}
	return cp
}

// leaf returns a function that reads an entry's leaf bytes, as an
// outsider gets them from the entries API.
func (l *rtLedger) leaf(t testing.TB) func(log string, index int64) []byte {
	return func(log string, index int64) []byte {
		t.Helper()
		r, err := l.log(t, log).Entry(uint64(index))
		if err != nil {
			t.Fatal(err)
		}
		return r.LeafBytes
	}
}

// runner returns a runner over l with the bucket b (nil: stateless).
func (l *rtLedger) runner(b *ledger.Bucket) *Runner {
	return NewRunner(LocalLedger{l.store}, WithBucket(b), WithWorkers(2), WithLogger(slog.New(slog.DiscardHandler)))
}

func (l *rtLedger) bucket(t testing.TB) *ledger.Bucket {
	t.Helper()
	b, err := l.store.Bucket("derive")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rtSpec is the balances derivation over sources, checked against store:
// no grace, confirmed at once, lineage of 5, no error budget.
func rtSpec(name string, st store.Config, sources ...string) *spec.Spec {
	if len(sources) == 0 {
		sources = []string{"payments"}
	}
	return &spec.Spec{
		Name:         name,
		Sources:      sources,
		Decode:       "json",
		Filter:       `event.type == "transfer"`,
		Key:          `[event.from, event.to]`,
		Initial:      `0`,
		Step:         `key == event.from ? state - event.amount : state + event.amount`,
		Store:        st,
		ConfirmRuns:  1,
		Lineage:      5,
		Interval:     store.Duration(time.Hour),
		FullInterval: store.Duration(time.Hour),
	}
}

func rtJob(t testing.TB, s *spec.Spec) Job {
	t.Helper()
	d, err := spec.Compile(s)
	if err != nil {
		t.Fatalf("compile %s: %v", s.Name, err)
	}
	return Job{Spec: s, Derivation: d}
}

// rtRun runs job and fails the test if the run itself fails.
func rtRun(t testing.TB, r *Runner, job Job, full bool) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := r.Run(ctx, job, full)
	if err != nil {
		t.Fatalf("run %s: %v", job.Spec.Name, err)
	}
	if rep == nil {
		t.Fatalf("run %s: no report", job.Spec.Name)
	}
	return rep
}

// rtPG is a derived store in the real PostgreSQL: a table (key text,
// balance numeric) of its own, dropped when the test ends.
type rtPG struct {
	conn  *pgx.Conn
	table string // quoted
}

func newRTPG(t testing.TB) *rtPG {
	t.Helper()
	conn := storetest.PostgresConn(t)
	return &rtPG{conn: conn, table: storetest.PostgresTable(t, conn, "key text, balance numeric")}
}

func (p *rtPG) config() store.Config {
	return store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Table: strings.Trim(p.table, `"`)}}
}

// set replaces the table's rows by balances.
func (p *rtPG) set(t testing.TB, balances map[string]int64) {
	t.Helper()
	storetest.Exec(t, p.conn, "DELETE FROM "+p.table)
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(balances)) {
		lines = append(lines, k+"\t"+strconv.FormatInt(balances[k], 10))
	}
	storetest.Copy(t, p.conn, p.table, lines)
}

func (p *rtPG) exec(t testing.TB, sql string) {
	t.Helper()
	storetest.Exec(t, p.conn, strings.ReplaceAll(sql, "$T", p.table))
}

// rtRedis is a derived store in the real Redis: keys under a prefix of its
// own, deleted when the test ends.
type rtRedis struct {
	client *redis.Client
	prefix string
	typ    string // "hash" (field balance) or "json"
}

func newRTRedis(t testing.TB, typ string) *rtRedis {
	t.Helper()
	c, prefix := storetest.RedisClient(t)
	return &rtRedis{client: c, prefix: prefix, typ: typ}
}

func (r *rtRedis) config() store.Config {
	return store.Config{Redis: &store.RedisConfig{Addr: storetest.RedisAddr(), Pattern: store.EscapeGlob(r.prefix) + "*", Prefix: r.prefix, Type: r.typ}}
}

// set replaces the keys under the prefix by balances.
func (r *rtRedis) set(t testing.TB, balances map[string]int64) {
	t.Helper()
	ctx := context.Background()
	keys, err := r.client.Keys(ctx, store.EscapeGlob(r.prefix)+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := r.client.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range balances {
		r.put(t, k, strconv.FormatInt(v, 10))
	}
}

// put stores text as the value of key: the balance field of a hash, or
// the JSON text of a json key.
func (r *rtRedis) put(t testing.TB, key, text string) {
	t.Helper()
	ctx := context.Background()
	var err error
	if r.typ == "hash" {
		err = r.client.HSet(ctx, r.prefix+key, "balance", text).Err()
	} else {
		err = r.client.Set(ctx, r.prefix+key, text, 0).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (r *rtRedis) del(t testing.TB, key string) {
	t.Helper()
	if err := r.client.Del(context.Background(), r.prefix+key).Err(); err != nil {
		t.Fatal(err)
	}
}

// Drift statuses.
const (
	rtConfirmed = "confirmed"
	rtPending   = "pending"
)

// checkPins checks that rep is pinned at each log's latest signed
// checkpoint of the given size.
func (l *rtLedger) checkPins(t testing.TB, rep *Report, sizes map[string]uint64) {
	t.Helper()
	var want []fold.Pin
	for _, name := range []string{"payments", "payments.eu"} {
		size, ok := sizes[name]
		if !ok {
			continue
		}
		cp := l.checkpoint(t, name)
		if cp.Size != size {
			t.Fatalf("%s: checkpoint at %d, want %d", name, cp.Size, size)
		}
		want = append(want, fold.Pin{Log: name, Size: size, Root: cp.Root, Checkpoint: string(cp.Note)})
	}
	if !reflect.DeepEqual(rep.Pins, want) {
		t.Errorf("pins %+v, want %+v", rep.Pins, want)
	}
}

// rtDrift is what a test expects of one drifted key.
type rtDrift struct {
	Kind     compare.DriftKind
	Key      string
	Expected any
	Actual   any
	Fields   []compare.FieldDiff
	Status   string
	Runs     int
}

func (d rtDrift) String() string {
	return fmt.Sprintf("{%s %q expected=%#v actual=%#v fields=%+v %s runs=%d}", d.Kind, d.Key, d.Expected, d.Actual, d.Fields, d.Status, d.Runs)
}

func rtNum(v int64) json.Number { return json.Number(strconv.FormatInt(v, 10)) }

func rtMissing(key string, exp int64, status string, runs int) rtDrift {
	return rtDrift{Kind: compare.DriftMissing, Key: key, Expected: exp, Status: status, Runs: runs}
}

func rtExtra(key string, act int64, status string, runs int) rtDrift {
	return rtDrift{Kind: compare.DriftExtra, Key: key, Actual: rtNum(act), Status: status, Runs: runs}
}

func rtMismatch(key string, exp, act int64, status string, runs int) rtDrift {
	return rtDrift{Kind: compare.DriftMismatch, Key: key, Expected: exp, Actual: rtNum(act),
		Fields: []compare.FieldDiff{{Field: "", Expected: exp, Actual: rtNum(act)}}, Status: status, Runs: runs}
}

// rtDiff is the drift an exact comparison of expected with a store holding
// actual reports, every drift with status and runs, in report order (by
// key, all of one status), and its stats.
func rtDiff(expected, actual map[string]int64, status string, runs int) ([]rtDrift, compare.Stats) {
	st := compare.Stats{Rows: int64(len(actual)), Keys: int64(len(expected))}
	var out []rtDrift
	for k, v := range expected {
		a, ok := actual[k]
		switch {
		case !ok:
			st.Missing++
			out = append(out, rtMissing(k, v, status, runs))
		case a != v:
			st.Mismatched++
			out = append(out, rtMismatch(k, v, a, status, runs))
		default:
			st.Matched++
		}
	}
	for k, a := range actual {
		if _, ok := expected[k]; !ok {
			st.Extra++
			out = append(out, rtExtra(k, a, status, runs))
		}
	}
	slices.SortFunc(out, func(a, b rtDrift) int { return strings.Compare(a.Key, b.Key) })
	return out, st
}

// rtWant is what a test expects of a report.
type rtWant struct {
	State     string
	ErrorKind string
	Confirmed int
	Pending   int
	Stats     compare.Stats
	Drift     []rtDrift
}

// rtCheck checks the report's state, counts, stats and exact drift list.
func rtCheck(t testing.TB, rep *Report, want rtWant) {
	t.Helper()
	if rep.State != want.State || rep.ErrorKind != want.ErrorKind {
		t.Errorf("state %q, error kind %q (error %q); want %q, %q", rep.State, rep.ErrorKind, rep.Error, want.State, want.ErrorKind)
	}
	if (rep.Error != "") != (want.State == StateError) {
		t.Errorf("error %q in state %s", rep.Error, rep.State)
	}
	if rep.Confirmed != want.Confirmed || rep.Pending != want.Pending {
		t.Errorf("confirmed %d, pending %d; want %d, %d", rep.Confirmed, rep.Pending, want.Confirmed, want.Pending)
	}
	if rep.Stats != want.Stats {
		t.Errorf("stats %+v, want %+v", rep.Stats, want.Stats)
	}
	if rep.Drift == nil {
		t.Errorf("drift is nil, want a list (JSON [])")
	}
	got := make([]rtDrift, len(rep.Drift))
	for i, d := range rep.Drift {
		got[i] = rtDrift{Kind: d.Kind, Key: d.Key, Expected: d.Expected, Actual: d.Actual, Fields: d.Fields, Status: d.Status, Runs: d.Runs}
	}
	if len(got) == 0 && len(want.Drift) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want.Drift) {
		t.Errorf("drift:\n got %v\nwant %v", got, want.Drift)
	}
}

// checkLineage checks that the lineage of every drifted key (but extra
// ones) is the last n entries that touched it up to the report's pins, in
// fold order (logs by name, then index), each named by log, index, id, time
// and leaf hash, with an inclusion proof that verifies against the signed
// checkpoint the pin of its log names (at the pin or above it, when the
// pin is a watermark).
func (l *rtLedger) checkLineage(t testing.TB, rep *Report, n int) {
	t.Helper()
	pins := map[string]fold.Pin{}
	signed := map[string]merkle.Checkpoint{}
	for _, p := range rep.Pins {
		pins[p.Log] = p
		cp, err := merkle.OpenCheckpoint([]byte(p.Checkpoint), l.verifier, l.store.Origin(p.Log))
		if err != nil {
			t.Fatalf("pin %s/%d: checkpoint: %v", p.Log, p.Size, err)
		}
		if cp.Size < p.Size || cp.Size == p.Size && cp.Root != p.Root {
			t.Fatalf("pin %s/%d %s: its checkpoint is of size %d, root %s", p.Log, p.Size, p.Root, cp.Size, cp.Root)
		}
		signed[p.Log] = cp
	}
	logs := slices.Sorted(maps.Keys(l.events))
	for _, dr := range rep.Drift {
		if dr.Kind == compare.DriftExtra {
			if len(dr.Lineage) != 0 || dr.Newest != nil {
				t.Errorf("extra key %q has lineage %v, newest %v", dr.Key, dr.Lineage, dr.Newest)
			}
			continue
		}
		type ref struct {
			log   string
			index int
		}
		var touched []ref
		for _, lg := range logs {
			size := int(pins[lg].Size)
			for i, e := range l.events[lg][:size] {
				if e.Raw == "" && (e.From == dr.Key || e.To == dr.Key) {
					touched = append(touched, ref{lg, i})
				}
			}
		}
		want := touched[max(0, len(touched)-n):]
		// Entries named for what they explain (Why set) and older than the
		// last n come first; the last n follow.
		for len(dr.Lineage) > len(want) && dr.Lineage[0].Why != "" {
			ev := dr.Lineage[0]
			if err := merkle.VerifyInclusion(ev.Index, ev.TreeSize, ev.LeafHash, ev.Proof, signed[ev.Log].Root); err != nil {
				t.Errorf("key %q: suspect %s/%d: proof does not verify: %v", dr.Key, ev.Log, ev.Index, err)
			}
			dr.Lineage = dr.Lineage[1:]
		}
		if len(dr.Lineage) != len(want) {
			t.Errorf("key %q: lineage of %d entries, want %d", dr.Key, len(dr.Lineage), len(want))
			continue
		}
		for i, ev := range dr.Lineage {
			w := want[i]
			rec, err := l.log(t, w.log).Entry(uint64(w.index))
			if err != nil {
				t.Fatal(err)
			}
			if ev.Log != w.log || ev.Index != uint64(w.index) || ev.ID != rtID(w.log, w.index) ||
				!ev.Time.Equal(rtTime(w.index)) || ev.LeafHash != rec.LeafHash {
				t.Errorf("key %q: lineage[%d] = %s/%d id %q at %v leaf %s; want %s/%d id %q at %v leaf %s", dr.Key, i,
					ev.Log, ev.Index, ev.ID, ev.Time, ev.LeafHash, w.log, w.index, rtID(w.log, w.index), rtTime(w.index), rec.LeafHash)
			}
			cp := signed[ev.Log]
			if ev.TreeSize != cp.Size {
				t.Errorf("key %q: lineage[%d] proven at size %d, the signed checkpoint is %d", dr.Key, i, ev.TreeSize, cp.Size)
			}
			if err := merkle.VerifyInclusion(ev.Index, ev.TreeSize, ev.LeafHash, ev.Proof, cp.Root); err != nil {
				t.Errorf("key %q: lineage[%d] (%s/%d): proof does not verify: %v", dr.Key, i, ev.Log, ev.Index, err)
			}
		}
		if dr.Newest == nil {
			t.Errorf("key %q: no newest event", dr.Key)
		} else if last := want[len(want)-1]; len(l.events) == 1 && (dr.Newest.Log != last.log || dr.Newest.Index != uint64(last.index)) {
			t.Errorf("key %q: newest event %s/%d, want %s/%d", dr.Key, dr.Newest.Log, dr.Newest.Index, last.log, last.index)
		}
	}
}

// rtOutsider checks a report's evidence as someone without auditd's code
// would: from the report's JSON alone, the verifier key and each entry's
// leaf bytes (as GET /v1/logs/{log}/entries serves them), with
// golang.org/x/mod/sumdb/note and tlog. It returns the number of pieces of
// evidence checked.
func rtOutsider(t testing.TB, reportJSON []byte, v note.Verifier, leaf func(log string, index int64) []byte) int {
	t.Helper()
	var rep struct {
		Pins []struct {
			Log        string `json:"log"`
			Size       int64  `json:"size"`
			Checkpoint string `json:"checkpoint"`
		} `json:"pins"`
		Drift []struct {
			Key     string `json:"key"`
			Lineage []struct {
				Log      string   `json:"log"`
				Index    int64    `json:"index"`
				ID       string   `json:"id"`
				LeafHash string   `json:"leaf_hash"`
				TreeSize int64    `json:"tree_size"`
				Proof    []string `json:"inclusion_proof"`
			} `json:"lineage"`
		} `json:"drift"`
	}
	if err := json.Unmarshal(reportJSON, &rep); err != nil {
		t.Fatalf("report JSON: %v", err)
	}
	type tree struct {
		size int64
		root tlog.Hash
	}
	trees := map[string]tree{}
	for _, p := range rep.Pins {
		n, err := note.Open([]byte(p.Checkpoint), note.VerifierList(v))
		if err != nil {
			t.Fatalf("checkpoint of %s: %v", p.Log, err)
		}
		// C2SP tlog-checkpoint: origin, size, base64 root, one per line.
		lines := strings.Split(n.Text, "\n")
		if len(lines) < 4 || lines[0] != v.Name()+"/"+p.Log {
			t.Fatalf("checkpoint of %s: unexpected body %q", p.Log, n.Text)
		}
		size, err := strconv.ParseInt(lines[1], 10, 64)
		if err != nil || size < p.Size {
			t.Fatalf("checkpoint of %s: size %q, below the pin's %d", p.Log, lines[1], p.Size)
		}
		root, err := tlog.ParseHash(lines[2])
		if err != nil {
			t.Fatalf("checkpoint of %s: root %q: %v", p.Log, lines[2], err)
		}
		trees[p.Log] = tree{size, root}
	}
	checked := 0
	for _, dr := range rep.Drift {
		for _, ev := range dr.Lineage {
			tr, ok := trees[ev.Log]
			if !ok || ev.TreeSize != tr.size {
				t.Errorf("key %q: evidence %s/%d at tree size %d, no signed checkpoint of that size", dr.Key, ev.Log, ev.Index, ev.TreeSize)
				continue
			}
			// The record hash is SHA-256(0x00 || leaf bytes) (RFC 6962).
			h := tlog.RecordHash(leaf(ev.Log, ev.Index))
			if base64.StdEncoding.EncodeToString(h[:]) != ev.LeafHash {
				t.Errorf("key %q: evidence %s/%d: the leaf hashes to %s, the report says %s", dr.Key, ev.Log, ev.Index, h, ev.LeafHash)
			}
			proof := make(tlog.RecordProof, len(ev.Proof))
			for i, s := range ev.Proof {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil || len(b) != tlog.HashSize {
					t.Fatalf("key %q: proof hash %q", dr.Key, s)
				}
				copy(proof[i][:], b)
			}
			if err := tlog.CheckRecord(proof, tr.size, tr.root, ev.Index, h); err != nil {
				t.Errorf("key %q: evidence %s/%d does not verify with tlog: %v", dr.Key, ev.Log, ev.Index, err)
			}
			// And tlog is not fooled by a wrong index or a doctored proof.
			if err := tlog.CheckRecord(proof, tr.size, tr.root, ev.Index^1, h); err == nil {
				t.Errorf("key %q: evidence %s/%d verifies at index %d too", dr.Key, ev.Log, ev.Index, ev.Index^1)
			}
			if len(proof) > 0 {
				bad := slices.Clone(proof)
				bad[0][0] ^= 1
				if err := tlog.CheckRecord(bad, tr.size, tr.root, ev.Index, h); err == nil {
					t.Errorf("key %q: evidence %s/%d verifies with a doctored proof", dr.Key, ev.Log, ev.Index)
				}
			}
			checked++
		}
	}
	return checked
}

// lastEntries returns drift with each key's lineage cut to its last
// entries: the entries named for what they explain (older than those) are
// dropped, and the why of the others cleared.
func lastEntries(drift []DriftReport) []DriftReport {
	out := make([]DriftReport, len(drift))
	for i, dr := range drift {
		var lin []Evidence
		for j, ev := range dr.Lineage {
			if ev.Why != "" && len(dr.Lineage)-j > 5 {
				continue
			}
			ev.Why = ""
			lin = append(lin, ev)
		}
		dr.Lineage = lin
		out[i] = dr
	}
	return out
}
