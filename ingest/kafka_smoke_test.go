package ingest_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
)

func TestKafkaSmoke(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	skey, vkey, _ := note.GenerateKey(rand.Reader, "test")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	store, err := ledger.Open(t.TempDir(), signer, verifier)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		r := &kgo.Record{Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		if i%3 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "id", Value: []byte(fmt.Sprint("evt-", i))}}
		}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	k, err := ingest.NewKafka(store, ingest.KafkaConfig{Brokers: c.ListenAddrs(), Topics: []string{"payments"}}, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- k.Run(rctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var total uint64
		for _, li := range store.Logs() {
			total += li.Size
		}
		if total == 100 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	var total uint64
	for _, li := range store.Logs() {
		t.Logf("%s size %d", li.Name, li.Size)
		total += li.Size
		st, ok := k.Status(li.Name)
		t.Logf("status %+v %v", st, ok)
	}
	if total != 100 {
		t.Fatalf("ledgered %d records, want 100", total)
	}
}
