package checkers_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
)

// transferSpec is a derivation of account balances from transfers: a
// transfer moves amount from one account to another; a deposit (no from)
// credits one account and unbalances the books.
const transferSpec = `derivations:
  - name: bal
    sources: [xfer]
    store: {file: {path: x.jsonl}}
    key: 'has(event.from) ? [event.from, event.to] : [event.to]'
    initial: "0"
    step: 'has(event.from) && key == event.from ? state - int(event.amount) : state + int(event.amount)'
`

// balances is a ledger with a transfer log, the balances derivation, and
// the invariant check over its saved result.
type balances struct {
	t      *testing.T
	st     *ledger.Store
	key    testKey
	log    *ledger.Log
	bucket *ledger.Bucket
	d      fold.Derivation
	check  *checkers.InvariantCheck
	next   int // the next event id
}

func newBalances(t *testing.T, invariants []rederive.InvariantSpec) *balances {
	t.Helper()
	key := newKey(t)
	st, err := ledger.Open(t.TempDir(), key.signer, key.verifier, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := st.CreateLog("xfer")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Bucket("derive")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := spec.Parse("bal.yaml", []byte(transferSpec))
	if err != nil {
		t.Fatal(err)
	}
	d, err := spec.Compile(specs[0])
	if err != nil {
		t.Fatal(err)
	}
	iv, err := rederive.CompileInvariants("bal", invariants)
	if err != nil {
		t.Fatal(err)
	}
	check := checkers.NewInvariantCheck(b, rederive.LocalLedger{Store: st}, key.verifier,
		[]rederive.InvariantTarget{{Derivation: d, Invariants: iv, Lineage: specs[0].Lineage}})
	return &balances{t: t, st: st, key: key, log: l, bucket: b, d: d, check: check}
}

// add appends events (JSON payloads) in requests of 5,000 and waits for
// the checkpoint that covers them.
func (bs *balances) add(payloads ...string) {
	bs.t.Helper()
	ctx := context.Background()
	for len(payloads) > 0 {
		n := min(5000, len(payloads))
		es := make([]ledger.Entry, n)
		for i, p := range payloads[:n] {
			es[i] = ledger.Entry{ID: fmt.Sprintf("t-%d", bs.next), Payload: []byte(p), PayloadJSON: true,
				Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(bs.next) * time.Millisecond)}
			bs.next++
		}
		if _, err := bs.log.Append(ctx, es); err != nil {
			bs.t.Fatal(err)
		}
		payloads = payloads[n:]
	}
	if _, err := bs.log.WaitCheckpoint(ctx, uint64(bs.next)); err != nil {
		bs.t.Fatal(err)
	}
}

// run folds the log up to its latest signed checkpoint, saves the result
// as the daemon's derivation run does, and runs the invariant check.
func (bs *balances) run() []checkers.Finding {
	bs.t.Helper()
	ctx := context.Background()
	lg := rederive.LocalLedger{Store: bs.st}
	pin, ok, err := lg.Pin(ctx, "xfer")
	if err != nil || !ok {
		bs.t.Fatalf("pin: %v %v", ok, err)
	}
	res, err := fold.Fold(ctx, bs.d, nil, []fold.Span{{Reader: lg.Reader("xfer", pin), To: pin.Size, Pin: pin}}, fold.Options{})
	if err != nil {
		bs.t.Fatal(err)
	}
	if err := fold.SaveResult(bs.bucket, bs.d, res); err != nil {
		bs.t.Fatal(err)
	}
	c := &collector{}
	if err := bs.check.Run(ctx, c); err != nil {
		bs.t.Fatal(err)
	}
	return c.findings
}

func transfer(from, to string, amount int) string {
	return fmt.Sprintf(`{"from":%q,"to":%q,"amount":%d}`, from, to, amount)
}

func acct(i int) string { return fmt.Sprintf("acct-%06d", i) }

// fund gives each of n accounts 10 from the bank, then moves 3 from
// account i to account i+1 for the first n/10: balanced books, no
// account below zero but the bank.
func fund(n int) []string {
	var ps []string
	for i := range n {
		ps = append(ps, transfer("bank", acct(i), 10))
	}
	for i := range n / 10 {
		ps = append(ps, transfer(acct(i), acct(i+1), 3))
	}
	return ps
}

func accounts(t *testing.T) int {
	if testing.Short() {
		return 10_000
	}
	return 100_000
}

// TestInvariantGlobalSum: transfers between 100,000 accounts keep their
// balances summing to 0, so "all: sum(values) == 0" holds over the
// derivation's saved result; one deposit (money from nowhere) makes it
// fail, once, naming the sum.
func TestInvariantGlobalSum(t *testing.T) {
	n := accounts(t)
	bs := newBalances(t, []rederive.InvariantSpec{{Name: "balanced", All: "sum(values) == 0"}})
	bs.add(fund(n)...)
	if fs := bs.run(); len(fs) != 0 {
		t.Fatalf("balanced books over %d accounts: %v", n, fs)
	}
	bs.add(`{"to":"` + acct(n/2) + `","amount":1}`)
	fs := bs.run()
	if len(fs) != 1 || fs[0].Kind != ledger.IntegrityInvariant || fs[0].Key != "" ||
		!strings.Contains(fs[0].Detail, "balanced") || !strings.Contains(fs[0].Detail, fmt.Sprintf("over %d keys", n+1)) {
		t.Fatalf("one deposit: %v", fs)
	}
}

// TestInvariantNegativeBalance: a transfer that overdraws an account fails
// "state >= 0" on that key alone; the finding names the key and carries
// its last 5 events, oldest first, the overdraft last, each with an
// inclusion proof that golang.org/x/mod/sumdb/tlog verifies against the
// signed checkpoint in the finding's evidence (its signature checked with
// sumdb/note).
func TestInvariantNegativeBalance(t *testing.T) {
	n := accounts(t)
	bs := newBalances(t, []rederive.InvariantSpec{
		{Name: "non_negative", PerKey: `key == "bank" || state >= 0`},
		{Name: "balanced", All: "sum(values) == 0"},
	})
	bs.add(fund(n)...)
	if fs := bs.run(); len(fs) != 0 {
		t.Fatalf("funded accounts: %v", fs)
	}
	// acct-000007 holds 10 - 3 + 3 = 10; five more events, the last
	// overdrawing it.
	victim := acct(7)
	var ids []string
	for i, p := range []string{
		transfer(victim, acct(9), 4), transfer(acct(8), victim, 1), transfer(victim, acct(9), 2),
		transfer(acct(3), acct(4), 1), // not the victim's
		transfer(victim, acct(9), 1), transfer(victim, acct(9), 6),
	} {
		if i != 3 {
			ids = append(ids, fmt.Sprintf("t-%d", bs.next))
		}
		bs.add(p)
	}
	fs := bs.run()
	if len(fs) != 1 {
		t.Fatalf("findings %v, want one", fs)
	}
	f := fs[0]
	if f.Key != victim || !strings.Contains(f.Detail, `key "`+victim+`"`) || !strings.Contains(f.Detail, "-2") {
		t.Fatalf("finding %+v", f)
	}
	if len(f.Lineage) != 5 || len(f.Evidence) != 1 {
		t.Fatalf("lineage %d events, %d checkpoints: %+v", len(f.Lineage), len(f.Evidence), f)
	}
	size, root := openTestCheckpoint(t, f.Evidence[0], bs.key.verifier, "xfer")
	if size != uint64(bs.next) {
		t.Fatalf("checkpoint of size %d, the log has %d", size, bs.next)
	}
	for i, e := range f.Lineage {
		if e.ID != ids[i] || e.Log != "xfer" || e.TreeSize != size {
			t.Errorf("lineage %d: %s of %s at %d, want %s at %d", i, e.ID, e.Log, e.TreeSize, ids[i], size)
		}
		proof := make(tlog.RecordProof, len(e.Proof))
		for j, h := range e.Proof {
			proof[j] = tlog.Hash(h)
		}
		if err := tlog.CheckRecord(proof, int64(size), root, int64(e.Index), tlog.Hash(e.LeafHash)); err != nil {
			t.Errorf("lineage %d (entry %d): proof does not verify with sumdb/tlog: %v", i, e.Index, err)
		}
		// The leaf hash is the entry's.
		var got tlog.Hash
		err := bs.log.Entries(context.Background(), e.Index, e.Index+1, func(r *ledger.Record) error {
			got = tlog.Hash(r.LeafHash)
			return nil
		})
		if err != nil || got != tlog.Hash(e.LeafHash) {
			t.Errorf("lineage %d: leaf hash %x, entry %d has %x (%v)", i, e.LeafHash, e.Index, got, err)
		}
	}
}

