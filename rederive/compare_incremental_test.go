package rederive

import (
	"testing"
)

// TestRunnerIncrementalCompare: with compare.incremental, a run that is
// not full reads only the rows of keys whose balance changed since the
// last clean run (the first run, with no baseline, reads every row); a
// store wrong in every row shows drift only in the changed keys then, and
// in every key at the next full run.
func TestRunnerIncrementalCompare(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	pg := newRTPG(t)
	sp := rtSpec("balances", pg.config())
	sp.Compare.Incremental = true
	job := rtJob(t, sp)
	r := lg.runner(lg.bucket(t))
	us := rtTransfers(8, 200, 40, "acct-")
	balances := func() map[string]int64 { return rtBalances(lg.events["payments"], nil) }

	lg.append(t, "payments", us[:150])
	pg.set(t, balances())
	first := rtRun(t, r, job, false)
	if first.State != StateClean || first.Stats.Unchanged != 0 || first.Stats.Rows != int64(first.Keys) {
		t.Fatalf("first run: state %s (%s), stats %+v; want clean, every row read", first.State, first.Error, first.Stats)
	}

	lg.append(t, "payments", us[150:160])
	pg.set(t, balances())
	inc := rtRun(t, r, job, false)
	if inc.State != StateClean || inc.Stats.Unchanged == 0 || inc.Stats.Rows >= int64(inc.Keys) || inc.Stats.Rows+inc.Stats.Unchanged != int64(inc.Keys) {
		t.Fatalf("incremental run: state %s (%s), stats %+v; want clean, only changed keys read", inc.State, inc.Error, inc.Stats)
	}

	lg.append(t, "payments", us[160:170])
	wrong := balances()
	for k := range wrong {
		wrong[k]++
	}
	pg.set(t, wrong)
	inc = rtRun(t, r, job, false)
	if inc.State != StateDrift || inc.Stats.Unchanged == 0 || inc.Stats.Mismatched != inc.Stats.Rows || inc.Stats.Mismatched >= int64(inc.Keys) {
		t.Fatalf("incremental run over a wrong store: state %s (%s), stats %+v; want drift in the changed keys only", inc.State, inc.Error, inc.Stats)
	}
	full := rtRun(t, r, job, true)
	if full.State != StateDrift || full.Stats.Mismatched != int64(full.Keys) || full.Stats.Unchanged != 0 {
		t.Fatalf("full run over a wrong store: state %s, stats %+v; want every key mismatched", full.State, full.Stats)
	}
}
