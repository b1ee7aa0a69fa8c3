package spec

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/auditd/auditd/rederive/celfold"
	"github.com/auditd/auditd/rederive/fold"
)

// TestLoadCompiledCompilesOnce: loading two files of three specs compiles
// each spec's CEL once, and the derivations returned are those compiled
// (Compile would compile them again).
func TestLoadCompiledCompilesOnce(t *testing.T) {
	var n atomic.Int32
	defer func(f func(celfold.Expressions) (fold.Derivation, []*celfold.Error)) { celCompile = f }(celCompile)
	celCompile = func(x celfold.Expressions) (fold.Derivation, []*celfold.Error) {
		n.Add(1)
		return celfold.Compile(x)
	}
	dir := t.TempDir()
	one := func(name string) string {
		return "  - name: " + name + "\n    sources: [pay]\n    key: event.acct\n    initial: \"0\"\n    step: state + 1\n    store: {file: {path: x.jsonl}}\n"
	}
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(a, []byte("derivations:\n"+one("x")+one("y")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("derivations:\n"+one("z")), 0o600); err != nil {
		t.Fatal(err)
	}
	specs, ds, err := LoadCompiled(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 3 || len(ds) != 3 {
		t.Fatalf("%d specs, %d derivations", len(specs), len(ds))
	}
	for i, s := range specs {
		if ds[i] == nil || ds[i].Name() != s.Name {
			t.Fatalf("derivation %d: %v for spec %q", i, ds[i], s.Name)
		}
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("3 specs compiled %d times, want 3", got)
	}
}
