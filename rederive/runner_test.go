package rederive

// The runner's drift detection against the real PostgreSQL and Redis, with
// drift injected on purpose: each test builds a ledger of transfer events,
// a derived store of balances computed by a plain-Go oracle, edits the
// store, and expects exact report contents.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/rederive/store/storetest"
)

// TestRunnerDrift: a clean store matches; a missing row, an extra row and
// a wrong value each give exactly one drift of their kind, with the
// expected value, the lineage behind it, and exact stats.
func TestRunnerDrift(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(1, 60, 8, "acct-")
	lg.append(t, "payments", evs)
	bal := rtBalances(evs, nil)
	n := int64(len(bal))
	if n != 8 {
		t.Fatalf("%d accounts, want 8", n)
	}
	const k = "acct-3"
	tests := []struct {
		name string
		edit string // SQL on the clean table $T
		want rtWant
	}{{
		name: "clean",
		want: rtWant{State: StateClean, Stats: compare.Stats{Rows: n, Keys: n, Matched: n}},
	}, {
		name: "missing",
		edit: "DELETE FROM $T WHERE key = '" + k + "'",
		want: rtWant{State: StateDrift, Confirmed: 1,
			Stats: compare.Stats{Rows: n - 1, Keys: n, Matched: n - 1, Missing: 1},
			Drift: []rtDrift{rtMissing(k, bal[k], rtConfirmed, 1)}},
	}, {
		name: "extra",
		edit: "INSERT INTO $T VALUES ('acct-ghost', 42)",
		want: rtWant{State: StateDrift, Confirmed: 1,
			Stats: compare.Stats{Rows: n + 1, Keys: n, Matched: n, Extra: 1},
			Drift: []rtDrift{rtExtra("acct-ghost", 42, rtConfirmed, 1)}},
	}, {
		name: "mismatch",
		edit: "UPDATE $T SET balance = balance + 7 WHERE key = '" + k + "'",
		want: rtWant{State: StateDrift, Confirmed: 1,
			Stats: compare.Stats{Rows: n, Keys: n, Matched: n - 1, Mismatched: 1},
			Drift: []rtDrift{rtMismatch(k, bal[k], bal[k]+7, rtConfirmed, 1)}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pg := newRTPG(t)
			pg.set(t, bal)
			if tt.edit != "" {
				pg.exec(t, tt.edit)
			}
			job := rtJob(t, rtSpec("balances", pg.config()))
			rep := rtRun(t, lg.runner(nil), job, false)
			rtCheck(t, rep, tt.want)
			if rep.Derivation != "balances" || rep.Mode != "full" || rep.Events != 60 || rep.Keys != int(n) {
				t.Errorf("derivation %q, mode %q, events %d, keys %d; want balances, full, 60, %d", rep.Derivation, rep.Mode, rep.Events, rep.Keys, n)
			}
			if rep.DerivationErrors != 0 || rep.Errors != nil || rep.Watermarks != nil || rep.IncrementalMismatch != nil {
				t.Errorf("derivation errors %d %v, watermarks %v, incremental mismatch %v; want none", rep.DerivationErrors, rep.Errors, rep.Watermarks, rep.IncrementalMismatch)
			}
			lg.checkPins(t, rep, map[string]uint64{"payments": 60})
			lg.checkLineage(t, rep, 5)
			if tt.name == "missing" || tt.name == "mismatch" {
				if len(rep.Drift) != 1 || len(rep.Drift[0].Lineage) != 5 {
					t.Errorf("drift %+v: want one with a lineage of 5 entries", rep.Drift)
				}
			}
		})
	}
}

// amongLast reports whether entry i is among the last n entries of evs
// that touch key.
func amongLast(evs []rtEvent, i int, key string, n int) bool {
	later := 0
	for _, e := range evs[i+1:] {
		if e.From == key || e.To == key {
			later++
		}
	}
	return later < n
}

