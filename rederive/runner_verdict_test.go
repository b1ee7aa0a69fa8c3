package rederive

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/rederive/store/storetest"
)

// TestRunnerWatermarkAheadIsPending: a store whose watermark stays ahead of
// the latest signed checkpoint (it applied an entry not signed yet) is not
// judged on the keys that entry touched: its drifts are pending, with the
// reason, never confirmed. Once a checkpoint covers the watermark, the same
// store is clean, and a real fault in it is confirmed.
func TestRunnerWatermarkAheadIsPending(t *testing.T) {
	t.Parallel()
	// Checkpoints of entries at most every hour: the second append stays
	// unsigned for the whole run (the first is signed at once).
	lg := newRTLedger(t, ledger.WithCheckpointInterval(time.Hour))
	evs := rtTransfers(21, 1101, 40, "acct-") // past a read batch
	lg.append(t, "payments", evs[:1100])
	lg.appendUnsigned(t, "payments", evs[1100:])
	all := rtBalances(evs, nil)
	n := int64(len(all))
	pg := newRTPG(t)
	pg.set(t, all)
	wm := storetest.PostgresTable(t, pg.conn, "log text, size bigint")
	storetest.Exec(t, pg.conn, fmt.Sprintf("INSERT INTO %s VALUES ('payments', 1101)", wm))
	cfg := pg.config()
	cfg.Postgres.WatermarkQuery = "SELECT log, size FROM " + wm
	job := rtJob(t, rtSpec("balances", cfg))

	rep := rtRun(t, lg.runner(nil), job, false)
	if size := lg.checkpoint(t, "payments").Size; size != 1100 {
		t.Fatalf("checkpoint at %d during the run: the case is not exercised", size)
	}
	if rep.State != StatePending || rep.Confirmed != 0 || rep.Pending != 2 {
		t.Fatalf("state %s, confirmed %d, pending %d; want pending with the 2 keys entry 1100 touched", rep.State, rep.Confirmed, rep.Pending)
	}
	if len(rep.Ahead) != 1 || !strings.Contains(rep.Waiting, "watermark 1101") || !strings.Contains(rep.Waiting, "size 1100") {
		t.Errorf("ahead %q, waiting %q: want the watermark and the checkpoint named", rep.Ahead, rep.Waiting)
	}
	for _, d := range rep.Drift {
		if d.Key != evs[1100].From && d.Key != evs[1100].To || d.Status != "pending" {
			t.Errorf("drift %+v: want the pending keys of entry 1100", d)
		}
	}
	var text bytes.Buffer
	if err := WriteTable(&text, []*Report{rep}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "ahead of the latest signed checkpoint") {
		t.Errorf("the text report does not say why the drift is pending:\n%s", text.String())
	}

	// The same rows under a watermark the signed checkpoint covers: the
	// store claims 1,100 entries but holds entry 1,100's effect too, a real
	// fault, confirmed.
	storetest.Exec(t, pg.conn, "UPDATE "+wm+" SET size = 1100")
	rep = rtRun(t, lg.runner(nil), job, false)
	if rep.State != StateDrift || rep.Confirmed != 2 || len(rep.Ahead) != 0 {
		t.Errorf("watermark 1100: state %s, confirmed %d, ahead %q; want the 2 keys confirmed", rep.State, rep.Confirmed, rep.Ahead)
	}
	if rep.Stats.Keys != n {
		t.Errorf("keys %d, want %d", rep.Stats.Keys, n)
	}
}

