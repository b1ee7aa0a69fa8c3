package spec

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/fold"
)

// TestSpecDocExamples loads every derivations file in docs/derivations.md
// and checks the worked examples' behaviour.
func TestSpecDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/derivations.md")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Spec{}
	blocks := strings.Split(string(doc), "```yaml\n")[1:]
	for i, b := range blocks {
		b, _, _ = strings.Cut(b, "```")
		if !strings.HasPrefix(b, "derivations:") {
			continue
		}
		specs, err := Parse(fmt.Sprintf("block%d.yaml", i), []byte(b))
		if err != nil {
			t.Fatalf("block %d: %v\n%s", i, err, b)
		}
		for _, s := range specs {
			if _, err := Compile(s); err != nil {
				t.Fatal(err)
			}
			byName[s.Name] = s
		}
	}
	for _, name := range []string{"balances", "events-by-type", "profile-cache"} {
		if byName[name] == nil {
			t.Fatalf("example %s not found", name)
		}
	}
	foldDoc := func(name string, payloads ...string) map[string]any {
		d, err := Compile(byName[name])
		if err != nil {
			t.Fatal(err)
		}
		return docFold(t, d, payloads...)
	}
	got := foldDoc("balances",
		`{"type":"deposit","account":"a","amount":100}`,
		`{"type":"transfer","from":"a","to":"b","amount":30}`,
		`{"type":"withdrawal","account":"b","amount":5}`,
		`{"type":"fee","account":"a","amount":1}`)
	if want := map[string]any{"a": int64(70), "b": int64(25)}; !reflect.DeepEqual(got, want) {
		t.Errorf("balances: %v", got)
	}
	got = foldDoc("profile-cache",
		`{"kind":"upsert","user_id":"u1","name":"A","email":"a@x","version":2}`,
		`{"kind":"upsert","user_id":"u1","name":"old","email":"a@x","version":1}`,
		`{"kind":"upsert","user_id":"u2","name":"B","email":"b@x","version":1}`,
		`{"kind":"delete","user_id":"u2"}`)
	want := map[string]any{"u1": map[string]any{"name": "A", "email": "a@x", "version": int64(2)}, "u2": nil}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("profile-cache: %v", got)
	}
	// Expressions the reference names.
	d := docSpec(t, `
		key: '"k"'
		initial: "[]"
		step: >-
		  state + [event.?amount.orValue(0), {"b": 1, "a": 2}.map(k, k).sort(),
		  regex.extract("a1b22", "[0-9]+").orValue(""), [1, 2].all(i, v, v > i), sets.contains([1, 2], [2]),
		  math.greatest(1, 5, 3), cel.bind(x, 2, x * x), base64.encode(b"hi")]`)
	got = docFold(t, d, `{}`)
	if want := []any{int64(0), []any{"a", "b"}, "1", true, true, int64(5), int64(4), "aGk="}; !reflect.DeepEqual(got["k"], want) {
		t.Errorf("library: %#v", got["k"])
	}
}

// docSpec compiles a one-derivation spec from its expression fields.
func docSpec(t testing.TB, fields string) fold.Derivation {
	t.Helper()
	y := "derivations:\n  - name: t\n    sources: [l]\n    store: {file: {path: x.jsonl}}\n"
	lines := strings.Split(strings.Trim(fields, "\n"), "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " \t")); indent < 0 || n < indent {
			indent = n
		}
	}
	for _, l := range lines {
		if len(l) >= indent {
			l = l[indent:]
		}
		y += "    " + strings.ReplaceAll(l, "\t", "  ") + "\n"
	}
	specs, err := Parse("t.yaml", []byte(y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	d, err := Compile(specs[0])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// docFold folds payloads in order and exports every key's state.
func docFold(t testing.TB, d fold.Derivation, payloads ...string) map[string]any {
	t.Helper()
	states := make(map[string]fold.State)
	for i, p := range payloads {
		ev := &fold.Event{Log: "l", Index: uint64(i), ID: fmt.Sprint("e", i), Time: time.Unix(int64(i), 0), Payload: []byte(p)}
		keys, dec, err := d.Prepare(ev)
		if err != nil {
			t.Fatalf("event %d %s: %v", i, p, err)
		}
		for _, k := range keys {
			st, ok := states[k]
			if !ok {
				if st, err = d.Initial(k); err != nil {
					t.Fatalf("event %d %s: %v", i, p, err)
				}
			}
			if st, err = d.Step(st, dec, ev, k); err != nil {
				t.Fatalf("event %d %s: %v", i, p, err)
			}
			states[k] = st
		}
	}
	out := make(map[string]any)
	for k, s := range states {
		v, err := fold.Export(d, k, s)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}