// TestRunnerLineageNamesSkippedEvent: a store that skipped exactly one
// event drifts on that event's two accounts; the lineage of each names the
// event, and its evidence checks out both with auditd's merkle package and,
// from the report's JSON alone, with golang.org/x/mod/sumdb/tlog and note.
func TestRunnerLineageNamesSkippedEvent(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(2, 120, 6, "acct-")
	lg.append(t, "payments", evs)
	// The oldest entry that is among the last 5 of both its accounts, so
	// the lineage must reach back to it.
	skip := -1
	for i, e := range evs {
		if amongLast(evs, i, e.From, 5) && amongLast(evs, i, e.To, 5) {
			skip = i
			break
		}
	}
	if skip < 0 || skip >= len(evs)-1 {
		t.Fatalf("no entry to skip (found %d)", skip)
	}
	skipped := evs[skip]
	full := rtBalances(evs, nil)
	lacking := rtBalances(evs, func(i int) bool { return i == skip })
	pg := newRTPG(t)
	pg.set(t, lacking)

	rep := rtRun(t, lg.runner(nil), rtJob(t, rtSpec("balances", pg.config())), false)
	drift, stats := rtDiff(full, lacking, rtConfirmed, 1)
	if len(drift) != 2 || !(drift[0].Key == skipped.From && drift[1].Key == skipped.To || drift[0].Key == skipped.To && drift[1].Key == skipped.From) {
		t.Fatalf("oracle: drift %v, want the two accounts of entry %d", drift, skip)
	}
	rtCheck(t, rep, rtWant{State: StateDrift, Confirmed: 2, Stats: stats, Drift: drift})
	lg.checkPins(t, rep, map[string]uint64{"payments": 120})
	lg.checkLineage(t, rep, 5)

	pin := rep.Pins[0]
	cp, err := merkle.OpenCheckpoint([]byte(pin.Checkpoint), lg.verifier, lg.store.Origin("payments"))
	if err != nil || cp.Size != pin.Size || cp.Root != pin.Root {
		t.Fatalf("the pin's checkpoint %+v (%v) does not sign the pin %d %s", cp, err, pin.Size, pin.Root)
	}
	rec, err := lg.log(t, "payments").Entry(uint64(skip))
	if err != nil {
		t.Fatal(err)
	}
	for _, dr := range rep.Drift {
		var named []Evidence
		for _, ev := range dr.Lineage {
			if ev.Log == "payments" && ev.Index == uint64(skip) {
				named = append(named, ev)
			}
		}
		if len(named) != 1 {
			t.Errorf("key %q: the lineage names entry %d %d times, want once: %+v", dr.Key, skip, len(named), dr.Lineage)
			continue
		}
		ev := named[0]
		if ev.ID != rtID("payments", skip) || ev.LeafHash != rec.LeafHash || ev.TreeSize != pin.Size {
			t.Errorf("key %q: evidence %+v; want id %s, leaf %s, tree size %d", dr.Key, ev, rtID("payments", skip), rec.LeafHash, pin.Size)
		}
		if err := merkle.VerifyInclusion(ev.Index, ev.TreeSize, ev.LeafHash, ev.Proof, cp.Root); err != nil {
			t.Errorf("key %q: the skipped entry's proof does not verify against the signed root: %v", dr.Key, err)
		}
	}

	// An outsider holding the report, the verifier key and the entries.
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if n := rtOutsider(t, js, lg.verifier, lg.leaf(t)); n != 10 {
		t.Errorf("the outsider checked %d pieces of evidence, want 10 (2 keys x 5)", n)
	}
	// The leaf commits to the payload: its last 32 bytes are the payload's
	// SHA-256, and the payload is the skipped transfer.
	sum := sha256.Sum256(rec.Payload)
	if !bytes.HasSuffix(rec.LeafBytes, sum[:]) {
		t.Errorf("the leaf of entry %d does not end with its payload's SHA-256", skip)
	}
	if !bytes.Equal(rec.Payload, skipped.payload()) {
		t.Errorf("entry %d holds %s, want %s", skip, rec.Payload, skipped.payload())
	}
}

