package interop_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

const keyName = "interop.example"

// served is one log of a real ledger store, served by the real API on
// loopback.
type served struct {
	store    *ledger.Store
	log      *ledger.Log
	http     *httptest.Server
	verifier note.Verifier
	vkey     string
	origin   string
	// prefix is the log's tlog-tiles URL prefix, with a trailing slash.
	prefix string
	// note is the checkpoint covering the whole log.
	note []byte
}

// serveLog appends n entries to log "interop" (keys, Kafka-style sources
// and headers of varied length, so leaves differ in size) and serves it.
func serveLog(t testing.TB, n int, opts ...ledgertest.Option) *served {
	t.Helper()
	opts = append([]ledgertest.Option{ledgertest.WithKeyName(keyName),
		ledgertest.WithLedger(ledger.WithCheckpointInterval(10 * time.Millisecond))}, opts...)
	store, key := ledgertest.OpenKey(t, opts...)
	l, err := store.CreateLog("interop")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const batch = 1000
	for from := int(l.Size()); from < n; from += batch {
		es := make([]ledger.Entry, 0, batch)
		for i := from; i < min(from+batch, n); i++ {
			es = append(es, entryAt(i))
		}
		if _, err := l.Append(ctx, es); err != nil {
			t.Fatalf("append at %d: %v", from, err)
		}
	}
	cp, err := l.WaitCheckpoint(ctx, uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(store, key.VKey, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	return &served{store: store, log: l, http: srv, verifier: key.Verifier, vkey: key.VKey, origin: l.Origin(),
		prefix: srv.URL + "/v1/logs/interop/", note: cp.Note}
}

// entryAt is the i-th entry serveLog appends.
func entryAt(i int) ledger.Entry {
	e := ledger.Entry{
		ID:      "ev-" + strconv.Itoa(i),
		Time:    time.Unix(1700000000, int64(i)).UTC(),
		Payload: fmt.Appendf(nil, `{"i":%d}`, i),
		Source:  &merkle.Source{Topic: "orders", Partition: 3, Offset: int64(i)},
	}
	if i%3 != 0 {
		e.HasKey, e.Key = true, fmt.Appendf(nil, "customer-%d", i%97)
	}
	if i%5 == 0 {
		e.Headers = []merkle.Header{{Key: "trace", Value: make([]byte, i%700)}}
	}
	return e
}

// leaves returns the leaf bytes and hashes the ledger holds for [0, n).
func (s *served) leaves(t testing.TB) ([][]byte, []merkle.Hash) {
	t.Helper()
	var lbs [][]byte
	var hs []merkle.Hash
	err := s.log.Entries(context.Background(), 0, s.log.Size(), func(r *ledger.Record) error {
		lbs = append(lbs, append([]byte(nil), r.LeafBytes...))
		hs = append(hs, r.LeafHash)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lbs, hs
}