// TestRunnerWatermarkMissingLogIsError: a store that reports watermarks,
// but none for one of the derivation's source logs, ends the run in error
// naming the log, instead of folding that log to 0 entries and reporting
// every key it derives as drift.
func TestRunnerWatermarkMissingLogIsError(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	pay, ref := rtTransfers(3, 300, 10, "acct-"), rtTransfers(4, 300, 10, "acct-")
	lg.append(t, "payments", pay)
	lg.append(t, "refunds", ref)
	pg := newRTPG(t)
	pg.set(t, rtMerge(rtBalances(pay, nil), rtBalances(ref, nil)))
	wm := storetest.PostgresTable(t, pg.conn, "log text, size bigint")
	storetest.Exec(t, pg.conn, fmt.Sprintf("INSERT INTO %s VALUES ('payments', 300)", wm))
	cfg := pg.config()
	cfg.Postgres.WatermarkQuery = "SELECT log, size FROM " + wm
	job := rtJob(t, rtSpec("balances", cfg, "payments", "refunds"))

	rep := rtRun(t, lg.runner(nil), job, false)
	rtCheck(t, rep, rtWant{State: StateError, ErrorKind: ErrKindStore})
	if !strings.Contains(rep.Error, "refunds") || !strings.Contains(rep.Error, ErrWatermarkMissing.Error()) {
		t.Errorf("error %q: want the missing log named", rep.Error)
	}

	// With its row, the same store is clean.
	storetest.Exec(t, pg.conn, fmt.Sprintf("INSERT INTO %s VALUES ('refunds', 300)", wm))
	rep = rtRun(t, lg.runner(nil), job, false)
	if rep.State != StateClean {
		t.Errorf("with every log's watermark: state %s (%s), want clean", rep.State, rep.Error)
	}
}

// TestRunnerEveryEventFailsIsError: a step with a typo fails on every event;
// within the error budget that used to leave no key derived and report every
// row of a correct store as extra drift. It is a derivation error, exit 2
// in verify, and no drift.
func TestRunnerEveryEventFailsIsError(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(5, 300, 12, "acct-")
	lg.append(t, "payments", evs)
	pg := newRTPG(t)
	pg.set(t, rtBalances(evs, nil))
	sp := rtSpec("balances", pg.config())
	sp.ErrorBudget = 1000
	sp.Step = `key == event.from ? state - event.amont : state + event.amont`
	rep := rtRun(t, lg.runner(nil), rtJob(t, sp), false)
	rtCheck(t, rep, rtWant{State: StateError, ErrorKind: ErrKindDerivation})
	if !strings.Contains(rep.Error, "every event failed") || !strings.Contains(rep.Error, "amont") {
		t.Errorf("error %q: want every event failed, with the first error", rep.Error)
	}
	if rep.DerivationErrors != 300 {
		t.Errorf("derivation errors %d, want one per event (300), though each failed for two keys", rep.DerivationErrors)
	}
}

// TestRunnerSkippedEventsShown: events skipped on derivation errors within
// the budget are named in the text, Markdown and JUnit reports, not only in
// the JSON.
func TestRunnerSkippedEventsShown(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(8, 1030, 9, "acct-")
	for _, i := range []int{3, 500, 1027} {
		evs[i] = rtEvent{Raw: `{"type":"transfer","from":"acct-1","amount":5}`} // no "to"
	}
	lg.append(t, "payments", evs)
	pg := newRTPG(t)
	pg.set(t, rtBalances(evs, nil))
	sp := rtSpec("balances", pg.config())
	sp.ErrorBudget = 10
	rep := rtRun(t, lg.runner(nil), rtJob(t, sp), false)
	if rep.State != StateClean || rep.DerivationErrors != 3 {
		t.Fatalf("state %s, derivation errors %d; want clean with 3 skipped", rep.State, rep.DerivationErrors)
	}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"text":     func(b *bytes.Buffer) error { return WriteTable(b, []*Report{rep}) },
		"markdown": func(b *bytes.Buffer) error { return WriteMarkdown(b, []*Report{rep}) },
		"junit":    func(b *bytes.Buffer) error { return WriteJUnit(b, []*Report{rep}) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "3 events skipped") || !strings.Contains(b.String(), "payments#1027") {
			t.Errorf("%s report does not show the skipped events:\n%s", name, b.String())
		}
	}
}