// TestRunnerLaggingStore: a store that lags is not corrupt. Without
// watermarks, young mismatches are pending within the grace period (and
// drift once it has passed); with watermarks the run judges the store at
// the size it reports having applied. Either way a store that catches up
// is clean and never alerted on.
func TestRunnerLaggingStore(t *testing.T) {
	t.Parallel()
	const n = 50
	// The ledger takes the events at the time of the last one: the grace
	// period counts from then (when they were ledgered).
	lg := newRTLedger(t, ledger.WithClock(func() time.Time { return rtTime(n) }))
	evs := rtTransfers(3, n, 8, "acct-")
	lg.append(t, "payments", evs)
	full := rtBalances(evs, nil)
	lag := rtBalances(evs[:n-3], nil)
	lagDrift, lagStats := rtDiff(full, lag, rtPending, 1)
	if len(lagDrift) == 0 {
		t.Fatal("oracle: the last 3 entries change no balance")
	}
	fullStats := compare.Stats{Rows: int64(len(full)), Keys: int64(len(full)), Matched: int64(len(full))}

	t.Run("grace", func(t *testing.T) {
		t.Parallel()
		pg := newRTPG(t)
		pg.set(t, lag)
		sp := rtSpec("balances", pg.config())
		sp.Grace = store.Duration(time.Hour)
		job := rtJob(t, sp)
		r := lg.runner(nil)
		r.now = func() time.Time { return rtTime(n).Add(time.Minute) }

		rep := rtRun(t, r, job, false)
		rtCheck(t, rep, rtWant{State: StatePending, Pending: len(lagDrift), Stats: lagStats, Drift: lagDrift})
		lg.checkLineage(t, rep, 5)

		// Two hours later the same lag is drift.
		r.now = func() time.Time { return rtTime(n).Add(2 * time.Hour) }
		confirmedDrift, _ := rtDiff(full, lag, rtConfirmed, 1)
		rep = rtRun(t, r, job, false)
		rtCheck(t, rep, rtWant{State: StateDrift, Confirmed: len(confirmedDrift), Stats: lagStats, Drift: confirmedDrift})

		// The store catches up within the grace period: clean.
		r.now = func() time.Time { return rtTime(n).Add(time.Minute) }
		pg.set(t, full)
		rep = rtRun(t, r, job, false)
		rtCheck(t, rep, rtWant{State: StateClean, Stats: fullStats})
	})

	t.Run("watermarks", func(t *testing.T) {
		t.Parallel()
		pg := newRTPG(t)
		wm := storetest.PostgresTable(t, pg.conn, "log text, size bigint")
		cfg := pg.config()
		cfg.Postgres.WatermarkQuery = "SELECT log, size FROM " + wm
		job := rtJob(t, rtSpec("balances", cfg)) // no grace: watermarks say what is due
		r := lg.runner(lg.bucket(t))

		// The store has applied n-3 entries and holds their balances.
		pg.set(t, lag)
		storetest.Exec(t, pg.conn, fmt.Sprintf("INSERT INTO %s VALUES ('payments', %d)", wm, n-3))
		rep := rtRun(t, r, job, false)
		lagN := int64(len(lag))
		rtCheck(t, rep, rtWant{State: StateClean, Stats: compare.Stats{Rows: lagN, Keys: lagN, Matched: lagN}})
		// Pinned at the watermark, naming the signed checkpoint above it.
		wantPin := fold.Pin{Log: "payments", Size: n - 3, Root: lg.root(t, "payments", n-3), Checkpoint: string(lg.checkpoint(t, "payments").Note)}
		if len(rep.Pins) != 1 || rep.Pins[0] != wantPin {
			t.Errorf("pins %+v, want [%+v]", rep.Pins, wantPin)
		}
		if !reflect.DeepEqual(rep.Watermarks, map[string]uint64{"payments": n - 3}) || rep.Events != n-3 || rep.Mode != "full" {
			t.Errorf("watermarks %v, events %d, mode %s; want payments: %d, %d, full", rep.Watermarks, rep.Events, rep.Mode, n-3, n-3)
		}

		// A wrong value at the watermark is drift at once, its evidence
		// proven in the signed checkpoint, for an outsider too.
		const k = "acct-6"
		pg.exec(t, "UPDATE $T SET balance = balance + 3 WHERE key = '"+k+"'")
		rep = rtRun(t, r, job, false)
		rtCheck(t, rep, rtWant{State: StateDrift, Confirmed: 1,
			Stats: compare.Stats{Rows: lagN, Keys: lagN, Matched: lagN - 1, Mismatched: 1},
			Drift: []rtDrift{rtMismatch(k, lag[k], lag[k]+3, rtConfirmed, 1)}})
		if len(rep.Pins) != 1 || rep.Pins[0] != wantPin {
			t.Errorf("pins %+v, want [%+v]", rep.Pins, wantPin)
		}
		lg.checkLineage(t, rep, 5)
		js, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if got := rtOutsider(t, js, lg.verifier, lg.leaf(t)); got != 5 {
			t.Errorf("the outsider checked %d pieces of evidence, want 5", got)
		}

		// It catches up and says so: clean at the checkpoint, continuing
		// the saved result.
		pg.set(t, full)
		storetest.Exec(t, pg.conn, fmt.Sprintf("UPDATE %s SET size = %d", wm, n))
		rep = rtRun(t, r, job, false)
		rtCheck(t, rep, rtWant{State: StateClean, Stats: fullStats})
		lg.checkPins(t, rep, map[string]uint64{"payments": n})
		if !reflect.DeepEqual(rep.Watermarks, map[string]uint64{"payments": n}) || rep.Events != n || rep.Mode != "incremental" {
			t.Errorf("watermarks %v, events %d, mode %s; want payments: %d, %d, incremental", rep.Watermarks, rep.Events, rep.Mode, n, n)
		}

		// A store that claims n but holds the balances of n-3 lags for
		// real: drift at once, no grace.
		pg.set(t, lag)
		rep = rtRun(t, r, job, false)
		drift, stats := rtDiff(full, lag, rtConfirmed, 1)
		rtCheck(t, rep, rtWant{State: StateDrift, Confirmed: len(drift), Stats: stats, Drift: drift})
		lg.checkLineage(t, rep, 5)
	})
}

// TestRunnerStoreAheadOfCheckpoint: a store whose watermark is ahead of the
// latest signed checkpoint (it applied entries signed a moment later) is
// judged at a checkpoint that covers its watermark, not reported as drift;
// one that claims entries the ledger does not have is judged, after a
// bounded wait, at the latest checkpoint.
func TestRunnerStoreAheadOfCheckpoint(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t, ledger.WithCheckpointInterval(300*time.Millisecond))
	evs := rtTransfers(13, 55, 8, "acct-")
	lg.append(t, "payments", evs[:50])
	full := rtBalances(evs, nil)
	n := int64(len(full))
	pg := newRTPG(t)
	pg.set(t, full)
	wm := storetest.PostgresTable(t, pg.conn, "log text, size bigint")
	storetest.Exec(t, pg.conn, fmt.Sprintf("INSERT INTO %s VALUES ('payments', 55)", wm))
	cfg := pg.config()
	cfg.Postgres.WatermarkQuery = "SELECT log, size FROM " + wm
	job := rtJob(t, rtSpec("balances", cfg))

	// The last 5 entries are signed up to 300 ms after they are appended.
	lg.appendUnsigned(t, "payments", evs[50:])
	if size := lg.checkpoint(t, "payments").Size; size != 50 {
		t.Logf("checkpoint already at %d: the wait is not exercised", size)
	}
	rep := rtRun(t, lg.runner(nil), job, false)
	rtCheck(t, rep, rtWant{State: StateClean, Stats: compare.Stats{Rows: n, Keys: n, Matched: n}})
	lg.checkPins(t, rep, map[string]uint64{"payments": 55})
	if rep.Events != 55 || !reflect.DeepEqual(rep.Watermarks, map[string]uint64{"payments": 55}) {
		t.Errorf("events %d, watermarks %v; want 55, payments: 55", rep.Events, rep.Watermarks)
	}

	// A store claiming 60 entries of a log of 55: the run does not hang.
	storetest.Exec(t, pg.conn, "UPDATE "+wm+" SET size = 60")
	start := time.Now()
	rep = rtRun(t, lg.runner(nil), job, false)
	if d := time.Since(start); d > aheadWait+5*time.Second {
		t.Errorf("the run took %s", d)
	}
	rtCheck(t, rep, rtWant{State: StateClean, Stats: compare.Stats{Rows: n, Keys: n, Matched: n}})
	lg.checkPins(t, rep, map[string]uint64{"payments": 55})
}

