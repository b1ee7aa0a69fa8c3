package api

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/auditd/auditd/merkle"
)

// encodeJSON is what writeJSON sends for v.
func encodeJSON(t testing.TB, v any) []byte {
	rec := httptest.NewRecorder()
	writeJSON(rec, 200, v)
	return rec.Body.Bytes()
}

// appendOutCases cover each field, omitted and present, and ids that
// need every kind of escape encoding/json knows.
func appendOutCases() []appendOut {
	h := func(b byte) merkle.Hash { var x merkle.Hash; x[0], x[31] = b, ^b; return x }
	ids := []string{"a", "", `q"uo\te`, "<b>&amp;</b>", "tab\tnl\ncr\rbs\bff\f", "\x00\x01\x1f\x7f",
		"é ü 日本", "\u2028\u2029", "bad\xffutf8\xc3", strings.Repeat("x", 300)}
	var out []appendOut
	for i, id := range ids {
		out = append(out, appendOut{Size: uint64(i) + 1, Entries: []appendedOut{{Index: uint64(i), ID: id, LeafHash: h(byte(i)), Duplicate: i%2 == 1}}})
	}
	out = append(out,
		appendOut{Size: 18446744073709551615, Entries: []appendedOut{
			{Index: 7, ID: "p", LeafHash: h(1), InclusionProof: []merkle.Hash{}},
			{Index: 8, ID: "q", LeafHash: h(2), InclusionProof: []merkle.Hash{h(3), h(4)}},
		}, Checkpoint: "auditd.test/l\n2\nroot=\n\n\u2014 auditd.test sig\n"},
		appendOut{Size: 3, Entries: []appendedOut{}},
	)
	return out
}

// The hand-written answer to a POST is the bytes encoding/json gives.
func TestAppendOutJSON(t *testing.T) {
	for _, c := range appendOutCases() {
		want := encodeJSON(t, c)
		if got := appendAppendOut(nil, &c); !bytes.Equal(got, want) {
			t.Errorf("appendAppendOut(%+v)\n got %s\nwant %s", c, got, want)
		}
	}
}

// writeAppended's answer carries a Content-Length, small or large: it is
// never chunked.
func TestWriteAppendedContentLength(t *testing.T) {
	small := appendOutCases()[0]
	large := appendOut{Size: 1000}
	for i := range 100 {
		large.Entries = append(large.Entries, appendedOut{Index: uint64(i), ID: strings.Repeat("i", 40)})
	}
	for _, c := range []appendOut{small, large} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeAppended(w, &c) }))
		resp, err := http.Get(hs.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		hs.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := encodeJSON(t, c); resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" ||
			resp.ContentLength != int64(len(want)) || len(resp.TransferEncoding) > 0 || !bytes.Equal(body, want) {
			t.Errorf("writeAppended of %d bytes: %d %v length %d %v %q", len(want), resp.StatusCode, resp.Header, resp.ContentLength, resp.TransferEncoding, body)
		}
	}
}

func FuzzAppendOutJSON(f *testing.F) {
	for _, c := range appendOutCases() {
		if len(c.Entries) > 0 {
			f.Add(c.Entries[0].ID, c.Checkpoint, c.Size, c.Entries[0].Duplicate, 2)
		}
	}
	f.Fuzz(func(t *testing.T, id, cp string, size uint64, dup bool, proof int) {
		e := appendedOut{Index: size / 2, ID: id, Duplicate: dup}
		copy(e.LeafHash[:], id)
		if proof >= 0 {
			e.InclusionProof = make([]merkle.Hash, proof%4)
		}
		c := appendOut{Size: size, Entries: []appendedOut{e, e}, Checkpoint: cp}
		if got, want := appendAppendOut(nil, &c), encodeJSON(t, c); !bytes.Equal(got, want) {
			t.Fatalf("appendAppendOut\n got %q\nwant %q", got, want)
		}
	})
}

// BenchmarkWriteAppended1000 measures the answer to a 1,000-event POST:
// 36-character ids, no proofs.
func BenchmarkWriteAppended1000(b *testing.B) {
	out := appendOut{Size: 1 << 20, Entries: make([]appendedOut, 1000)}
	for i := range out.Entries {
		out.Entries[i] = appendedOut{Index: uint64(1<<20 - 1000 + i), ID: strings.Repeat("0f8e2c1a-", 4)[:36], LeafHash: merkle.Hash{byte(i)}}
	}
	w := discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		writeAppended(w, &out)
	}
}

type discardWriter struct{ h http.Header }

func (w discardWriter) Header() http.Header         { return w.h }
func (w discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w discardWriter) WriteHeader(int)             {}
