package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
)

// runDemo starts an in-process Kafka-protocol broker (kfake) on loopback, a
// producer of sample payment events, and the daemon consuming them, so a
// newcomer sees the whole flow with one command and no broker install.
func runDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "./auditd-demo", "ledger data directory of the demo")
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP listen address of the daemon")
	brokerPort := fs.Int("broker-port", 9092, "loopback port of the in-process Kafka broker (0: any free port)")
	partitions := fs.Int("partitions", 3, "partitions of the payments topic")
	rate := fs.Int("rate", 200, "sample events produced per second (0: none)")
	events := fs.Int("events", 0, "stop producing after this many events (0: never)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: auditd demo [flags]

Starts a Kafka-protocol broker in this process (github.com/twmb/franz-go/pkg/kfake,
for demos and tests, not production), produces sample payment events to its
"payments" topic, and runs auditd serve consuming them: one ledger log per
partition, payments.0 .. payments.N. Other Kafka clients (kcat, your own
producers) can use the broker address it prints.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("demo takes no arguments (got %q)", fs.Args())}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(int32(*partitions), "payments"), kfake.AllowAutoTopicCreation()}
	if *brokerPort != 0 {
		opts = append(opts, kfake.Ports(*brokerPort))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("demo broker: %w (try --broker-port 0)", err)
	}
	defer cluster.Close()
	broker := cluster.ListenAddrs()[0]

	logger, err := newLogger("info", "text")
	if err != nil {
		return err
	}
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen = *dataDir, *listen
	cfg.Kafka = &ingest.KafkaConfig{Brokers: []string{broker}, Topics: []string{"payments"}, Group: "auditd-demo"}
	if err := cfg.validate(); err != nil {
		return err
	}

	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, cfg, logger, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-errc:
		return err
	}
	fmt.Fprint(os.Stderr, demoBanner(broker, addr, cfg.DataDir))

	if *rate > 0 {
		go producePayments(ctx, broker, *rate, *events, logger)
	}
	return <-errc
}

// producePayments writes sample transfer events, keyed by the paying
// account, each with an id header.
func producePayments(ctx context.Context, broker string, rate, limit int, logger interface {
	Error(string, ...any)
}) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		logger.Error("demo producer", "err", err)
		return
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := 0; limit == 0 || n < limit; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		from, to := rng.IntN(50), rng.IntN(50)
		if to == from {
			to = (to + 1) % 50
		}
		id := "demo-" + strconv.Itoa(n)
		v := fmt.Sprintf(`{"id":%q,"type":"transfer","from":"acct-%d","to":"acct-%d","amount":%d,"currency":"EUR"}`, id, from, to, 1+rng.IntN(10000))
		r := &kgo.Record{Key: []byte("acct-" + strconv.Itoa(from)), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil && ctx.Err() == nil {
				logger.Error("demo producer", "err", err)
			}
		})
	}
	// Close fails what is still buffered: --events N must mean N.
	if err := cl.Flush(ctx); err != nil && ctx.Err() == nil {
		logger.Error("demo producer: flush", "err", err)
	}
}

// demoBanner is what the demo prints once it runs: where the broker and
// the API are, and commands to try. The kcat example sends an id header
// (the Kafka source's event id), so the lookup by id after it finds it.
func demoBanner(broker, addr, dataDir string) string {
	return fmt.Sprintf(`
auditd demo is running.
  Kafka broker (in-process kfake):  %[1]s
  auditd API:                       http://%[2]s
Try:
  curl -s http://%[2]s/v1/logs | jq
  curl -s http://%[2]s/v1/logs/payments.0 | jq        # source position, lag, gaps
  curl -s http://%[2]s/v1/logs/payments.0/checkpoint   # signed checkpoint
  curl -s 'http://%[2]s/v1/logs/payments.0/entries?start=0&end=3' | jq
  echo '{"type":"transfer","from":"acct-1","to":"acct-2","amount":5}' | kcat -P -b %[1]s -t payments -p 0 -k acct-1 -H id=t-1
  curl -s 'http://%[2]s/v1/logs/payments.0/entries?id=t-1' | jq   # that record, by its id header
  open http://%[2]s/ for the status page
Ctrl-C stops it; the ledger stays in %[3]s.

`, broker, addr, dataDir)
}