// TestRunnerConfirmRuns: with confirm_runs 2 a drift is pending on the
// first run and confirmed on the second; a fixed store is clean and the
// count starts over.
func TestRunnerConfirmRuns(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(4, 40, 6, "acct-")
	lg.append(t, "payments", evs)
	full := rtBalances(evs, nil)
	n := int64(len(full))
	pg := newRTPG(t)
	sp := rtSpec("balances", pg.config())
	sp.ConfirmRuns = 2
	job := rtJob(t, sp)
	b := lg.bucket(t)
	r := lg.runner(b)
	const k = "acct-1"
	bad := compare.Stats{Rows: n, Keys: n, Matched: n - 1, Mismatched: 1}

	pg.set(t, full)
	pg.exec(t, "UPDATE $T SET balance = balance - 5 WHERE key = '"+k+"'")
	rep := rtRun(t, r, job, false)
	rtCheck(t, rep, rtWant{State: StatePending, Pending: 1, Stats: bad, Drift: []rtDrift{rtMismatch(k, full[k], full[k]-5, rtPending, 1)}})

	rep = rtRun(t, r, job, false)
	rtCheck(t, rep, rtWant{State: StateDrift, Confirmed: 1, Stats: bad, Drift: []rtDrift{rtMismatch(k, full[k], full[k]-5, rtConfirmed, 2)}})
	lg.checkLineage(t, rep, 5)
	saved, err := LatestReport(b, "balances")
	if err != nil || saved.State != StateDrift || saved.Confirmed != 1 || len(saved.Drift) != 1 || saved.Drift[0].Runs != 2 {
		t.Errorf("latest saved report %+v (%v), want the confirmed drift", saved, err)
	}

	pg.set(t, full)
	rep = rtRun(t, r, job, false)
	rtCheck(t, rep, rtWant{State: StateClean, Stats: compare.Stats{Rows: n, Keys: n, Matched: n}})

	// The same drift again counts from one.
	pg.exec(t, "UPDATE $T SET balance = balance - 5 WHERE key = '"+k+"'")
	rep = rtRun(t, r, job, false)
	rtCheck(t, rep, rtWant{State: StatePending, Pending: 1, Stats: bad, Drift: []rtDrift{rtMismatch(k, full[k], full[k]-5, rtPending, 1)}})
}

// TestRunnerStoreDown: a store that cannot be reached ends the run in state
// error, kind store, and reports no drift.
func TestRunnerStoreDown(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	lg.append(t, "payments", rtTransfers(5, 20, 4, "acct-"))
	const down = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"
	for _, tt := range []struct {
		name  string
		store store.Config
	}{
		{"postgres", store.Config{Postgres: &store.PostgresConfig{DSN: down, Table: "balances"}}},
		{"postgres watermarks", store.Config{Postgres: &store.PostgresConfig{DSN: down, Table: "balances", WatermarkQuery: "SELECT log, size FROM marks"}}},
		{"redis", store.Config{Redis: &store.RedisConfig{Addr: "127.0.0.1:1", Pattern: "balance:*", Prefix: "balance:"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := rtRun(t, lg.runner(nil), rtJob(t, rtSpec("balances", tt.store)), false)
			rtCheck(t, rep, rtWant{State: StateError, ErrorKind: ErrKindStore})
		})
	}
}

// TestRunnerMalformedStore: rows the store cannot give as values (invalid
// JSON, a key twice, a NULL key) end the run in state error, kind store.
func TestRunnerMalformedStore(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(6, 30, 5, "acct-")
	lg.append(t, "payments", evs)
	full := rtBalances(evs, nil)
	for _, tt := range []struct {
		name  string
		store func(t *testing.T) store.Config
		msg   string
	}{
		{"redis invalid json", func(t *testing.T) store.Config {
			r := newRTRedis(t, "json")
			r.set(t, full)
			r.put(t, "acct-2", `{"balance": 12`)
			return r.config()
		}, "malformed JSON"},
		{"postgres duplicate key", func(t *testing.T) store.Config {
			pg := newRTPG(t)
			pg.set(t, full)
			pg.exec(t, "INSERT INTO $T VALUES ('acct-2', 1)")
			return pg.config()
		}, `key "acct-2" appears twice`},
		{"postgres null key", func(t *testing.T) store.Config {
			pg := newRTPG(t)
			pg.set(t, full)
			pg.exec(t, "INSERT INTO $T VALUES (NULL, 1)")
			return pg.config()
		}, "NULL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := rtRun(t, lg.runner(nil), rtJob(t, rtSpec("balances", tt.store(t))), false)
			rep.Stats = compare.Stats{} // counted up to the bad row
			rtCheck(t, rep, rtWant{State: StateError, ErrorKind: ErrKindStore})
			if !strings.Contains(rep.Error, tt.msg) {
				t.Errorf("error %q does not say %q", rep.Error, tt.msg)
			}
		})
	}
}

