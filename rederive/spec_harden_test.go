package rederive

import (
	"context"
	"strings"
	"testing"

	"github.com/auditd/auditd/rederive/spec"
	"github.com/auditd/auditd/rederive/store"
)

// Item 3: alias cycles and deep nesting are errors with a position, not a
// stack overflow (which kills the process; no recover can catch it).
func TestParseSpecsAliasCycles(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"self merge", "derivations:\n  - &b\n    <<: *b\n    name: b\n", "alias cycle"},
		{"self merge in a list", "derivations:\n  - &b\n    <<: [*b]\n    name: b\n", "alias cycle"},
		{"mutual merge", "x: &a\n  <<: *c\nderivations:\n  - &c\n    <<: *a\n    name: b\n", ""},
		{"merge cycle in the top mapping", "&t\n<<: *t\nderivations: []\n", "alias cycle"},
		{"value cycle", "derivations:\n  - &b\n    name: b\n    source: {log: x}\n    params: {x: *b}\n", ""},
		{"sequence cycle", "derivations: &l\n  - *l\n", ""},
		{"deep nesting", "derivations:\n  - name: b\n    params: " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + "\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := spec.Parse("c.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

// Item 16: an unset ${VAR} in a DSN (or a Redis address, an HTTP URL or
// header) fails the store's opening, naming the variable, instead of
// becoming "" (pgx would then connect to the default socket and database).
func TestStoreUnsetVariable(t *testing.T) {
	for name, c := range map[string]store.Config{
		"postgres dsn":   {Postgres: &store.PostgresConfig{DSN: "${BAL_DSN_UNSET_FOR_TEST}"}},
		"redis password": {Redis: &store.RedisConfig{Addr: "127.0.0.1:6379", Password: "${BAL_DSN_UNSET_FOR_TEST}"}},
		"http url":       {HTTP: &store.HTTPConfig{URL: "http://127.0.0.1:1/${BAL_DSN_UNSET_FOR_TEST}"}},
	} {
		s, err := store.Open(context.Background(), c)
		if err == nil {
			s.Close()
			t.Errorf("%s: opened with an unset variable", name)
			continue
		}
		if !strings.Contains(err.Error(), "BAL_DSN_UNSET_FOR_TEST is not set") {
			t.Errorf("%s: %v, want it to name the unset variable", name, err)
		}
	}
}

// Item 17: a derivation over sources with no entries yet (a log created
// but not signed) is pending, not an error; before any log exists (a fresh
// daemon) it is no_source, not an error either; once events come it is
// judged as usual.
func TestRunnerNoEntriesYetIsPending(t *testing.T) {
	lg := newRTLedger(t)
	pg := newRTPG(t)
	r := lg.runner(lg.bucket(t))
	job := rtJob(t, rtSpec("fresh", pg.config()))
	rep := rtRun(t, r, job, true)
	if rep.State != StateNoSource || rep.ErrorKind != "" || rep.Error != "" || rep.Waiting != "no log matches sources [payments]" {
		t.Fatalf("run before any log exists: state %q, error %q (%s), waiting %q; want no_source", rep.State, rep.ErrorKind, rep.Error, rep.Waiting)
	}
	if _, err := lg.store.CreateLog("payments"); err != nil {
		t.Fatal(err)
	}
	if rep := rtRun(t, r, job, true); rep.State != StatePending {
		t.Fatalf("run over an empty log: state %q (%s)", rep.State, rep.Error)
	}
	evs := rtTransfers(1, 10, 3, "acct-")
	lg.append(t, "payments", evs)
	pg.set(t, rtBalances(evs, nil))
	if rep := rtRun(t, r, job, true); rep.State != StateClean {
		t.Fatalf("run after events: state %q (%s)", rep.State, rep.Error)
	}
}
