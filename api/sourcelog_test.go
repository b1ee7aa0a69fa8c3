package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestPostToSourceLog: a log a Kafka partition feeds (it has a source
// position) refuses entries over HTTP with 409 source_log and is unchanged.
func TestPostToSourceLog(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envConfig{logs: []string{"payments.0"}})
	l, err := e.store.Log("payments.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendSource(context.Background(), nil, []byte(`{"topic":"payments","partition":0,"next":0}`)); err != nil {
		t.Fatal(err)
	}
	r := e.do(http.MethodPost, "/v1/logs/payments.0/entries", strings.NewReader(`{"id":"x","payload":{"n":1}}`))
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), `"source_log"`) {
		t.Fatalf("POST to a Kafka-fed log: %d %s, want 409 source_log", r.status, r.body)
	}
	if l.Size() != 0 {
		t.Fatalf("log size %d after a refused POST", l.Size())
	}
}