// TestRunnerDerivationErrors: an event the derivation fails on is counted
// and named within the error budget; beyond it the run fails, kind
// derivation.
func TestRunnerDerivationErrors(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(7, 40, 6, "acct-")
	evs[7] = rtEvent{Raw: `{"type":"transfer","from":"acct-1","amount":5}`} // no "to"
	lg.append(t, "payments", evs)
	full := rtBalances(evs, nil) // the oracle skips it
	n := int64(len(full))
	pg := newRTPG(t)
	pg.set(t, full)

	sp := rtSpec("balances", pg.config())
	sp.ErrorBudget = 5
	rep := rtRun(t, lg.runner(nil), rtJob(t, sp), false)
	rtCheck(t, rep, rtWant{State: StateClean, Stats: compare.Stats{Rows: n, Keys: n, Matched: n}})
	if rep.DerivationErrors != 1 || len(rep.Errors) != 1 {
		t.Fatalf("derivation errors %d %+v, want 1", rep.DerivationErrors, rep.Errors)
	}
	if e := rep.Errors[0]; e.Log != "payments" || e.Index != 7 || e.Key != "" || !strings.Contains(e.Err, "no such key: to") {
		t.Errorf("error %+v, want payments entry 7 with no key, about the missing field to", e)
	}
	if rep.Events != 40 {
		t.Errorf("events %d, want 40", rep.Events)
	}

	sp.ErrorBudget = 0
	rep = rtRun(t, lg.runner(nil), rtJob(t, sp), false)
	rtCheck(t, rep, rtWant{State: StateError, ErrorKind: ErrKindDerivation})
	if !strings.Contains(rep.Error, fold.ErrBudget.Error()) || !strings.Contains(rep.Error, "payments entry 7") {
		t.Errorf("error %q, want the budget exceeded at payments entry 7", rep.Error)
	}
}

// TestRunnerIncrementalMatchesFull: over two logs, a run continuing from
// saved state reports what a full fold reports, and a full run after
// incremental ones finds the incremental path in agreement, unless the
// saved state is wrong.
func TestRunnerIncrementalMatchesFull(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	pg := newRTPG(t)
	job := rtJob(t, rtSpec("balances", pg.config(), "payments", "payments.*"))
	b := lg.bucket(t)
	r := lg.runner(b)
	// Both logs move money between the same accounts.
	us, eu := rtTransfers(8, 125, 8, "acct-"), rtTransfers(9, 65, 8, "acct-")
	expected := func() map[string]int64 {
		return rtMerge(rtBalances(lg.events["payments"], nil), rtBalances(lg.events["payments.eu"], nil))
	}
	withDrift := func() map[string]int64 {
		m := expected()
		m["acct-2"] += 11
		delete(m, "acct-5")
		return m
	}

	lg.append(t, "payments", us[:40])
	lg.append(t, "payments.eu", eu[:30])
	pg.set(t, expected())
	rep := rtRun(t, r, job, false)
	if rep.Mode != "full" || rep.State != StateClean {
		t.Fatalf("first run: mode %s, state %s (%s); want full, clean", rep.Mode, rep.State, rep.Error)
	}

	lg.append(t, "payments", us[40:100])
	lg.append(t, "payments.eu", eu[40:50])
	pg.set(t, withDrift())
	inc := rtRun(t, r, job, false)
	if inc.Mode != "incremental" {
		t.Errorf("mode %s, want incremental", inc.Mode)
	}
	drift, stats := rtDiff(expected(), withDrift(), rtConfirmed, 1)
	want := rtWant{State: StateDrift, Confirmed: 2, Stats: stats, Drift: drift}
	rtCheck(t, inc, want)
	lg.checkPins(t, inc, map[string]uint64{"payments": 100, "payments.eu": 40})
	lg.checkLineage(t, inc, 5)

	full := rtRun(t, lg.runner(nil), job, true)
	rtCheck(t, full, want)
	if full.Mode != "full" || full.Keys != inc.Keys || full.Events != inc.Events || !reflect.DeepEqual(full.Pins, inc.Pins) {
		t.Errorf("full run: mode %s, keys %d, events %d, pins %+v; incremental: keys %d, events %d, pins %+v",
			full.Mode, full.Keys, full.Events, full.Pins, inc.Keys, inc.Events, inc.Pins)
	}
	// What lineage names beyond the last entries depends on the runs
	// before (where each key last agreed): compared without it.
	fj, _ := json.Marshal(lastEntries(full.Drift))
	ij, _ := json.Marshal(lastEntries(inc.Drift))
	if !bytes.Equal(fj, ij) {
		t.Errorf("drift of the full run:\n%s\nof the incremental run:\n%s", fj, ij)
	}

	// A full run after the incremental one checks the incremental path.
	lg.append(t, "payments", us[100:])
	lg.append(t, "payments.eu", eu[50:])
	pg.set(t, withDrift())
	rep = rtRun(t, r, job, true)
	drift, stats = rtDiff(expected(), withDrift(), rtConfirmed, 2)
	rtCheck(t, rep, rtWant{State: StateDrift, Confirmed: 2, Stats: stats, Drift: drift})
	if rep.Mode != "full" || len(rep.IncrementalMismatch) != 0 {
		t.Errorf("mode %s, incremental mismatch %v; want full, none", rep.Mode, rep.IncrementalMismatch)
	}

	// Spoil the saved state of one key: the next full run says the
	// incremental path disagrees there.
	saved, err := fold.LoadResult(b, job.Derivation)
	if err != nil {
		t.Fatal(err)
	}
	if expected()["acct-0"] == 0 {
		t.Fatal("oracle: acct-0 has a zero balance; spoiling it changes nothing")
	}
	if saved.States["acct-0"], err = job.Derivation.Initial("acct-0"); err != nil {
		t.Fatal(err)
	}
	if err := fold.SaveResult(b, job.Derivation, saved); err != nil {
		t.Fatal(err)
	}
	lg.append(t, "payments", rtTransfers(10, 5, 8, "acct-"))
	pg.set(t, expected())
	rep = rtRun(t, r, job, true)
	if rep.State != StateClean || !reflect.DeepEqual(rep.IncrementalMismatch, []string{"acct-0"}) {
		t.Errorf("state %s, incremental mismatch %v; want clean, [acct-0]", rep.State, rep.IncrementalMismatch)
	}
}

