package alert_test

import (
	"errors"
	"testing"

	"github.com/auditd/auditd/alert"
)

// TestSetSinksReplacesReceivers: after SetSinks the next change goes to the
// new sink only, the old one having been told what was queued before; the
// alerts and their state are kept; a list with two sinks of one name is
// refused and leaves the running sinks in place; after Close SetSinks
// fails with ErrClosed.
func TestSetSinksReplacesReceivers(t *testing.T) {
	t.Parallel()
	oldSink, newSink := newRecordingSink("a"), newRecordingSink("b")
	e := newEnv(t, alert.Options{Sinks: []alert.Sink{oldSink}})
	first := e.fire(drift("balances", "3 keys differ"))
	if got := oldSink.next(t); got.ID != first.ID {
		t.Fatalf("old sink got %s, want %s", got.ID, first.ID)
	}

	// Refused: two sinks named b; sink a stays the receiver.
	dup := newRecordingSink("b")
	if err := e.m.SetSinks([]alert.Sink{newSink, dup}); err == nil {
		t.Fatal("SetSinks with two sinks named b: no error")
	}
	e.fire(drift("orders", "1 key differs"))
	if got := oldSink.next(t); got.Subject != "orders" {
		t.Fatalf("after a refused SetSinks the running sink got %+v", got)
	}

	if err := e.m.SetSinks([]alert.Sink{newSink}); err != nil {
		t.Fatal(err)
	}
	e.fire(drift("ledger", "2 keys differ"))
	if got := newSink.next(t); got.Subject != "ledger" {
		t.Fatalf("new sink got %+v, want the ledger alert", got)
	}
	newSink.none(t, e.m)
	if n := len(e.m.List(alert.Filter{State: alert.StateFiring})); n != 3 {
		t.Errorf("%d alerts firing after SetSinks, want 3 (kept)", n)
	}
	if v := notifications(t, e.m, "b", "delivered"); v != 1 {
		t.Errorf("notifications{sink=b,delivered} = %v, want 1", v)
	}
	e.close() // waits for the old sink's queue too
	select {
	case a := <-oldSink.ch:
		t.Errorf("the replaced sink was told of %s %q", a.ID, a.Subject)
	default:
	}
	select {
	case a := <-dup.ch:
		t.Errorf("the refused sink was told of %s", a.ID)
	default:
	}
}

// TestSetSinksAfterClose: a closed manager refuses new sinks.
func TestSetSinksAfterClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, alert.Options{})
	m := e.m
	e.close()
	if err := m.SetSinks([]alert.Sink{newRecordingSink("x")}); !errors.Is(err, alert.ErrClosed) {
		t.Errorf("SetSinks after Close: %v, want ErrClosed", err)
	}
}