// TestRunnerGraceCountsFromLedgered: the grace period counts from when the
// ledger took the event, not from the time the event carries. A backfill
// of events dated two days ago, ledgered now, is within its grace (pending);
// events dated five years ahead, ledgered two hours ago, are past a grace
// of an hour (confirmed). Past a read batch, on several logs' worth of
// group commits.
func TestRunnerGraceCountsFromLedgered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		eventAge  time.Duration // how long before now the events are dated (negative: ahead)
		ledgered  time.Duration // how long before now the ledger took them
		wantState string
	}{
		{"backfill of old events, just ledgered", 48 * time.Hour, 0, StatePending},
		{"events dated ahead, ledgered long ago", -5 * 365 * 24 * time.Hour, 2 * time.Hour, StateDrift},
		{"old events ledgered long ago", 48 * time.Hour, 2 * time.Hour, StateDrift},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lg := newRTLedger(t, ledger.WithClock(func() time.Time { return time.Now().Add(-tc.ledgered) }))
			evs := rtTransfers(31, 1100, 20, "acct-")
			l := lg.log(t, "payments")
			for lo := 0; lo < len(evs); lo += 100 { // several group commits
				es := make([]ledger.Entry, 0, 100)
				for i := lo; i < lo+100; i++ {
					es = append(es, ledger.Entry{ID: rtID("payments", i), Time: time.Now().Add(-tc.eventAge).Add(time.Duration(i) * time.Millisecond), Payload: evs[i].payload(), PayloadJSON: true})
				}
				if _, err := l.Append(t.Context(), es); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.WaitCheckpoint(t.Context(), uint64(len(evs))); err != nil {
				t.Fatal(err)
			}
			wrong := rtBalances(evs, nil)
			wrong[evs[1099].To] += 7 // the key of the last event: the newest is the youngest
			pg := newRTPG(t)
			pg.set(t, wrong)
			sp := rtSpec("balances", pg.config())
			sp.Grace = store.Duration(time.Hour)
			rep := rtRun(t, lg.runner(nil), rtJob(t, sp), false)
			if rep.State != tc.wantState || rep.Confirmed+rep.Pending != 1 {
				t.Errorf("state %s (confirmed %d, pending %d), want %s for the one wrong key", rep.State, rep.Confirmed, rep.Pending, tc.wantState)
			}
		})
	}
}

// TestRunnerChecksStoreFirst: a store that is down, or whose table does not
// exist, is reported before the fold reads a single event (the fold of a
// large ledger took seconds before "store down" was said).
func TestRunnerChecksStoreFirst(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	lg.append(t, "payments", rtTransfers(6, 2100, 30, "acct-"))
	for _, tt := range []struct {
		name  string
		store store.Config
	}{
		{"postgres down", store.Config{Postgres: &store.PostgresConfig{DSN: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5", Table: "balances"}}},
		{"no such table", store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Table: "no_such_table_for_auditd"}}},
		{"redis down", store.Config{Redis: &store.RedisConfig{Addr: "127.0.0.1:1", Pattern: "balance:*", Prefix: "balance:"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := rtRun(t, lg.runner(nil), rtJob(t, rtSpec("balances", tt.store)), false)
			if rep.State != StateError || rep.ErrorKind != ErrKindStore {
				t.Fatalf("state %s, kind %s (%s); want a store error", rep.State, rep.ErrorKind, rep.Error)
			}
			if rep.Events != 0 {
				t.Errorf("%d events folded before the store was found unusable", rep.Events)
			}
		})
	}
}

// TestRunnerSchemaMismatchIsConfigError: cents kept as text in a table the
// derivation expects numbers from is one configuration error naming the
// column (exit 2), not 2,000 confirmed drifts; with the right column type
// the same values are clean and a wrong one is one drift.
func TestRunnerSchemaMismatchIsConfigError(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(12, 2100, 2000, "acct-")
	lg.append(t, "payments", evs)
	balances := rtBalances(evs, nil)
	conn := storetest.PostgresConn(t)
	table := storetest.PostgresTable(t, conn, "key text, cents text")
	var b strings.Builder
	for k, v := range balances {
		fmt.Fprintf(&b, "('%s', '%d'),", k, v)
	}
	storetest.Exec(t, conn, "INSERT INTO "+table+" VALUES "+strings.TrimSuffix(b.String(), ","))
	cfg := store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Table: strings.Trim(table, `"`)}}
	rep := rtRun(t, lg.runner(nil), rtJob(t, rtSpec("balances", cfg)), false)
	if rep.State != StateError || rep.ErrorKind != ErrKindConfig || !strings.Contains(rep.Error, "cents") {
		t.Fatalf("state %s, kind %s, error %q; want a config error naming the column cents", rep.State, rep.ErrorKind, rep.Error)
	}
	if rep.Confirmed != 0 || len(rep.Drift) != 0 {
		t.Errorf("%d drifts reported for a schema mismatch", len(rep.Drift))
	}
	storetest.Exec(t, conn, "ALTER TABLE "+table+" ALTER COLUMN cents TYPE bigint USING cents::bigint")
	rep = rtRun(t, lg.runner(nil), rtJob(t, rtSpec("balances", cfg)), false)
	if rep.State != StateClean {
		t.Errorf("with a bigint column: state %s (%s), want clean", rep.State, rep.Error)
	}
	storetest.Exec(t, conn, "UPDATE "+table+" SET cents = cents + 1 WHERE key = 'acct-7'")
	rep = rtRun(t, lg.runner(nil), rtJob(t, rtSpec("balances", cfg)), false)
	if rep.State != StateDrift || rep.Confirmed != 1 {
		t.Errorf("one wrong row: state %s, confirmed %d; want one drift", rep.State, rep.Confirmed)
	}
}

