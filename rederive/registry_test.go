package rederive

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
	"github.com/auditd/auditd/rederive/store"
)

// Counter is a derivation written in Go: events per key.
type Counter struct{}

func (Counter) Name() string { return "order-count" }

func (Counter) Sources() []string { return []string{"orders.*"} }

func (Counter) Prepare(ev *fold.Event) ([]string, any, error) {
	if !ev.HasKey {
		return nil, nil, nil
	}
	return []string{string(ev.Key)}, nil, nil
}

func (Counter) Initial(string) (fold.State, error) { return int64(0), nil }

func (Counter) Step(s fold.State, _ any, _ *fold.Event, _ string) (fold.State, error) {
	return s.(int64) + 1, nil
}

func (Counter) Export(s fold.State) (any, error) { return s, nil }

func (Counter) Encode(s fold.State) ([]byte, error) {
	return fmt.Appendf(nil, "%d", s.(int64)), nil
}

func (Counter) Decode(b []byte) (fold.State, error) {
	var n int64
	_, err := fmt.Sscan(string(b), &n)
	return n, err
}

func ExampleRegistry() {
	r := NewRegistry()

	// A derivation written in Go, checked against a JSONL file.
	check := &spec.Spec{
		Store:       store.Config{File: &store.FileConfig{Path: "order-counts.jsonl"}},
		ConfirmRuns: 2, Interval: store.Duration(time.Minute), FullInterval: store.Duration(time.Hour),
	}
	if err := r.Register(Counter{}, check); err != nil {
		fmt.Println(err)
	}

	// Derivations declared in YAML.
	specs, err := spec.Parse("derivations.yaml", []byte(`derivations:
  - name: orders-by-status
    sources: [orders.*]
    key: event.status
    initial: "0"
    step: state + 1
    store: {redis: {pattern: "status:*", prefix: "status:", type: string}}
`))
	if err != nil {
		fmt.Println(err)
	}
	if err := r.RegisterSpecs(specs...); err != nil {
		fmt.Println(err)
	}

	// Names are unique.
	fmt.Println(r.Register(Counter{}, nil))
	fmt.Println(r.Names())

	d, _, _ := r.Lookup("order-count")
	state, _ := d.Initial("o-1")
	for range 3 {
		state, _ = d.Step(state, nil, &fold.Event{HasKey: true, Key: []byte("o-1")}, "o-1")
	}
	fmt.Println(d.Export(state))
	// Output:
	// rederive: register: duplicate derivation name "order-count"
	// [order-count orders-by-status]
	// 3 <nil>
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	specs, err := spec.Parse("d.yaml", []byte(registrySpecYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterSpecs(specs...); err != nil {
		t.Fatal(err)
	}
	err = r.RegisterSpecs(specs[0])
	if err == nil || !strings.Contains(err.Error(), `duplicate derivation name "balances" (declared at d.yaml:2)`) {
		t.Fatalf("duplicate: %v", err)
	}
	d, s, ok := r.Lookup("balances")
	if !ok || d.Name() != "balances" || s != specs[0] {
		t.Fatalf("Lookup = %v %v %v", d, s, ok)
	}
	if _, _, ok := r.Lookup("nope"); ok {
		t.Fatal("found nope")
	}
	if err := r.Register(Counter{}, &spec.Spec{Name: "other"}); err == nil {
		t.Fatal("spec named differently: no error")
	}
	if err := r.Register(Counter{}, &spec.Spec{}); err == nil || !strings.Contains(err.Error(), "missing store") {
		t.Fatalf("invalid settings: %v", err)
	}
	if got := r.Names(); !reflect.DeepEqual(got, []string{"balances", "counts.by-type"}) {
		t.Fatalf("Names = %q", got)
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

// registrySpecYAML is a valid spec file.
const registrySpecYAML = `derivations:
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
