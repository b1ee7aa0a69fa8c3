package celfold

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"go.yaml.in/yaml/v3"

	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
)

// celSpec compiles a one-derivation spec from its expression fields.
func celSpec(t testing.TB, fields string) fold.Derivation {
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
	return compileYAML(t, y)
}

// compileYAML compiles the first derivation of a spec file's text (its
// CEL fields only: the rest of the spec is not this package's).
func compileYAML(t testing.TB, y string) fold.Derivation {
	t.Helper()
	var file struct {
		Derivations []struct {
			Name, Decode, Filter, Key, Initial, Step string
			Sources                                  []string
		}
	}
	if err := yaml.Unmarshal([]byte(y), &file); err != nil || len(file.Derivations) == 0 {
		t.Fatalf("%v\n%s", err, y)
	}
	s := file.Derivations[0]
	d, errs := compile(Expressions{Name: s.Name, Sources: s.Sources, Raw: s.Decode == "raw",
		Filter: s.Filter, Key: s.Key, Initial: s.Initial, Step: s.Step})
	if len(errs) > 0 || d == nil {
		t.Fatalf("%v\n%s", errs, y)
	}
	return d
}

// celFold folds payloads in order and exports every key's state.
func celFold(t testing.TB, d fold.Derivation, payloads ...string) map[string]any {
	t.Helper()
	states := make(map[string]fold.State)
	for i, p := range payloads {
		ev := &fold.Event{Log: "l", Index: uint64(i), ID: fmt.Sprint("e", i), Time: time.Unix(int64(i), 0), Payload: []byte(p)}
		if err := benchApply(d, states, ev); err != nil {
			t.Fatalf("event %d %s: %v", i, p, err)
		}
	}
	out := make(map[string]any)
	for k, s := range states {
		v, err := d.Export(s)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

func TestCELTransfers(t *testing.T) {
	d := celSpec(t, `
		filter: event.type == "transfer"
		key: '[event.from, event.to]'
		initial: "0"
		step: 'key == event.from ? state - event.amount : state + event.amount'`)
	got := celFold(t, d,
		`{"type":"transfer","from":"a","to":"b","amount":10}`,
		`{"type":"transfer","from":"b","to":"c","amount":3}`,
		`{"type":"refund","from":"c","to":"a","amount":99}`,
		`{"type":"transfer","from":"c","to":"c","amount":5}`, // one key: stepped once
	)
	want := map[string]any{"a": int64(-10), "b": int64(7), "c": int64(-2)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestCELPrepare(t *testing.T) {
	d := celSpec(t, `
		filter: event.kind != "skip"
		key: 'has(event.keys) ? event.keys : event.k'
		initial: "0"
		step: state + 1`)
	tests := []struct {
		payload string
		keys    []string
		err     string
	}{
		{`{"kind":"skip","k":"a"}`, nil, ""},
		{`{"kind":"x","k":"a"}`, []string{"a"}, ""},
		{`{"kind":"x","keys":["b","a","b","c","a"]}`, []string{"b", "a", "c"}, ""},
		{`{"kind":"x","keys":["k1","k2","k3","k4","k5","k6","k7","k8","k9","k1","k9","k10"]}`, []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10"}, ""},
		{`{"kind":"x","keys":[]}`, nil, ""},
		{`{"kind":"x","k":7}`, nil, "key: got int, want string or list(string)"},
		{`{"kind":"x","keys":["a",1]}`, nil, "key: element 1 is int, want string"},
		{`{"kind":"x"}`, nil, "key: no such key: k"},
		{`{"k":"a"}`, nil, "filter: no such key: kind"},
		{`{"kind":"x","k":"a"`, nil, "decode: json: offset 19: unexpected end of input in object"},
		{`not json`, nil, "decode: json: offset 0: invalid literal, want null"},
		{`[x]`, nil, "decode: json: offset 1: invalid character 'x' looking for a value"},
	}
	for _, tt := range tests {
		keys, dec, err := d.Prepare(&fold.Event{Payload: []byte(tt.payload)})
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%s: error %v, want %s", tt.payload, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.payload, err)
			continue
		}
		if !reflect.DeepEqual(keys, tt.keys) {
			t.Errorf("%s: keys %q, want %q", tt.payload, keys, tt.keys)
		}
		if (dec == nil) != (len(keys) == 0) {
			t.Errorf("%s: decoded %v with keys %q", tt.payload, dec, keys)
		}
	}
}

func TestCELRuntimeErrors(t *testing.T) {
	d := celSpec(t, `
		key: event.k
		initial: "0"
		step: 'state + event.amount / event.div'`)
	st, _ := d.Initial("a")
	for _, tt := range []struct{ payload, err string }{
		{`{"k":"a","amount":1}`, "step: no such key: div"},
		{`{"k":"a","amount":1,"div":0}`, "step: division by zero"},
		{`{"k":"a","amount":"x","div":1}`, "step: no such overload"},
		{`{"k":"a","amount":9223372036854775807,"div":1}`, "step: integer overflow"},
	} {
		ev := &fold.Event{Payload: []byte(tt.payload)}
		_, dec, err := d.Prepare(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Step(types.Int(1), dec, ev, "a"); err == nil || !strings.HasPrefix(err.Error(), tt.err) {
			t.Errorf("%s: error %v, want %s", tt.payload, err, tt.err)
		}
	}
	if _, err := d.Step("not a CEL value", nil, &fold.Event{}, "a"); err == nil {
		t.Error("Step with a foreign state: no error")
	}
	if _, err := d.Step(st, 42, &fold.Event{}, "a"); err == nil {
		t.Error("Step with a foreign decoded event: no error")
	}
}

func TestCELRaw(t *testing.T) {
	d := celSpec(t, `
		decode: raw
		filter: size(event) > 0
		key: 'string(event).split(",")[0]'
		initial: "b''"
		step: state + event`)
	got := celFold(t, d, "a,1", "b,2", "", "a,3")
	want := map[string]any{"a": []byte("a,1a,3"), "b": []byte("b,2")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Raw payloads are copied: the engine may reuse its buffer.
	p := []byte("x,1")
	ev := &fold.Event{Payload: p}
	_, dec, err := d.Prepare(ev)
	if err != nil {
		t.Fatal(err)
	}
	copy(p, "zzz")
	st, _ := d.Step(types.Bytes(nil), dec, ev, "x")
	if v, _ := d.Export(st); string(v.([]byte)) != "x,1" {
		t.Fatalf("state aliases the payload: %q", v)
	}
}

func TestCELNumbers(t *testing.T) {
	d := celSpec(t, `
		key: event.k
		initial: "[]"
		step: 'state + [[type(event.n) == int ? "int" : type(event.n) == double ? "double" : "other", event.n]]'`)
	got := celFold(t, d,
		`{"k":"a","n":1}`,
		`{"k":"a","n":-0}`,
		`{"k":"a","n":1.0}`,
		`{"k":"a","n":1.5}`,
		`{"k":"a","n":1e2}`,
		`{"k":"a","n":-9223372036854775808}`,
		`{"k":"a","n":9223372036854775808}`,
		`{"k":"a","n":123456789012345678}`,
	)
	want := []any{
		[]any{"int", int64(1)},
		[]any{"int", int64(0)},
		[]any{"double", 1.0},
		[]any{"double", 1.5},
		[]any{"double", 100.0},
		[]any{"int", int64(math.MinInt64)},
		[]any{"double", 9223372036854775808.0},
		[]any{"int", int64(123456789012345678)},
	}
	if !reflect.DeepEqual(got["a"], want) {
		t.Fatalf("got %v\nwant %v", got["a"], want)
	}
	// Mixed int and double arithmetic needs a conversion.
	d = celSpec(t, `
		key: event.k
		initial: "0.0"
		step: state + double(event.n)`)
	if got := celFold(t, d, `{"k":"a","n":1}`, `{"k":"a","n":0.5}`); got["a"] != 1.5 {
		t.Fatalf("got %v", got)
	}
}

func TestCELMeta(t *testing.T) {
	d := celSpec(t, `
		filter: meta.log.startsWith("pay")
		key: 'meta.has_key ? meta.key : meta.id'
		initial: "[]"
		step: 'state + [[meta.log, meta.index, meta.time, has(meta.topic) ? meta.topic + "/" + string(meta.partition) + "/" + string(meta.offset) : ""]]'`)
	ts := time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600))
	evs := []*fold.Event{
		{Log: "payments.0", Index: 7, ID: "e7", HasKey: true, Key: []byte("acct"), Time: ts, Payload: []byte(`{}`),
			Source: &merkle.Source{Topic: "payments", Partition: 0, Offset: 70}},
		{Log: "payments-http", Index: 8, ID: "e8", Time: ts, Payload: []byte(`{}`)},
		{Log: "other", Index: 9, ID: "e9", Time: ts, Payload: []byte(`{}`)},
	}
	states := make(map[string]fold.State)
	for _, ev := range evs {
		if err := benchApply(d, states, ev); err != nil {
			t.Fatal(err)
		}
	}
	if len(states) != 2 {
		t.Fatalf("states %v", states)
	}
	a, _ := d.Export(states["acct"])
	e8, _ := d.Export(states["e8"])
	utc := ts.UTC()
	if want := []any{[]any{"payments.0", int64(7), utc, "payments/0/70"}}; !reflect.DeepEqual(a, want) {
		t.Errorf("acct: %v, want %v", a, want)
	}
	if want := []any{[]any{"payments-http", int64(8), utc, ""}}; !reflect.DeepEqual(e8, want) {
		t.Errorf("e8: %v, want %v", e8, want)
	}
}

func TestCELInitialUsesKey(t *testing.T) {
	d := celSpec(t, `
		key: event.k
		initial: '{"key": key, "n": 0}'
		step: '{"key": state.key, "n": state.n + 1}'`)
	got := celFold(t, d, `{"k":"a"}`, `{"k":"b"}`, `{"k":"a"}`)
	want := map[string]any{"a": map[string]any{"key": "a", "n": int64(2)}, "b": map[string]any{"key": "b", "n": int64(1)}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestCELDeterministic checks that nothing reads a clock or randomness:
// such functions do not exist, and iterating a decoded object is ordered.
func TestCELDeterministic(t *testing.T) {
	for _, expr := range []string{"now()", "timestamp.now()", "rand()", "random()", "uuid()", "time.now()"} {
		_, errs := Compile(Expressions{Name: "x", Sources: []string{"l"}, Key: "event.k", Initial: "0", Step: expr})
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), "undeclared reference") {
			t.Errorf("%s compiled: %v", expr, errs)
		}
	}
	d := celSpec(t, `
		key: '"k"'
		initial: "[]"
		step: 'state + [event.map(k, k), event.transformList(k, v, k + "=" + string(v))]'`)
	var first any
	for range 20 {
		got := celFold(t, d, `{"z":1,"b":2,"a":3,"m":4,"c":5,"y":6,"d":7,"x":8,"e":9,"w":10}`)
		if first == nil {
			first = got
			want := []any{
				[]any{"a", "b", "c", "d", "e", "m", "w", "x", "y", "z"},
				[]any{"a=3", "b=2", "c=5", "d=7", "e=9", "m=4", "w=10", "x=8", "y=6", "z=1"},
			}
			if !reflect.DeepEqual(got["k"], want) {
				t.Fatalf("got %v, want %v", got["k"], want)
			}
		} else if !reflect.DeepEqual(got, first) {
			t.Fatalf("run differs: %v vs %v", got, first)
		}
	}
	// Timestamps read without a time zone argument are read in UTC.
	d = celSpec(t, `
		key: '"k"'
		initial: "0"
		step: timestamp(event.t).getHours()`)
	if got := celFold(t, d, `{"t":"2025-01-01T23:30:00-05:00"}`); got["k"] != int64(4) {
		t.Fatalf("getHours = %v", got["k"])
	}
}

func TestCELObjectSemantics(t *testing.T) {
	d := celSpec(t, `
		key: '"k"'
		initial: "[]"
		step: >-
		  state + [
		    event.o == {"b": 2, "a": 1},
		    {"a": 1, "b": 2} == event.o,
		    event.o == {"a": 1},
		    "a" in event.o,
		    "q" in event.o,
		    size(event.o),
		    has(event.o.a),
		    has(event.o.q),
		    event.o[?"q"].orValue(-1),
		    event.o[?"a"].orValue(-1),
		    event.dup,
		    event.esc,
		    event.list.size(),
		    event.list[1].x,
		    event.o.all(k, k in ["a", "b"]),
		    event.empty == {},
		    string(event.o.a) + event.s.upperAscii(),
		    event.list.exists(e, type(e) == map && e.x == true),
		  ]`)
	got := celFold(t, d, `{"o":{"a":1,"b":2},"dup":1,"dup":2,"esc":"\u00e9\ud83d\ude00\n\"","list":[1,{"x":true}],"empty":{},"s":"x"}`)
	want := []any{true, true, false, true, false, int64(2), true, false, int64(-1), int64(1), int64(2), "é😀\n\"", int64(2), true, true, true, "1X", true}
	if !reflect.DeepEqual(got["k"], want) {
		t.Fatalf("got  %v\nwant %v", got["k"], want)
	}
}

func TestCELEncodeRoundTrip(t *testing.T) {
	d := celSpec(t, `
		key: '"k"'
		initial: "0"
		step: state`).(*celDerivation)
	env, err := celEnvsJSON()
	if err != nil {
		t.Fatal(err)
	}
	exprs := []string{
		`null`, `true`, `false`, `0`, `-1`, `9223372036854775807`, `-9223372036854775808`,
		`0u`, `18446744073709551615u`, `0.0`, `-0.0`, `1.5`, `1.0`, `double("NaN")`, `double("-Inf")`,
		`""`, `"héllo"`, `b""`, `b"\x00\xff"`,
		`[]`, `[1, 1.0, 1u, "1", b"1", null, [true]]`,
		`{}`, `{"a": 1, "b": 2.0, "c": 3u, "d": b"x", "e": null, "f": [1, "x", [true]], "g": {"h": {}}}`,
		`{1: "one", 2: "two"}`, `{1u: "one"}`, `{true: 1, false: 0}`,
		`timestamp("2020-01-01T00:00:00Z")`, `timestamp("2020-01-01T00:00:00.123456789+02:00")`,
		`duration("1.5s")`, `duration("-3h")`,
		`decimal("1000.00")`, `decimal("-0.5")`, `decimal("1e3")`, `[decimal("0.10"), {"d": decimal("12")}]`,
		`optional.none()`, `optional.of(1)`, `optional.of({"a": optional.of(2.0)})`,
	}
	for _, expr := range exprs {
		ast, iss := env.step.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", expr, iss.Err())
		}
		prg, err := env.step.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := prg.Eval(map[string]any{})
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		enc, err := d.Encode(v)
		if err != nil {
			t.Fatalf("%s: encode: %v", expr, err)
		}
		back, err := d.Decode(enc)
		if err != nil {
			t.Fatalf("%s: decode: %v", expr, err)
		}
		bv := back.(ref.Val)
		if !sameCELValue(v, bv) {
			t.Errorf("%s: decoded %v (%T), want %v (%T)", expr, bv, bv, v, v)
		}
		enc2, err := d.Encode(bv)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Errorf("%s: re-encoding differs: %x vs %x (%v)", expr, enc, enc2, err)
		}
		e1, err1 := d.Export(v)
		e2, err2 := d.Export(bv)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(fmt.Sprintf("%#v", e1), fmt.Sprintf("%#v", e2)) {
			t.Errorf("%s: export %#v (%v) vs %#v (%v)", expr, e1, err1, e2, err2)
		}
	}
	// A state decoded from JSON round-trips as well.
	v, err := decodeEventJSON([]byte(`{"b":[1,2.5,{"c":null}],"a":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := d.Encode(v)
	back, err := d.Decode(enc)
	if err != nil || !sameCELValue(v, back.(ref.Val)) {
		t.Fatalf("json state: %v %v", back, err)
	}
	// Encoding is independent of map insertion order.
	a, _ := decodeEventJSON([]byte(`{"x":1,"y":2,"z":3}`))
	b, _ := decodeEventJSON([]byte(`{"z":3,"y":2,"x":1}`))
	ea, _ := d.Encode(a)
	eb, _ := d.Encode(b)
	if !bytes.Equal(ea, eb) {
		t.Fatal("map encoding depends on order")
	}
	// Bad input.
	for _, b := range [][]byte{nil, {0}, {2, 'z'}, {1}, {1, 'q'}, {1, 'z', 'z'}, {1, 's', 5, 'a'}, {1, 'l', 200}, {1, 'm', 1, 'd', 0, 0, 0, 0, 0, 0, 0, 0, 'z'}, {1, 'm', 2, 's', 1, 'a', 'z', 's', 1, 'a', 'z'}} {
		if _, err := d.Decode(b); err == nil {
			t.Errorf("Decode(%x): no error", b)
		}
	}
	if _, err := d.Encode(types.IntType); err == nil {
		t.Error("Encode(type): no error")
	}
}

// sameCELValue compares values exactly: types as well as values, NaN
// equal to itself, maps by their entries.
func sameCELValue(a, b ref.Val) bool {
	switch a := a.(type) {
	case types.Double:
		bd, ok := b.(types.Double)
		return ok && math.Float64bits(float64(a)) == math.Float64bits(float64(bd))
	case types.Timestamp:
		bt, ok := b.(types.Timestamp)
		return ok && a.Time.Equal(bt.Time) && a.Time.Format(time.RFC3339Nano) == bt.Time.Format(time.RFC3339Nano)
	case *celDecimal:
		bd, ok := b.(*celDecimal)
		return ok && a.d.String() == bd.d.String()
	case *types.Optional:
		bo, ok := b.(*types.Optional)
		if !ok || a.HasValue() != bo.HasValue() {
			return false
		}
		return !a.HasValue() || sameCELValue(a.GetValue(), bo.GetValue())
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Type() {
	case types.ListType, types.MapType:
		ea, _ := exportCELValue(a, 0)
		eb, _ := exportCELValue(b, 0)
		return fmt.Sprintf("%#v", ea) == fmt.Sprintf("%#v", eb) && a.Equal(b) == types.True
	}
	return a.Equal(b) == types.True
}

func TestCELExport(t *testing.T) {
	d := celSpec(t, `
		key: '"k"'
		initial: "0"
		step: state`)
	v, _ := decodeEventJSON([]byte(`{"a":[1,2.5,"s",null,true,{"b":{}}]}`))
	got, err := d.Export(v)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": []any{int64(1), 2.5, "s", nil, true, map[string]any{"b": map[string]any{}}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v", got)
	}
	m := types.NewRefValMap(types.DefaultTypeAdapter, map[ref.Val]ref.Val{types.Int(1): types.String("a"), types.String("1"): types.String("b")})
	if _, err := d.Export(m); err == nil || !strings.Contains(err.Error(), `both read "1"`) {
		t.Fatalf("colliding keys: %v", err)
	}
}

func TestCELConcurrent(t *testing.T) {
	d := celSpec(t, `
		filter: 'meta.index % 2 == 0'
		key: '[event.from, event.to]'
		initial: "0"
		step: 'key == event.from ? state - event.amount : state + event.amount'`)
	evs := benchPayments(512)
	var wg sync.WaitGroup
	results := make([]map[string]fold.State, 4)
	for g := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states := make(map[string]fold.State)
			for _, ev := range evs {
				if err := benchApply(d, states, ev); err != nil {
					t.Error(err)
					return
				}
			}
			results[g] = states
		}()
	}
	wg.Wait()
	for g := 1; g < len(results); g++ {
		if len(results[g]) != len(results[0]) {
			t.Fatalf("goroutine %d: %d keys, want %d", g, len(results[g]), len(results[0]))
		}
		for k, v := range results[0] {
			if results[g][k].(ref.Val).Equal(v.(ref.Val)) != types.True {
				t.Fatalf("goroutine %d key %s: %v vs %v", g, k, results[g][k], v)
			}
		}
	}
}

func TestCELDecodeJSON(t *testing.T) {
	valid := []string{
		`null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `0.5`, `-0.5e-3`, `1E+2`, `1e400`[:4], `""`, `"a\"b\\c\/d\b\f\n\r\t"`,
		`"\u0041\u00e9\u4e2d\ud83d\ude00"`, `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, "\"\xff\xfe\"", "\"é\"",
		`[]`, `[1,[2,[3]]]`, `{}`, ` { "a" : [ 1 , { } ] } `, `{"a":1,"a":2}`, `9223372036854775807`, `-9223372036854775809`,
		`12345678901234567890123`, `1.7976931348623157e308`, `5e-324`, `1e-400`,
	}
	for _, s := range valid {
		v, err := decodeEventJSON([]byte(s))
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		checkJSONAgainstStdlib(t, []byte(s), v)
	}
	invalid := []string{``, ` `, `nul`, `tru`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `"abc`, `"\x"`, `"\u12"`, "\"a\x01\"",
		`[1,]`, `[1 2]`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1,}`, `{"a":1`, `[`, `1 2`, `{} x`, `1e400`, `-1e400`, `NaN`,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001)}
	for _, s := range invalid {
		if v, err := decodeEventJSON([]byte(s)); err == nil {
			t.Errorf("%q: decoded %v, want an error", s, v)
		}
		if json.Valid([]byte(s)) && s != `1e400` && s != `-1e400` && !strings.HasPrefix(s, "[[[") {
			t.Errorf("%q: encoding/json says it is valid", s)
		}
	}
	// Deep but allowed nesting.
	deep := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	if _, err := decodeEventJSON([]byte(deep)); err != nil {
		t.Fatal(err)
	}
}

// checkJSONAgainstStdlib compares a decoded value with encoding/json's
// reading of the same text: the same structure, strings, and numbers (ints
// where the text is an integer within int64).
func checkJSONAgainstStdlib(t testing.TB, data []byte, v ref.Val) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var want any
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("%q: encoding/json: %v", data, err)
	}
	got, err := exportCELValue(v, 0)
	if err != nil {
		t.Fatal(err)
	}
	var norm func(any) any
	norm = func(x any) any {
		switch x := x.(type) {
		case json.Number:
			s := x.String()
			if !strings.ContainsAny(s, ".eE") {
				if i, err := x.Int64(); err == nil {
					return i
				}
			}
			f, _ := strconv.ParseFloat(s, 64)
			return f
		case []any:
			for i := range x {
				x[i] = norm(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = norm(x[k])
			}
		}
		return x
	}
	if want = norm(want); !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: got %#v, encoding/json %#v", data, got, want)
	}
}

// TestCELSharedEvent steps one prepared event for many keys at once, as the
// engine's shards do: values decoded on first read are shared safely.
func TestCELSharedEvent(t *testing.T) {
	d := celSpec(t, `
		key: 'event.items.map(i, i.sku)'
		initial: "0"
		step: 'state + event.items.filter(i, i.sku == key)[0].qty + size(event.note) + size(event.meta.tags)'`)
	ev := &fold.Event{Payload: []byte(`{"items":[{"sku":"a","qty":1},{"sku":"b","qty":2},{"sku":"c","qty":3},{"sku":"d","qty":4}],"note":"caf\u00e9","meta":{"tags":["x","y"]}}`)}
	keys, dec, err := d.Prepare(ev)
	if err != nil || len(keys) != 4 {
		t.Fatalf("keys %v, err %v", keys, err)
	}
	var wg sync.WaitGroup
	got := make([]any, len(keys))
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := d.Step(types.Int(0), dec, ev, k)
			if err != nil {
				t.Error(err)
				return
			}
			got[i], _ = d.Export(st)
		}()
	}
	wg.Wait()
	if want := []any{int64(7), int64(8), int64(9), int64(10)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