// TestRunnerLineageNamesCulprit: the lineage of a drifted balance names the
// entry whose contribution explains the difference, even when it is far
// older than the key's last five entries: one the store applied twice, one
// it missed. A key that agreed in the previous run also gets its first
// entry since that run.
func TestRunnerLineageNamesCulprit(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	evs := rtTransfers(41, 1500, 10, "acct-") // ~300 entries a key
	evs[100].Amount, evs[200].Amount = 100003, 200003
	evs[200].From, evs[200].To = "acct-8", "acct-9"
	if evs[100].From == "acct-8" || evs[100].From == "acct-9" || evs[100].To == "acct-8" || evs[100].To == "acct-9" {
		evs[100].From, evs[100].To = "acct-1", "acct-2"
	}
	lg.append(t, "payments", evs)
	pg := newRTPG(t)
	b := lg.bucket(t)
	job := rtJob(t, rtSpec("balances", pg.config()))
	pg.set(t, rtBalances(evs, nil))
	if rep := rtRun(t, lg.runner(b), job, false); rep.State != StateClean {
		t.Fatalf("first run: %s", rep.State)
	}

	more := rtTransfers(42, 300, 10, "acct-")
	lg.append(t, "payments", more)
	all := append(append([]rtEvent(nil), evs...), more...)
	store := rtBalances(all, nil)
	e := evs[100] // applied twice
	store[e.From] -= e.Amount
	store[e.To] += e.Amount
	m := evs[200] // missed
	store[m.From] += m.Amount
	store[m.To] -= m.Amount
	pg.set(t, store)
	rep := rtRun(t, lg.runner(b), job, false)
	if rep.State != StateDrift || rep.Confirmed != 4 {
		t.Fatalf("state %s, confirmed %d; want the 4 keys", rep.State, rep.Confirmed)
	}
	for _, dr := range rep.Drift {
		want, why := 100, "applied it twice"
		if dr.Key == m.From || dr.Key == m.To {
			want, why = 200, "missed it"
		}
		named, since := false, false
		for _, ev := range dr.Lineage {
			if ev.Index == uint64(want) && strings.Contains(ev.Why, why) {
				named = true
			}
			if strings.Contains(ev.Why, "first entry since") {
				since = ev.Index >= 1500
			}
		}
		if !named {
			t.Errorf("%s: lineage does not name entry %d as %q: %+v", dr.Key, want, why, dr.Lineage)
		}
		if !since {
			t.Errorf("%s: lineage does not name the key's first entry since the clean run at 1500", dr.Key)
		}
	}
	var text bytes.Buffer
	if err := WriteTable(&text, []*Report{rep}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "payments#100") || !strings.Contains(text.String(), "applied it twice") {
		t.Errorf("the text report does not name the culprit:\n%s", text.String())
	}
}