// openTestCheckpoint checks a signed checkpoint note with sumdb/note and
// parses its C2SP body without auditd's code.
func openTestCheckpoint(t *testing.T, signed string, v note.Verifier, log string) (uint64, tlog.Hash) {
	t.Helper()
	n, err := note.Open([]byte(signed), note.VerifierList(v))
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 3 || !strings.HasSuffix(lines[0], "/"+log) {
		t.Fatalf("checkpoint text %q", n.Text)
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(b) != tlog.HashSize {
		t.Fatalf("root %q: %v", lines[2], err)
	}
	return size, tlog.Hash(b)
}

// TestInvariantLineageBelowCheckpoint: a result pinned below the signed
// checkpoint (a derived store's watermark) has its lineage proven in the
// signed checkpoint's tree, the one its pin names, not in a tree no one
// signed.
func TestInvariantLineageBelowCheckpoint(t *testing.T) {
	bs := newBalances(t, []rederive.InvariantSpec{{Name: "non_negative", PerKey: `key == "bank" || state >= 0`}})
	bs.add(fund(20)...)
	bs.add(transfer(acct(5), acct(6), 50))
	watermark := uint64(bs.next)
	bs.add(transfer(acct(1), acct(2), 1), transfer(acct(2), acct(3), 1))
	ctx := context.Background()
	lg := rederive.LocalLedger{Store: bs.st}
	signed, _, err := lg.Pin(ctx, "xfer")
	if err != nil {
		t.Fatal(err)
	}
	root, err := bs.log.RootAt(watermark)
	if err != nil {
		t.Fatal(err)
	}
	pin := fold.Pin{Log: "xfer", Size: watermark, Root: root, Checkpoint: signed.Checkpoint}
	res, err := fold.Fold(ctx, bs.d, nil, []fold.Span{{Reader: lg.Reader("xfer", signed), To: watermark, Pin: pin}}, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fold.SaveResult(bs.bucket, bs.d, res); err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	if err := bs.check.Run(ctx, c); err != nil {
		t.Fatal(err)
	}
	if len(c.findings) != 1 || c.findings[0].Key != acct(5) || len(c.findings[0].Lineage) == 0 {
		t.Fatalf("findings %+v", c.findings)
	}
	size, sroot := openTestCheckpoint(t, c.findings[0].Evidence[0], bs.key.verifier, "xfer")
	if size != signed.Size || size == watermark {
		t.Fatalf("evidence checkpoint of size %d, want the signed %d", size, signed.Size)
	}
	for _, e := range c.findings[0].Lineage {
		proof := make(tlog.RecordProof, len(e.Proof))
		for j, h := range e.Proof {
			proof[j] = tlog.Hash(h)
		}
		if e.TreeSize != size || e.Index >= watermark {
			t.Errorf("entry %d proven at %d", e.Index, e.TreeSize)
		}
		if err := tlog.CheckRecord(proof, int64(size), sroot, int64(e.Index), tlog.Hash(e.LeafHash)); err != nil {
			t.Errorf("entry %d: %v", e.Index, err)
		}
	}
}

// TestInvariantLineageForgedCheckpoint: a saved result whose pin names a
// checkpoint note that does not verify with the ledger's key (its root
// line rewritten, the signature kept) gets no lineage: the pass fails
// saying so and the finding stands without evidence. Before, the note's
// text was cut from its signatures unverified, and only the proof against
// the ledger's own root caught the forged one.
func TestInvariantLineageForgedCheckpoint(t *testing.T) {
	bs := newBalances(t, []rederive.InvariantSpec{{Name: "non_negative", PerKey: `key == "bank" || state >= 0`}})
	bs.add(fund(20)...)
	bs.add(transfer(acct(5), acct(6), 50))
	ctx := context.Background()
	lg := rederive.LocalLedger{Store: bs.st}
	signed, _, err := lg.Pin(ctx, "xfer")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(signed.Checkpoint, "\n", 4)
	lines[2] = base64.StdEncoding.EncodeToString(make([]byte, tlog.HashSize))
	forged := signed
	forged.Checkpoint = strings.Join(lines, "\n")
	res, err := fold.Fold(ctx, bs.d, nil, []fold.Span{{Reader: lg.Reader("xfer", signed), To: signed.Size, Pin: forged}}, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fold.SaveResult(bs.bucket, bs.d, res); err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	err = bs.check.Run(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "lineage: pin of xfer: checkpoint") {
		t.Fatalf("pass error %v, want the checkpoint refused", err)
	}
	if len(c.findings) != 1 || c.findings[0].Key != acct(5) || len(c.findings[0].Lineage) != 0 || len(c.findings[0].Evidence) != 0 {
		t.Fatalf("findings %+v, want the key's finding without lineage or evidence", c.findings)
	}
}