// TestRunnerRedis: a mismatched and a missing key in Redis, as hashes and as
// JSON values.
func TestRunnerRedis(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(11, 50, 7, "acct-")
	lg.append(t, "payments", evs)
	full := rtBalances(evs, nil)
	n := int64(len(full))
	for _, typ := range []string{"hash", "json"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			rs := newRTRedis(t, typ)
			rs.set(t, full)
			rs.put(t, "acct-1", fmt.Sprint(full["acct-1"]+9))
			rs.del(t, "acct-4")
			job := rtJob(t, rtSpec("balances", rs.config()))
			rep := rtRun(t, lg.runner(nil), job, false)
			mismatch := rtMismatch("acct-1", full["acct-1"], full["acct-1"]+9, rtConfirmed, 1)
			if typ == "hash" {
				// A hash field is untyped text, read by the expected value's type.
				text := store.Text(fmt.Sprint(full["acct-1"] + 9))
				mismatch.Actual, mismatch.Fields[0].Actual = text, text
			}
			rtCheck(t, rep, rtWant{State: StateDrift, Confirmed: 2,
				Stats: compare.Stats{Rows: n - 1, Keys: n, Matched: n - 2, Missing: 1, Mismatched: 1},
				Drift: []rtDrift{mismatch, rtMissing("acct-4", full["acct-4"], rtConfirmed, 1)}})
			lg.checkLineage(t, rep, 5)

			rs.set(t, full)
			rep = rtRun(t, lg.runner(nil), job, false)
			rtCheck(t, rep, rtWant{State: StateClean, Stats: compare.Stats{Rows: n, Keys: n, Matched: n}})
		})
	}
}

