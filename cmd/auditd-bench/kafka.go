package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/internal/loadtest"
)

const kafkaUsage = `Usage: auditd-bench kafka [flags]

Measures Kafka ingestion: starts a Kafka-protocol broker in this process
(kfake), fills a topic first (timed separately), then consumes it with the
Kafka source into a fresh ledger and reports records per second from the
broker to durable ledger entries, fetch-to-durable latency, and memory.

The broker holds every record in this process's memory, so the resident set
includes it: the run reports the broker's share (measured after the fill)
apart from what consuming adds. With -daemon the consumer is "auditd serve"
in a child process: build it first (go build -o /tmp/auditd ./cmd/auditd)
and name it with -auditd unless an auditd binary is beside this one or on
$PATH.

`

type kafkaFlags struct {
	records     int
	partitions  int
	valueBytes  int
	batch       int
	compression string
	dir         string
	cpuProfile  string
	// profileSeconds is how long -daemon profiles the daemon for.
	profileSeconds int
	jsonOut        string
	fetchOnly      bool
	daemon         bool
	auditd         string
}

// runKafka is the kafka mode.
func runKafka(args []string) error {
	var f kafkaFlags
	fs := flag.NewFlagSet("kafka", flag.ContinueOnError)
	fs.IntVar(&f.records, "records", 1_000_000, "records to produce, then consume")
	fs.IntVar(&f.partitions, "partitions", 4, "partitions of the topic (one ledger log each)")
	fs.IntVar(&f.valueBytes, "value-bytes", 256, "bytes of each record's value (a JSON object)")
	fs.IntVar(&f.batch, "batch-records", 0, "records per ledger request per partition (0: the source's default)")
	fs.StringVar(&f.compression, "compression", "none", "producer compression: none, snappy, lz4 or zstd")
	fs.StringVar(&f.dir, "data-dir", "", "ledger data directory (default: a temporary one, removed after)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the consuming phase to this file (-daemon: of the daemon, from its debug listener)")
	fs.IntVar(&f.profileSeconds, "profile-seconds", 15, "-daemon -cpuprofile: profile the daemon's first this many seconds")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&f.fetchOnly, "fetch-only", false, "only fetch the records with a Kafka client, no ledger: the broker and client's share")
	fs.BoolVar(&f.daemon, "daemon", false, "consume with \"auditd serve\" run as a child process (its own memory, measured apart from the broker's)")
	fs.StringVar(&f.auditd, "auditd", "", "-daemon: the auditd binary (default: auditd beside this executable, else on $PATH)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), kafkaUsage); fs.PrintDefaults() }
	if err := parseFlags(fs, args); err != nil {
		return done(err)
	}
	if f.records < 1 || f.partitions < 1 || f.valueBytes < 64 || f.batch < 0 {
		return errors.New("kafka: -records and -partitions must be positive, -value-bytes at least 64")
	}
	codec, ok := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}[f.compression]
	if !ok {
		return fmt.Errorf("kafka: unknown -compression %q", f.compression)
	}
	res, err := benchKafka(context.Background(), f, codec)
	if err != nil {
		return err
	}
	return writeJSON(f.jsonOut, "kafka", res)
}

func benchKafka(ctx context.Context, f kafkaFlags, codec kgo.CompressionCodec) (map[string]any, error) {
	res := map[string]any{"records": f.records, "partitions": f.partitions, "value_bytes": f.valueBytes,
		"compression": f.compression, "gomaxprocs": runtime.GOMAXPROCS(0)}
	fmt.Printf("bench: %d CPUs, load average %s\n", runtime.NumCPU(), loadtest.LoadAvg(3))
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(f.partitions), "bench"))
	if err != nil {
		return nil, fmt.Errorf("kafka: broker: %w", err)
	}
	defer cluster.Close()
	broker := cluster.ListenAddrs()[0]
	total, rssFilled, err := kafkaFill(ctx, broker, f, codec, res)
	if err != nil {
		return nil, err
	}
	switch {
	case f.fetchOnly:
		return benchFetchOnly(ctx, broker, total, f, res)
	case f.daemon:
		return benchKafkaDaemon(ctx, broker, total, f, res)
	}
	return benchKafkaSource(ctx, broker, total, rssFilled, f, res)
}

