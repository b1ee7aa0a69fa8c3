package spec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/fold"
)

// issueStep is the step of issue 28: 20 million list elements, 2.3 GB and
// a minute per event without a cost limit.
const issueStep = `size(lists.range(20000).map(x, lists.range(1000).map(y,y))) + state`

func costSpec(step, extra string) string {
	return fmt.Sprintf(`derivations:
  - name: costly
    sources: [l]
    key: event.k
    initial: "0"
    step: '%s'
    store: {file: {path: x.jsonl}}
%s`, step, extra)
}

// TestSpecCostLimit: an event whose step costs more than the limit fails,
// a derivation error naming the limit and the setting, and the fold goes on.
func TestSpecCostLimit(t *testing.T) {
	_, d := compileOne(t, costSpec(issueStep, ""))
	log := newMemLog("l", []string{`{"k":"a"}`, `{"k":"b"}`, `{"k":"c"}`})
	// Without the limit the fold runs for minutes: the deadline makes the
	// test fail instead, once the evaluation notices it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := fold.Fold(ctx, d, nil, []fold.Span{log.span()}, fold.Options{Workers: 1, ErrorBudget: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.ErrorCount != 3 || len(r.Errors) != 3 || len(r.States) != 0 {
		t.Fatalf("%d errors %v, %d states; want the 3 events failed", r.ErrorCount, r.Errors, len(r.States))
	}
	for _, e := range r.Errors {
		if want := "step: evaluation stopped at the cost limit of 1000000 (the derivation's cost_limit"; !strings.Contains(e.Err, want) {
			t.Errorf("error %q, want it to contain %q", e.Err, want)
		}
	}

	// A realistic step, and the same step under a limit it fits in.
	for _, y := range []string{
		costSpec(`state + size(event.k)`, "    cost_limit: 10\n"),
		costSpec(`event.k in ["a", "b"] ? state + 1 : state`, "    cost_limit: 100\n"),
		costSpec(`size(lists.range(200).map(x, x * 2)) + state`, "    cost_limit: 5000\n"),
	} {
		_, d := compileOne(t, y)
		r, err := fold.Fold(ctx, d, nil, []fold.Span{log.span()}, fold.Options{Workers: 1})
		if err != nil || r.ErrorCount != 0 || len(r.States) != 3 {
			t.Fatalf("%v %+v\n%s", err, r, y)
		}
	}
}

func TestSpecCostLimitInvalid(t *testing.T) {
	_, err := Parse("t.yaml", []byte(costSpec("state + 1", "    cost_limit: 0\n")))
	if err == nil || !strings.Contains(err.Error(), "cost_limit must be at least 1, got 0") {
		t.Fatalf("error %v", err)
	}
}

// stepStarted signals when the first Step begins.
type stepStarted struct {
	fold.Derivation
	once    sync.Once
	started chan struct{}
}

func (s *stepStarted) Step(st fold.State, dec any, ev *fold.Event, key string) (fold.State, error) {
	s.once.Do(func() { close(s.started) })
	return s.Derivation.Step(st, dec, ev, key)
}

// TestSpecCostCancel: cancelling a fold stops an evaluation in progress,
// one no cost limit stops (400 million iterations, minutes).
func TestSpecCostCancel(t *testing.T) {
	_, d := compileOne(t, costSpec(`lists.range(20000).all(x, lists.range(20000).all(y, x + y >= 0)) ? state + 1 : state`,
		"    cost_limit: 1000000000000000000\n"))
	s := &stepStarted{Derivation: d, started: make(chan struct{})}
	log := newMemLog("l", []string{`{"k":"a"}`})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := fold.Fold(ctx, s, nil, []fold.Span{log.span()}, fold.Options{Workers: 1})
		done <- err
	}()
	<-s.started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Fold returned %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Fold still running 20s after its context was cancelled")
	}
}
