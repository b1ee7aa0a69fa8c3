package ledger_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
)

// TestForkedIsDurable: a log put read-only by Forked stays read-only, with
// its evidence, across a restart (a restart must not let it sign past the
// evidence), and takes appends again once the operator removes the mark.
func TestForkedIsDurable(t *testing.T) {
	dir := t.TempDir()
	key := ledgertest.NewKey(t, "fork.example")
	s := ledgertest.Open(t, ledgertest.WithDir(dir), ledgertest.WithKey(key))
	l, err := s.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	forkAppend(t, l, 300)
	l.Forked("witness w1.example", "holds size 900")
	if _, err := l.Append(context.Background(), []ledger.Entry{{Payload: []byte("x")}}); !errors.Is(err, ledger.ErrReadOnly) {
		t.Fatalf("append after Forked: %v, want ErrReadOnly", err)
	}
	s.Close()

	s = ledgertest.Open(t, ledgertest.WithDir(dir), ledgertest.WithKey(key))
	l, err = s.Log("payments")
	if err != nil {
		t.Fatal(err)
	}
	ro := l.ReadOnly()
	if ro == nil || !strings.Contains(ro.Error(), "holds size 900") || !strings.Contains(ro.Error(), "w1.example") {
		t.Fatalf("after a restart: read-only %v, want the witness's evidence", ro)
	}
	if _, err := l.Append(context.Background(), []ledger.Entry{{Payload: []byte("x")}}); !errors.Is(err, ledger.ErrReadOnly) {
		t.Fatalf("append after a restart: %v, want ErrReadOnly", err)
	}
	s.Close()

	if err := os.Remove(filepath.Join(dir, "forked", "payments")); err != nil {
		t.Fatal(err)
	}
	s = ledgertest.Open(t, ledgertest.WithDir(dir), ledgertest.WithKey(key))
	l, err = s.Log("payments")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReadOnly(); err != nil {
		t.Fatalf("mark removed, still read-only: %v", err)
	}
	forkAppend(t, l, 1)
}

func forkAppend(t *testing.T, l *ledger.Log, n int) {
	t.Helper()
	es := make([]ledger.Entry, n)
	for i := range es {
		es[i] = ledger.Entry{Payload: []byte{byte(i), byte(i >> 8), byte(l.Size())}}
	}
	if _, err := l.Append(context.Background(), es); err != nil {
		t.Fatal(err)
	}
}
