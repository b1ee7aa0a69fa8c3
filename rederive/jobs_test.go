package rederive

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/spec"
	"github.com/auditd/auditd/rederive/store"
)

// TestLoadJobs: every spec of every file is compiled into a job, in file
// order, with the files' warnings; a spec that does not compile is an
// error placed in its file, and no jobs.
func TestLoadJobs(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	b := filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(a, []byte(jobsSpecYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(`derivations:
  - name: broken
    sources: [payments]
    key: event.acct
    initial: "0"
    step: stat + 1
    store: {file: {path: x.jsonl}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	jobs, warnings, err := LoadJobs(a)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range jobs {
		if j.Spec.Name != j.Derivation.Name() {
			t.Errorf("job of spec %q compiled derivation %q", j.Spec.Name, j.Derivation.Name())
		}
		names = append(names, j.Derivation.Name())
	}
	if !reflect.DeepEqual(names, []string{"balances", "counts.by-type"}) {
		t.Fatalf("jobs %q", names)
	}
	if got := Specs(jobs); len(got) != 2 || got[0] != jobs[0].Spec || got[1] != jobs[1].Spec {
		t.Fatalf("Specs = %v", got)
	}
	if want := spec.Warnings(Specs(jobs)); len(warnings) != len(want) {
		t.Fatalf("warnings %v, want %v", warnings, want)
	}

	jobs, _, err = LoadJobs(a, b)
	if jobs != nil || err == nil || !strings.HasPrefix(err.Error(), b+":6:") || !strings.Contains(err.Error(), "undeclared reference to 'stat'") {
		t.Fatalf("a broken spec: %d jobs, err %v; want none and an error at %s:6", len(jobs), err, b)
	}
	if jobs, _, err := LoadJobs(filepath.Join(dir, "missing.yaml")); jobs != nil || err == nil {
		t.Fatalf("a missing file: %d jobs, err %v", len(jobs), err)
	}
	if jobs, warnings, err := LoadJobs(); jobs != nil || warnings != nil || err != nil {
		t.Fatalf("no files: %v %v %v", jobs, warnings, err)
	}
}

func TestSpecCompileGoBuilt(t *testing.T) {
	s := &spec.Spec{
		Name: "counts", Sources: []string{"orders.*"}, Key: "event.type", Initial: "0", Step: "state + 1",
		Store:       store.Config{File: &store.FileConfig{Path: "counts.jsonl"}},
		ConfirmRuns: 1, Interval: store.Duration(time.Minute), FullInterval: store.Duration(time.Hour),
	}
	d, err := spec.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() != "counts" || !reflect.DeepEqual(d.Sources(), []string{"orders.*"}) {
		t.Fatalf("name %q sources %q", d.Name(), d.Sources())
	}
	s.Step = "stat + 1"
	_, err = spec.Compile(s)
	errs := specErrors(t, err)
	// No file positions for a spec built in Go.
	if len(errs) != 1 || errs[0].Line != 0 || errs[0].Error() != `derivation "counts": step: ERROR: <input>:1:1: undeclared reference to 'stat'` {
		t.Fatalf("err = %v", err)
	}
}

// jobsSpecYAML is a valid spec file.
const jobsSpecYAML = `derivations:
  - name: balances
    sources: [payments.*, transfers-http]
    filter: event.type == "transfer"
    key: '[event.from, event.to]'
    initial: "0"
    step: 'key == event.from ? state - event.amount : state + event.amount'
    store:
      postgres:
        dsn: postgres://localhost/app
        query: SELECT account, balance FROM balances
    compare:
      tolerance: {"": 0.01}
  - name: counts.by-type
    sources: [payments.0]
    key: event.type
    initial: "0"
    step: state + 1
    grace: 5m
    confirm_runs: 1
    lineage: 0
    error_budget: 0
    interval: 30s
    full_interval: 2h
    store:
      redis: {pattern: "count:*", prefix: "count:", type: string}
`

// specErrors returns the *spec.Error joined in err.
func specErrors(t *testing.T, err error) []*spec.Error {
	t.Helper()
	var out []*spec.Error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var se *spec.Error
		if !errors.As(err, &se) {
			t.Fatalf("error %v (%T) is not a *spec.Error", err, err)
		}
		out = append(out, se)
	}
	walk(err)
	return out
}
