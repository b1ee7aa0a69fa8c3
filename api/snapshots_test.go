package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

// fakeDerivations is a hand-written api.Derivations of one derivation,
// "bal": configured while configured holds, keeping snapshots unless
// noSnapshots is set, and holding none (ledger.ErrNotFound) otherwise.
type fakeDerivations struct {
	configured  atomic.Bool
	noSnapshots bool
}

var _ api.Derivations = (*fakeDerivations)(nil)

func (f *fakeDerivations) Configured() bool { return f.configured.Load() }

func (f *fakeDerivations) Jobs() []rederive.JobInfo { return []rederive.JobInfo{{Name: "bal"}} }

func (f *fakeDerivations) known(name string) error {
	if name != "bal" {
		return fmt.Errorf("fake: %w", rederive.ErrUnknownDerivation)
	}
	return nil
}

func (f *fakeDerivations) Latest(name string) (*rederive.Report, error) { return nil, f.known(name) }

func (f *fakeDerivations) Trigger(name string, _ bool) error { return f.known(name) }

func (f *fakeDerivations) Snapshot(name string) (*rederive.Snapshot, error) {
	if f.noSnapshots {
		return nil, api.ErrNoSnapshots
	}
	if err := f.known(name); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("fake: %w", ledger.ErrNotFound)
}

// TestDerivationsSnapshotAnswers: a Derivations says through its methods
// that it has none configured now (404 no_derivations on every route),
// that it keeps no snapshots (404 no_snapshot, "this auditd keeps no
// snapshots"), or that a derivation has none yet or does not exist.
func TestDerivationsSnapshotAnswers(t *testing.T) {
	t.Parallel()
	code := func(r interface{ String() string }, body []byte) (string, string) {
		var e struct{ Code, Error string }
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		return e.Code, e.Error
	}
	check := func(env *testEnv, path string, status int, wantCode, wantMsg string) {
		t.Helper()
		r := env.get(path, status)
		if c, msg := code(r, r.body); c != wantCode || wantMsg != "" && msg != wantMsg {
			t.Errorf("GET %s: code %q %q, want %q %q", path, c, msg, wantCode, wantMsg)
		}
	}

	keeps := &fakeDerivations{}
	env := newTestEnv(t, envConfig{opts: api.Options{Components: api.Components{Derivations: keeps}}})
	for _, p := range []string{"/v1/derivations", "/v1/derivations/bal/runs/latest", "/v1/derivations/bal/snapshot"} {
		check(env, p, http.StatusNotFound, "no_derivations", "")
	}
	keeps.configured.Store(true)
	env.getJSON("/v1/derivations", nil)
	check(env, "/v1/derivations/bal/snapshot", http.StatusNotFound, "no_snapshot",
		`derivation "bal" has no snapshot (one is made before its sources are pruned)`)
	check(env, "/v1/derivations/nope/snapshot", http.StatusNotFound, "unknown_derivation", "")

	none := &fakeDerivations{noSnapshots: true}
	none.configured.Store(true)
	env = newTestEnv(t, envConfig{opts: api.Options{Components: api.Components{Derivations: none}}})
	check(env, "/v1/derivations/bal/snapshot", http.StatusNotFound, "no_snapshot", "this auditd keeps no snapshots")
}
