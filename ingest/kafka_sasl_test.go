package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/auditd/auditd/ingest"
)

// TestKafkaSASL consumes from a broker that requires SASL: the right
// credentials (PLAIN and SCRAM-SHA-256) ledger the records; a wrong password
// gives a not-ready state that says what to check (kfake, like many
// brokers, just closes the connection), without stopping Run or creating
// logs. The password holds $ signs, which must reach the broker as given:
// the source once expanded it again after the configuration had, and
// "s3$cret$$x" became "s3x".
func TestKafkaSASL(t *testing.T) {
	t.Parallel()
	const saslPass = "s3$cret$$x"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", saslPass), kfake.Superuser("SCRAM-SHA-256", "admin", saslPass),
		kfake.SeedTopics(1, "secure"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("secure"),
		kgo.SASL(plain.Auth{User: "admin", Pass: saslPass}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 5; i++ {
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Value: []byte(`{"n":1}`)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256"} {
		t.Run(mech, func(t *testing.T) {
			store := newStore(t)
			src := startSource(t, store, ingest.KafkaConfig{Brokers: c.ListenAddrs(), Topics: []string{"secure"}, Group: "g-" + mech,
				SASL: &ingest.KafkaSASL{Mechanism: mech, Username: "admin", Password: saslPass}})
			waitNext(t, store, "secure.0", 5)
			src.waitReady()
			src.stop()
		})
	}

	t.Run("wrong password", func(t *testing.T) {
		store := newStore(t)
		src := startSource(t, store, ingest.KafkaConfig{Brokers: c.ListenAddrs(), Topics: []string{"secure"}, Group: "g-wrong",
			SASL: &ingest.KafkaSASL{Mechanism: "PLAIN", Username: "admin", Password: "wrong"}})
		var err error
		waitFor(t, "Ready to say authentication failed", func() bool {
			err = src.k.Ready()
			return err != nil && strings.Contains(err.Error(), "SASL credentials")
		}, func() string { return fmt.Sprintf("Ready() = %v", err) })
		if !src.running() {
			t.Fatal("Run returned on an authentication failure")
		}
		src.stop()
		if n := logSize(store, "secure.0"); n != 0 {
			t.Errorf("ledgered %d records without authenticating", n)
		}
	})
}
