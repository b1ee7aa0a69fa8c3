package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/ledger"
)

// TestIntegrityAlerts damages a real ledger (an entry key deleted with
// Pebble while the store is closed) and requires the failures its reads
// find, and those found before the alert manager exists, to become one
// integrity alert per log and kind through the manager serve wires.
func TestIntegrityAlerts(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	skey, vkey, _ := note.GenerateKey(rand.Reader, "integrity.example")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	dir := t.TempDir()
	s, err := ledger.Open(dir, signer, verifier, ledger.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.CreateLog("pay")
	if err != nil {
		t.Fatal(err)
	}
	var es []ledger.Entry
	for i := 0; i < 300; i++ {
		es = append(es, ledger.Entry{ID: fmt.Sprint("ev-", i), Payload: []byte{byte(i)}})
	}
	if _, err := l.Append(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 'e' log(u32, the first log is 1) index(u64): see ledger/keys.go.
	for _, i := range []uint64{7, 100} {
		if err := db.Delete(binary.BigEndian.AppendUint64([]byte{'e', 0, 0, 0, 1}, i), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	ia := newIntegrityAlerts(quiet)
	// Open rebuilds the memory index from these entries and reports both
	// before any alert manager exists.
	s, err = ledger.Open(dir, signer, verifier, ledger.WithLogger(quiet), ledger.WithIntegrityHandler(ia.handle))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	alerts, err := openAlerts(s, Config{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer alerts.Close()
	stop := ia.start(alerts)
	defer stop()
	const id = "integrity/pay/entry_missing"
	a := waitAlert(t, alerts, id, func(a alert.Alert) bool { return true })
	if a.Kind != alert.KindIntegrity || a.Subject != "pay" || a.Labels["violation"] != "entry_missing" || a.State != alert.StateFiring {
		t.Fatalf("alert %+v", a)
	}
	// Reads from many goroutines: still one alert, updated to the entry
	// read last.
	l, _ = s.Log("pay")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 50; k++ {
				if _, err := l.Entry(7); err == nil {
					t.Error("Entry(7) read a deleted entry")
				}
			}
		}()
	}
	wg.Wait()
	waitAlert(t, alerts, id, func(a alert.Alert) bool { return strings.Contains(a.Summary, "entry 7:") })
	if _, err := l.Entry(100); err == nil {
		t.Fatal("Entry(100) read a deleted entry")
	}
	stop() // fires what is pending
	if a, _ := alerts.Get(id); !strings.Contains(a.Summary, "entry 100:") {
		t.Errorf("after stop the alert says %q, want entry 100", a.Summary)
	}
	if n := len(alerts.List(alert.Filter{Kind: alert.KindIntegrity})); n != 1 {
		t.Errorf("%d integrity alerts, want 1", n)
	}
}

func waitAlert(t *testing.T, m *alert.Manager, id string, ok func(alert.Alert) bool) alert.Alert {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if a, found := m.Get(id); found && ok(a) {
			return a
		}
		if time.Now().After(deadline) {
			a, _ := m.Get(id)
			t.Fatalf("alert %s: %+v", id, a)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