// TestDaemon: the daemon runs a job at once and on Trigger, hands each
// report to its WithOnReport hook, and serves the latest through Latest and Jobs; the
// latest report outlives the daemon in the bucket.
func TestDaemon(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(12, 30, 5, "acct-")
	lg.append(t, "payments", evs)
	full := rtBalances(evs, nil)
	n := int64(len(full))
	pg := newRTPG(t)
	pg.set(t, full)
	pg.exec(t, "UPDATE $T SET balance = balance + 1 WHERE key = 'acct-3'")

	yml := fmt.Sprintf(`derivations:
  - name: balances
    sources: [payments]
    filter: event.type == "transfer"
    key: '[event.from, event.to]'
    initial: '0'
    step: 'key == event.from ? state - event.amount : state + event.amount'
    store:
      postgres:
        dsn: %q
        table: %s
    grace: 0s
    confirm_runs: 1
    interval: 1h
    full_interval: 2h
`, storetest.PostgresDSN(), strings.Trim(pg.table, `"`))
	specs, err := spec.Parse("derivations.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	jobs := []Job{rtJob(t, specs[0])}
	b := lg.bucket(t)
	r := lg.runner(b)
	reports := make(chan *Report, 4)
	d := NewDaemon(r, jobs, WithOnReport(func(j Job, rep *Report) {
		if j.Spec != specs[0] {
			t.Errorf("OnReport for job %s", j.Spec.Name)
		}
		reports <- rep
	}))
	if rep, err := d.Latest("balances"); rep != nil || err != nil {
		t.Fatalf("Latest before any run: %v, %v", rep, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	next := func() *Report {
		t.Helper()
		select {
		case rep := <-reports:
			return rep
		case <-time.After(15 * time.Second):
			t.Fatal("no report")
			return nil
		}
	}
	latest := func(want *Report) {
		t.Helper()
		rep, err := d.Latest("balances")
		if err != nil || rep != want {
			t.Errorf("Latest: %p (%v), want the report OnReport got (%p)", rep, err, want)
		}
		info := JobInfo{Name: "balances", Sources: []string{"payments"}, Store: "postgres",
			Interval: store.Duration(time.Hour), FullInterval: store.Duration(2 * time.Hour),
			LastState: want.State, LastRunAt: want.StartedAt, Confirmed: want.Confirmed, Pending: want.Pending, File: "derivations.yaml"}
		if jobs := d.Jobs(); !reflect.DeepEqual(jobs, []JobInfo{info}) {
			t.Errorf("Jobs:\n got %+v\nwant %+v", jobs, []JobInfo{info})
		}
	}

	// The first run starts at once.
	rep := next()
	rtCheck(t, rep, rtWant{State: StateDrift, Confirmed: 1,
		Stats: compare.Stats{Rows: n, Keys: n, Matched: n - 1, Mismatched: 1},
		Drift: []rtDrift{rtMismatch("acct-3", full["acct-3"], full["acct-3"]+1, rtConfirmed, 1)}})
	if rep.Mode != "full" {
		t.Errorf("first run: mode %s, want full", rep.Mode)
	}
	latest(rep)

	// Fixed; an incremental run on demand, then a full one.
	pg.set(t, full)
	if err := d.Trigger("balances", false); err != nil {
		t.Fatal(err)
	}
	rep = next()
	rtCheck(t, rep, rtWant{State: StateClean, Stats: compare.Stats{Rows: n, Keys: n, Matched: n}})
	if rep.Mode != "incremental" {
		t.Errorf("triggered run: mode %s, want incremental", rep.Mode)
	}
	latest(rep)
	if err := d.Trigger("balances", true); err != nil {
		t.Fatal(err)
	}
	rep = next()
	if rep.Mode != "full" || rep.State != StateClean || len(rep.IncrementalMismatch) != 0 {
		t.Errorf("triggered full run: mode %s, state %s, incremental mismatch %v; want full, clean, none", rep.Mode, rep.State, rep.IncrementalMismatch)
	}
	latest(rep)

	if err := d.Trigger("nope", false); !errors.Is(err, ErrUnknownDerivation) {
		t.Errorf("Trigger(nope): %v, want ErrUnknownDerivation", err)
	}
	if rep, err := d.Latest("nope"); rep != nil || !errors.Is(err, ErrUnknownDerivation) {
		t.Errorf("Latest(nope): %v, %v; want ErrUnknownDerivation", rep, err)
	}

	// A new daemon starts from the latest saved report.
	cancel()
	<-done
	select {
	case rep := <-reports:
		t.Errorf("a report after the daemon stopped: %+v", rep)
	default:
	}
	d2 := NewDaemon(r, jobs)
	saved, err := d2.Latest("balances")
	if err != nil || saved == nil || saved.State != StateClean || saved.Mode != "full" || !saved.StartedAt.Equal(rep.StartedAt) {
		t.Errorf("Latest of a new daemon: %+v (%v), want the last report", saved, err)
	}
}
