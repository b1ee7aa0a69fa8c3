package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/auditd/auditd/ingest"
)

// kafkaTestConfig is testConfig consuming a topic of an in-process broker.
func kafkaTestConfig(t *testing.T) Config {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "payments"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cfg := testConfig(t)
	cfg.Kafka = &ingest.KafkaConfig{Brokers: cluster.ListenAddrs(), Topics: []string{"payments"}, Group: "serve-test"}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startServeLogs starts serve with a logger into logs and returns when it is
// ready; done receives what serve returned.
func startServeLogs(t *testing.T, ctx context.Context, cfg Config, logs *syncBuffer) (done <-chan error) {
	t.Helper()
	ready := make(chan string, 1)
	ch := make(chan error, 1)
	go func() { ch <- serve(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), ready) }()
	select {
	case <-ready:
	case err := <-ch:
		t.Fatalf("serve: %v", err)
	}
	return ch
}

// Issue 10: a component serve depends on stopping on its own ends serve,
// with an error naming it (exit 1) and a log line saying so, after an
// orderly shutdown. Before, a Kafka source that stopped was logged and the
// daemon kept serving HTTP without consuming.
func TestServeEndsWhenAComponentDies(t *testing.T) {
	cfg := kafkaTestConfig(t)
	die := make(chan struct{})
	injected := errors.New("injected failure")
	orig := kafkaRun
	t.Cleanup(func() { kafkaRun = orig })
	kafkaRun = func(k *ingest.Kafka, ctx context.Context) error {
		// The real source runs until the test makes it fail.
		kctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- k.Run(kctx) }()
		select {
		case <-die:
			cancel()
			<-errc
			return injected
		case err := <-errc:
			return err
		}
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startServeLogs(t, ctx, cfg, &logs)
	close(die)
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30s after its Kafka source died; logs:\n%s", logs.String())
	}
	if !errors.Is(err, injected) || !strings.Contains(err.Error(), "kafka source stopped") {
		t.Fatalf("serve returned %v, want the Kafka source's error", err)
	}
	if st := exitStatus(err); st != 1 {
		t.Errorf("exit status %d, want 1", st)
	}
	out := logs.String()
	if !strings.Contains(out, `msg="component stopped on its own: shutting down" component="kafka source" err="injected failure"`) {
		t.Errorf("no log line naming the dead component:\n%s", out)
	}
	if !strings.Contains(out, "shut down: the ledger is closed") {
		t.Errorf("the ledger was not closed in order:\n%s", out)
	}
}

// The HTTP server is a component too: its listener failing ends serve.
func TestServeEndsWhenHTTPServerDies(t *testing.T) {
	cfg := testConfig(t)
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	orig := listenHook
	t.Cleanup(func() { listenHook = orig })
	var ln net.Listener
	listenHook = func(l net.Listener) net.Listener { ln = l; return l }
	done := startServeLogs(t, ctx, cfg, &logs)
	ln.Close() // the listener fails under the server: Accept returns an error
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "http server stopped") || exitStatus(err) != 1 {
			t.Fatalf("serve returned %v, want the HTTP server's error (exit 1)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve still running 30s after its listener failed")
	}
	if out := logs.String(); !strings.Contains(out, `component="http server"`) {
		t.Errorf("no log line naming the HTTP server:\n%s", out)
	}
}

// Issue 10 item 5: shutdown logs each step as it happens: HTTP drained,
// the checks and the Kafka source stopped, then the ledger closed, and a
// line once it has. Before, "closing the ledger" came first and nothing
// followed it.
func TestServeShutdownLogOrder(t *testing.T) {
	cfg := kafkaTestConfig(t)
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := startServeLogs(t, ctx, cfg, &logs)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v after a clean stop", err)
	}
	out := logs.String()
	last := -1
	for _, step := range []string{
		"shutting down: draining HTTP requests",
		"shutting down: stopping the self-audit checks",
		"shutting down: stopping the Kafka source",
		"shutting down: signing final checkpoints and closing the ledger",
		"shut down: the ledger is closed",
	} {
		i := strings.Index(out, step)
		if i < 0 || i < last {
			t.Fatalf("%q missing or out of order:\n%s", step, out)
		}
		last = i
	}
	if strings.Contains(out, "component stopped on its own") {
		t.Errorf("a clean stop reported a dead component:\n%s", out)
	}
}
