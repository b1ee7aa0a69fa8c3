package spec

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// mergeBomb is a spec of levels mappings, each merging the one before ten
// times: 10^levels pairs once expanded, from under a kilobyte. before is
// placed ahead of the bomb in the derivations list.
func mergeBomb(levels int, before string) string {
	var b strings.Builder
	b.WriteString("derivations:\n" + before + "  - &m0 {k: 1}\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "  - &m%d {<<: [", i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*m%d", i-1)
		}
		b.WriteString("]}\n")
	}
	fmt.Fprintf(&b, "  - <<: *m%d\n    name: x\n", levels)
	return b.String()
}

// aliasBomb is a billion laughs: levels lists, each of ten aliases of the
// one before.
func aliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("derivations:\n  - name: x\n    sources: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "  - name: x%d\n    sources: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// parseBounded runs Parse, failing the test if it has not returned within
// a generous bound (an unbounded expansion runs for minutes or hours).
func parseBounded(t *testing.T, data string) ([]*Spec, error) {
	t.Helper()
	type result struct {
		specs []*Spec
		err   error
	}
	done := make(chan result, 1)
	go func() {
		specs, err := Parse("bomb.yaml", []byte(data))
		done <- result{specs, err}
	}()
	select {
	case r := <-done:
		return r.specs, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("Parse of a %d-byte file still running after 30s: expansion is unbounded", len(data))
		return nil, nil
	}
}

func TestSpecMergeBomb(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		// yaml's decoder refuses it, as it refuses it in the daemon's config.
		{"merges", mergeBomb(10, ""), "expand the document out of proportion to its size (document contains excessive aliasing: past 1,000 decoded nodes at most 99%"},
		// A fatal error ahead of the bomb stops yaml's decoder before it;
		// the spec decoder's own walk goes on, expanding each mapping once.
		{"merges after a bad merge", mergeBomb(10, "  - <<: 5\n"), "merge (<<) wants a mapping or a list of mappings"},
		{"aliases", aliasBomb(10), "document contains excessive aliasing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseBounded(t, tc.yaml)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse of a %d-byte bomb: error %v, want one containing %q", len(tc.yaml), err, tc.want)
			}
		})
	}
}

// TestSpecMergeBombNodes checks the walk's own budget: merged pairs count
// against specMaxNodes, each time a mapping is merged. A bad merge ahead
// of the bomb keeps yaml's decoder from reaching it.
func TestSpecMergeBombNodes(t *testing.T) {
	var b strings.Builder
	b.WriteString("derivations:\n  - <<: 5\n  - &w {")
	for i := range 1000 {
		fmt.Fprintf(&b, "k%d: 0, ", i)
	}
	b.WriteString("k: 0}\n")
	for range 2000 { // 2,000 x 1,001 pairs
		b.WriteString("  - {<<: *w}\n")
	}
	_, err := parseBounded(t, b.String())
	want := fmt.Sprintf("the document expands to more than %d nodes through aliases (*name) and merge keys (<<)", specMaxNodes)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Parse of a %d-byte file: error %.300v..., want one containing %q", b.Len(), err, want)
	}
	// Each merged copy is a derivation of 1,001 unknown fields.
	if errs := specErrs(t, err); len(errs) > specMaxErrors+2 {
		t.Errorf("%d errors reported, want at most %d and a note", len(errs), specMaxErrors+2)
	}
}

func TestSpecAliasedExpressions(t *testing.T) {
	// One derivation aliased 2,000 times: each copy's 4 KB step would be
	// compiled (about half a minute) from an 18 KB file.
	step := "state" + strings.Repeat(" + event.a", 400)
	var b strings.Builder
	fmt.Fprintf(&b, "derivations:\n  - &s {name: x, sources: [l], key: event.k, initial: '0', step: '%s', store: {file: {path: x}}}\n", step)
	for range 2000 {
		b.WriteString("  - *s\n")
	}
	_, err := parseBounded(t, b.String())
	if err == nil || !strings.Contains(err.Error(), "repeat the derivations' CEL expressions to") {
		t.Fatalf("error %v, want the aliased expressions refused", err)
	}
}

// TestSpecAnchorsNotRefused: ordinary use of anchors, aliases and merges
// stays well within every bound.
func TestSpecAnchorsNotRefused(t *testing.T) {
	y := `derivations:
  - &base
    name: balances
    sources: &logs [payments.*, transfers-http]
    filter: &transfers event.type == "transfer"
    key: '[event.from, event.to]'
    initial: "0"
    step: &step 'key == event.from ? state - event.amount : state + event.amount'
    grace: &grace 2m
    store: &pg
      postgres: {dsn: "postgres://x", table: balances}
  - <<: *base
    name: balances-eu
    sources: [payments-eu.*]
  - &counts
    name: counts
    sources: *logs
    filter: *transfers
    key: event.from
    initial: "0"
    step: state + 1
    grace: *grace
    store: {redis: {addr: "127.0.0.1:6379", pattern: "counts:*"}}
  - <<: [*counts, *base]
    name: counts-eu
    sources: [payments-eu.*]
`
	specs, err := parseBounded(t, y)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 4 || specs[3].Step != "state + 1" || specs[3].Store.Redis == nil || specs[3].Grace != store.Duration(2*time.Minute) || specs[1].Store.Postgres == nil {
		t.Fatalf("specs: %+v", specs)
	}
}

func TestSpecErrorsCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("derivations:\n  - &d {name: d, a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1, j: 1}\n")
	for range 300 {
		b.WriteString("  - *d\n")
	}
	_, err := parseBounded(t, b.String())
	errs := specErrs(t, err)
	if len(errs) != specMaxErrors+1 || errs[specMaxErrors].Msg != fmt.Sprintf("more than %d errors; the rest are not shown", specMaxErrors) {
		t.Fatalf("%d errors, the last %v; want %d and a note", len(errs), errs[len(errs)-1], specMaxErrors)
	}
}
