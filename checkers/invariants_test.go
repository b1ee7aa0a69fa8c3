package checkers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
)

// TestInvariantCheck checks the invariants of a CEL derivation over the
// result it saved in a real ledger bucket: nothing before the first save,
// the failing key and the failing sum after one, nothing once the saved
// state meets them again.
func TestInvariantCheck(t *testing.T) {
	key := newKey(t)
	st, err := ledger.Open(t.TempDir(), key.signer, key.verifier, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := st.Bucket("derive")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := spec.Parse("bal.yaml", []byte(`derivations:
  - name: bal
    sources: [pay]
    store: {file: {path: x.jsonl}}
    key: event.k
    initial: 'key.startsWith("neg") ? -5 : 10'
    step: state + 1
`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := spec.Compile(specs[0])
	if err != nil {
		t.Fatal(err)
	}
	iv, err := rederive.CompileInvariants("bal", []rederive.InvariantSpec{
		{Name: "non_negative", PerKey: "state >= 0"},
		{Name: "total", All: "sum(values) <= 20"},
	})
	if err != nil {
		t.Fatal(err)
	}
	check := checkers.NewInvariantCheck(b, nil, nil, []rederive.InvariantTarget{{Derivation: d, Invariants: iv}})
	run := func() []checkers.Finding {
		t.Helper()
		c := &collector{}
		if err := check.Run(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		return c.findings
	}
	if fs := run(); len(fs) != 0 {
		t.Fatalf("before any result: %v", fs)
	}
	save := func(keys ...string) {
		t.Helper()
		r := &fold.Result{Derivation: "bal", Pins: []fold.Pin{{Log: "pay", Size: 1}},
			States: map[string]fold.State{}, Newest: map[string]fold.EventRef{}}
		for _, k := range keys {
			s, err := d.Initial(k)
			if err != nil {
				t.Fatal(err)
			}
			r.States[k] = s
			r.Newest[k] = fold.EventRef{Log: "pay"}
		}
		if err := fold.SaveResult(b, d, r); err != nil {
			t.Fatal(err)
		}
	}
	save("a", "b", "c", "neg-1")
	fs := run()
	if len(fs) != 2 || !strings.Contains(fs[0].Detail, `key "neg-1"`) || !strings.Contains(fs[1].Detail, "total") {
		t.Fatalf("findings %v", fs)
	}
	save("a", "b")
	if fs := run(); len(fs) != 0 {
		t.Fatalf("after the fix: %v", fs)
	}
}