// kafkaFill fills the topic, timed apart (production is not part of the
// measurement), and measures the memory the broker holds. It returns the
// records produced and the resident set after the fill.
func kafkaFill(ctx context.Context, broker string, f kafkaFlags, codec kgo.CompressionCodec, res map[string]any) (int64, int64, error) {
	rssStart := loadtest.SelfStatusKB("VmRSS")
	fmt.Printf("bench: producing %d records of %d bytes to %d partitions (in-process kfake at %s) ...\n", f.records, f.valueBytes, f.partitions, broker)
	start := time.Now()
	produced, err := fillTopic(ctx, broker, f, codec)
	if err != nil {
		return 0, 0, err
	}
	prodSecs := time.Since(start).Seconds()
	var total int64
	for _, n := range produced {
		total += n
	}
	runtime.GC()
	debug.FreeOSMemory()
	rssFilled := loadtest.SelfStatusKB("VmRSS")
	res["produce_seconds"] = prodSecs
	res["produce_records_per_second"] = float64(total) / prodSecs
	res["rss_start_bytes"] = rssStart
	res["rss_after_fill_bytes"] = rssFilled
	res["broker_rss_bytes"] = rssFilled - rssStart
	mib := loadtest.MiB
	fmt.Printf("produce: %d records in %.2fs = %.0f records/s (not part of the measurement)\n", total, prodSecs, float64(total)/prodSecs)
	fmt.Printf("memory:  RSS %s at the start, %s with the topic filled: the broker holds ~%s (%.0f bytes/record)\n",
		mib(rssStart), mib(rssFilled), mib(rssFilled-rssStart), float64(rssFilled-rssStart)/float64(total))
	return total, rssFilled, nil
}

// fillTopic produces f.records records, keyed by account, each with a
// unique id header and a JSON value of f.valueBytes bytes, and returns the
// partitions' high watermarks.
func fillTopic(ctx context.Context, broker string, f kafkaFlags, codec kgo.CompressionCodec) ([]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("bench"),
		kgo.ProducerBatchCompression(codec), kgo.MaxBufferedRecords(200_000), kgo.ProducerLinger(20*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	var acked atomic.Int64
	const producers = 2
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			g := loadtest.NewEventGen(uint64(p)+11, f.valueBytes, false)
			rng := rand.New(rand.NewPCG(uint64(p), 3))
			pad := make([]byte, 4096)
			for i := range pad {
				pad[i] = loadtest.Alnum[rng.IntN(len(loadtest.Alnum))]
			}
			for i := p; i < f.records && failed.Load() == nil; i += producers {
				acct := rng.IntN(100_000)
				r := &kgo.Record{Key: []byte("acct-" + strconv.Itoa(acct)), Value: recordValue(rng, pad, acct, i, f.valueBytes),
					Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(g.ID())}}}
				cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.CompareAndSwap(nil, &err)
					}
					acked.Add(1)
				})
			}
		})
	}
	stopProgress := printEvery(5*time.Second, func() { fmt.Fprintf(os.Stderr, "produce: %d/%d\n", acked.Load(), f.records) })
	wg.Wait()
	err = cl.Flush(ctx)
	stopProgress()
	if p := failed.Load(); p != nil {
		return nil, fmt.Errorf("kafka: produce: %w", *p)
	}
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "bench")
	if err != nil {
		return nil, err
	}
	hwm := make([]int64, f.partitions)
	ends.Each(func(o kadm.ListedOffset) { hwm[o.Partition] = o.Offset })
	return hwm, nil
}

// recordValue is record i's value: a JSON object of size bytes padded from
// a slice of pad.
func recordValue(rng *rand.Rand, pad []byte, acct, i, size int) []byte {
	v := make([]byte, 0, size)
	v = append(v, `{"account":"acct-`...)
	v = strconv.AppendInt(v, int64(acct), 10)
	v = append(v, `","amount":`...)
	v = strconv.AppendInt(v, int64(rng.IntN(1_000_000)), 10)
	v = append(v, `,"seq":`...)
	v = strconv.AppendInt(v, int64(i), 10)
	v = append(v, `,"pad":"`...)
	n := max(0, size-len(v)-2)
	off := rng.IntN(len(pad) - min(n, len(pad)-1))
	for n > 0 {
		c := min(n, len(pad)-off)
		v = append(v, pad[off:off+c]...)
		n -= c
		off = 0
	}
	return append(v, '"', '}')
}

// printEvery calls fn every d until stop is called.
func printEvery(d time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
