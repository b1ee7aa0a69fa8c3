package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/merkle"
)

// TestKafkaKcat checks interoperability with an independent client: records
// produced by kcat (librdkafka) are ledgered with their keys, headers (in
// order) and values byte for byte, at the offsets kcat reads them back at.
func TestKafkaKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		msg := "kcat (librdkafka's command-line client) is not installed: apt-get install -y kcat"
		if os.Getenv("AUDITD_REQUIRE_KCAT") == "1" {
			t.Fatal(msg + " (AUDITD_REQUIRE_KCAT=1 requires it)")
		}
		t.Skip(msg + "; set AUDITD_REQUIRE_KCAT=1 to make this a failure")
	}
	t.Parallel()
	b := newBroker(t)
	b.createTopic("kc", 1)
	addr := b.addrs[0]
	run := func(stdin string, args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		cmd := exec.CommandContext(ctx, kcat, append([]string{"-b", addr, "-m", "30", "-X", "broker.address.family=v4"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kcat %q: %v\n%s", args, err, stderr.String())
		}
		return stdout.Bytes()
	}

	bin := "\x01\x02\x7f\xfe\xff"
	// What each kcat invocation produces, in order.
	var want []*kgo.Record
	expect := func(key, value string, headers ...string) {
		want = append(want, rec("kc", 0, []byte(key), []byte(value), headers...))
	}
	run("user-1:{\"action\":\"login\",\"n\":1}\nuser-2:{\"action\":\"logout\",\"tags\":[\"a\",\"b\"]}\n",
		"-P", "-t", "kc", "-p", "0", "-K:", "-H", "id=evt-kcat-1", "-H", "other=value", "-H", "bin="+bin)
	expect("user-1", `{"action":"login","n":1}`, "id", "evt-kcat-1", "other", "value", "bin", bin)
	expect("user-2", `{"action":"logout","tags":["a","b"]}`, "id", "evt-kcat-1", "other", "value", "bin", bin)
	run("plain text, not JSON\n", "-P", "-t", "kc", "-p", "0", "-k", "fixed-key", "-H", "dup=a", "-H", "id=evt-kcat-2", "-H", "dup=b")
	expect("fixed-key", "plain text, not JSON", "dup", "a", "id", "evt-kcat-2", "dup", "b")
	run("k4:[1,2,3]\n", "-P", "-t", "kc", "-p", "0", "-K:")
	expect("k4", "[1,2,3]")

	// Read them back with kcat: offsets, timestamps, keys and values.
	type kcatMsg struct {
		Offset  int64    `json:"offset"`
		TS      int64    `json:"ts"`
		Key     string   `json:"key"`
		Payload string   `json:"payload"`
		Headers []string `json:"headers"`
	}
	out := run("", "-C", "-t", "kc", "-p", "0", "-o", "beginning", "-e", "-J")
	var got []kcatMsg
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var m kcatMsg
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("kcat -J line %q: %v", line, err)
		}
		got = append(got, m)
	}
	if len(got) != len(want) {
		t.Fatalf("kcat read %d messages back, want %d:\n%s", len(got), len(want), out)
	}
	for i, m := range got {
		w := want[i]
		if m.Offset != int64(i) || m.Key != string(w.Key) || m.Payload != string(w.Value) || len(m.Headers) != 2*len(w.Headers) {
			t.Fatalf("kcat read back message %d as %+v, want offset %d key %q value %q", i, m, i, w.Key, w.Value)
		}
		for j, h := range w.Headers {
			if m.Headers[2*j] != h.Key || h.Key != "bin" && m.Headers[2*j+1] != string(h.Value) {
				t.Fatalf("kcat read back message %d header %d as %q=%q, want %q=%q", i, j, m.Headers[2*j], m.Headers[2*j+1], h.Key, h.Value)
			}
		}
		w.Offset, w.Timestamp = m.Offset, time.UnixMilli(m.TS)
	}

	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"kc"}})
	waitNext(t, store, "kc.0", int64(len(want)))
	src.stop()
	entries := checkOffsets(t, store, "kc", 0, upTo(0, int64(len(want))))
	wantEntries := []wantEntry{
		{id: "evt-kcat-1", json: true},
		{id: "kc/0/1", marks: merkle.MarkDuplicateID, json: true}, // the id header repeats
		{id: "evt-kcat-2", marks: merkle.MarkNotJSON},
		{id: "kc/0/3", json: true},
	}
	for i, e := range entries {
		checkEntry(t, e, want[i], wantEntries[i])
	}
	for _, e := range entries {
		var hs []string
		for _, h := range e.Leaf.Headers {
			hs = append(hs, fmt.Sprintf("%s=%q", h.Key, h.Value))
		}
		t.Logf("%s/%d: id %q key %q headers %s payload %q", e.Leaf.Log, e.Index, e.Leaf.ID, e.Leaf.Key, hs, e.Payload)
	}
}
