package celfold

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"cel.dev/cel-go/common/types"
)

// TestTimestampRule checks the one rule for timestamps: a timestamp is an
// instant; string() renders it in UTC, RFC 3339; the accessors without a
// time zone read it in UTC, with one in that zone.
func TestTimestampRule(t *testing.T) {
	const ts = `timestamp("2026-01-01T23:30:00+14:00")` // 09:30 UTC, the same day
	for _, c := range []struct{ expr, want string }{
		{`string(` + ts + `)`, "2026-01-01T09:30:00Z"},
		{`"%s".format([` + ts + `])`, "2026-01-01T09:30:00Z"},
		{ts + `.getDate()`, "1"},
		{ts + `.getHours()`, "9"},
		{ts + `.getHours("+14:00")`, "23"},
		{ts + `.getDate("-10:00")`, "31"},
		{ts + `.getFullYear("-10:00")`, "2025"},
		{`string(timestamp("2026-01-02T05:00:00+14:00"))`, "2026-01-01T15:00:00Z"},
		{`timestamp("2026-01-02T05:00:00+14:00").getDate()`, "1"},
		{`string(timestamp("2026-01-01T23:30:00.250+01:00"))`, "2026-01-01T22:30:00.25Z"},
		{`string(timestamp("2026-01-01T23:30:00+14:00") + duration("1h"))`, "2026-01-01T10:30:00Z"},
		{ts + ` == timestamp("2026-01-01T09:30:00Z")`, "true"},
		{`string(timestamp(0))`, "1970-01-01T00:00:00Z"},
	} {
		out, err := evalCEL(t, c.expr, nil)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if got := fmt.Sprint(out.Value()); got != c.want {
			t.Errorf("%s = %s, want %s", c.expr, got, c.want)
		}
	}
}

// TestTimestampExport checks what a state timestamp becomes for
// comparison: RFC 3339 in UTC, the fraction trimmed.
func TestTimestampExport(t *testing.T) {
	d := celSpec(t, `
		key: '"k"'
		initial: 'timestamp("2026-01-01T23:30:00+14:00")'
		step: '{"at": timestamp(event.at), "first": state}'`)
	got := celFold(t, d, `{"at":"2026-03-01T12:00:00.120000-05:00"}`)["k"].(map[string]any)
	for f, want := range map[string]string{"at": "2026-03-01T17:00:00.12Z", "first": "2026-01-01T09:30:00Z"} {
		ts, ok := got[f].(time.Time)
		if !ok || ts.Location() != time.UTC || ts.Format(time.RFC3339Nano) != want {
			t.Errorf("export of %s: %#v, want %s as a time.Time in UTC", f, got[f], want)
		}
	}
	// In JSON (reports), RFC 3339 in UTC.
	if b, _ := json.Marshal(got); string(b) != `{"at":"2026-03-01T17:00:00.12Z","first":"2026-01-01T09:30:00Z"}` {
		t.Errorf("export in JSON: %s", b)
	}
	// A state saved by an older version with a zone offset reads as the
	// same instant, in UTC.
	in := time.Date(2026, 1, 1, 23, 30, 0, 0, time.FixedZone("", 14*3600))
	b := binary.AppendVarint([]byte{celStateV1, 't'}, in.Unix())
	b = binary.AppendUvarint(b, 0)
	b = binary.AppendVarint(b, 14*3600)
	st, err := d.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if ts := st.(types.Timestamp); !ts.Time.Equal(in) || ts.Time.Location() != time.UTC {
		t.Fatalf("decoded %v, want %v in UTC", ts.Time, in)
	}
	if v, _ := d.Export(st); v != time.Date(2026, 1, 1, 9, 30, 0, 0, time.UTC) {
		t.Fatalf("exported %#v", v)
	}
}
