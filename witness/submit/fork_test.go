package submit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
)

// appendTagged appends n entries whose payloads carry tag, so that two
// stores given the same tag hold the same history.
func appendTagged(t testing.TB, l *ledger.Log, tag string, n int) *ledger.SignedCheckpoint {
	t.Helper()
	es := make([]ledger.Entry, n)
	for i := range es {
		n := l.Size() + uint64(i)
		es[i] = ledger.Entry{ID: fmt.Sprintf("%s-%d", tag, n), Payload: []byte(fmt.Sprintf("%s-%d", tag, n)),
			Time: time.Unix(1700000000+int64(n), 0)}
	}
	if _, err := l.Append(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	cp, err := l.WaitCheckpoint(context.Background(), l.Size())
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestSubmitForkGoesReadOnly: a witness that holds, under the log's key, a
// checkpoint the log's own contradicts (a larger size: the log was rolled
// back; another root at the same size; a history the log's consistency
// proof does not extend) puts the log read-only: appends fail with
// ErrReadOnly naming the witness, and no checkpoint is signed after. A
// second instance with the same key that holds a prefix of the history the
// witness cosigned is no fork, and stays writable. Sizes cross the
// 256-entry tile and the 1,024-entry read batch.
func TestSubmitForkGoesReadOnly(t *testing.T) {
	const witnessed = 1300
	cases := []struct {
		name     string
		fork     bool
		populate func(t *testing.T, l *ledger.Log)
		want     string // in the read-only error
	}{
		{"rolled back: behind the witness", true, func(t *testing.T, l *ledger.Log) { appendTagged(t, l, "h", 700) }, "larger than the log's latest checkpoint"},
		{"another root at the witness's size", true, func(t *testing.T, l *ledger.Log) { appendTagged(t, l, "other", witnessed) }, "another checkpoint of size 1300"},
		{"another history, larger", true, func(t *testing.T, l *ledger.Log) { appendTagged(t, l, "other", 2100) }, "refuses the consistency proof"},
		{"same history, larger", false, func(t *testing.T, l *ledger.Log) { appendTagged(t, l, "h", 2100) }, ""},
		{"same history, same size", false, func(t *testing.T, l *ledger.Log) { appendTagged(t, l, "h", witnessed) }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := ledgertest.NewKey(t, "fork.example")
			opt := ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond))
			// The history the witness cosigned, from a first instance.
			first := ledgertest.Open(t, ledgertest.WithKey(key), opt)
			fl, err := first.CreateLog("payments")
			if err != nil {
				t.Fatal(err)
			}
			cp := appendTagged(t, fl, "h", witnessed)
			w := newWitness(t, "w1.example", fl.Origin(), key.Verifier)
			if _, err := w.srv.AddCheckpoint((&witness.Request{Checkpoint: cp.Note}).Marshal()); err != nil {
				t.Fatal(err)
			}

			// The instance under test signs with the same key.
			store := ledgertest.Open(t, ledgertest.WithKey(key), opt)
			l, err := store.CreateLog("payments")
			if err != nil {
				t.Fatal(err)
			}
			tc.populate(t, l)
			before := l.Checkpoint()
			ev := newEvents()
			sub, err := New(storeLogs(store), []Witness{{URL: w.ts.URL, Verifier: w.verifier}}, ev.options())
			if err != nil {
				t.Fatal(err)
			}
			run(t, sub)
			if !tc.fork {
				ev.wait(t, "the cosignature", func(c map[string]uint64, _ map[string]int) bool { return c["payments w1.example"] >= before.Size })
				if err := l.ReadOnly(); err != nil {
					t.Fatalf("no fork, but the log is read-only: %v", err)
				}
				if got := value(sub.submissions.WithLabelValues("w1.example", "fork")); got != 0 {
					t.Errorf("%v forks counted", got)
				}
				appendTagged(t, l, "h", 1) // still takes appends and signs
				return
			}
			ev.wait(t, "the witness's refusal", func(_ map[string]uint64, errs map[string]int) bool { return errs["payments w1.example"] > 0 })
			deadline := time.Now().Add(10 * time.Second)
			for l.ReadOnly() == nil && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			ro := l.ReadOnly()
			if ro == nil {
				t.Fatal("the witness showed a fork, and the log is still writable")
			}
			if !strings.Contains(ro.Error(), "w1.example") || !strings.Contains(ro.Error(), tc.want) || !strings.Contains(ro.Error(), ledger.IntegrityFork) {
				t.Errorf("read-only error %q does not name the witness and its evidence (%q)", ro, tc.want)
			}
			_, err = l.Append(context.Background(), []ledger.Entry{{ID: "after", Payload: []byte("after")}})
			if !errors.Is(err, ledger.ErrReadOnly) {
				t.Errorf("append after the fork: %v, want ErrReadOnly", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if cp, err := l.WaitCheckpoint(ctx, before.Size+1); err == nil {
				t.Errorf("checkpoint of size %d signed after the fork", cp.Size)
			}
			if got := l.Checkpoint(); got.Size != before.Size || got.Root != before.Root {
				t.Errorf("checkpoint moved from %d to %d after the fork", before.Size, got.Size)
			}
			if got := value(sub.submissions.WithLabelValues("w1.example", "fork")); got != 1 {
				t.Errorf("%v forks counted, want 1", got)
			}
			if st := sub.Status("payments", before.Size); len(st) != 1 || !strings.Contains(st[0].LastError, "fork") {
				t.Errorf("status %+v does not report the fork", st)
			}
		})
	}
}
