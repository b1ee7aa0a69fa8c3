package ingest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/internal/loadtest"
)

// benchBody is an NDJSON body of n events shaped like auditd-bench's: a
// 36-character id and a 256-byte JSON payload.
func benchBody(n int) []byte {
	gen := loadtest.NewEventGen(7, 256, false)
	var buf bytes.Buffer
	for range n {
		pl, _ := gen.Payload()
		fmt.Fprintf(&buf, `{"id":%q,"payload":%s}`+"\n", gen.ID(), pl)
	}
	return buf.Bytes()
}

var benchSizes = []struct {
	name string
	n    int
}{{"events=1000", 1000}, {"events=1", 1}}

// BenchmarkDecode is ingest.Decode on a batch and on a single event.
func BenchmarkDecode(b *testing.B) {
	for _, sz := range benchSizes {
		body := benchBody(sz.n)
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			r := bytes.NewReader(nil)
			for b.Loop() {
				r.Reset(body)
				es, err := ingest.Decode(onlyReader{r}, ingest.Limits{MaxEvents: 10000, MaxPayload: 1 << 20})
				if err != nil || len(es) != sz.n {
					b.Fatal(len(es), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sz.n), "ns/event")
		})
	}
}

// BenchmarkDecodeOnlyReference is what a server that only reads and
// JSON-decodes the same bodies does: encoding/json into an event struct
// whose payload is a json.RawMessage, no validation or compaction. It is
// the reference of issue #13's "decode-only server".
func BenchmarkDecodeOnlyReference(b *testing.B) {
	type event struct {
		ID      string          `json:"id"`
		Key     *string         `json:"key"`
		Time    *string         `json:"time"`
		Payload json.RawMessage `json:"payload"`
	}
	for _, sz := range benchSizes {
		body := benchBody(sz.n)
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			r := bytes.NewReader(nil)
			for b.Loop() {
				r.Reset(body)
				dec := json.NewDecoder(onlyReader{r})
				var es []event
				for {
					var ev event
					if err := dec.Decode(&ev); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
					es = append(es, ev)
				}
				if len(es) != sz.n {
					b.Fatal(len(es))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sz.n), "ns/event")
		})
	}
}

// onlyReader hides every method but Read, as an HTTP request body does.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }
