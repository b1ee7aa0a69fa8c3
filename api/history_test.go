package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/api"
)

// TestInfoAndHistory: /v1/info and /v1/history answer 404 until the
// daemon sets them, then serve what it set and what it sampled, behind the
// read token; the history keeps a bounded number of samples and logs, and
// a checkpoint's age restarts when it grows.
func TestInfoAndHistory(t *testing.T) {
	e := newTestEnv(t, envConfig{opts: api.Options{Auth: api.Tokens{Read: "r"}}, logs: []string{"a", "b", "c"}})
	e.token = "r"
	e.get("/v1/info", http.StatusNotFound)
	e.get("/v1/history", http.StatusNotFound)
	if r := e.do(http.MethodGet, "/v1/history", nil); r.status != http.StatusUnauthorized {
		t.Errorf("history without the read token: %v", r)
	}

	started := time.Now().Add(-time.Hour)
	e.server.SetInfo(api.Info{Version: "v1.2.3", Revision: "abc", Origin: testKeyName, StartedAt: started})
	var info struct {
		api.Info
		Uptime float64 `json:"uptime_seconds"`
	}
	e.getJSON("/v1/info", &info)
	if info.Version != "v1.2.3" || info.Origin != testKeyName || info.Uptime < 3600 || info.Uptime > 3600+60 {
		t.Errorf("info %+v", info)
	}

	h := api.NewHistory(e.store, nil, time.Second, 3, 2) // 3 samples of 2 logs
	e.server.SetHistory(h)
	t0 := time.Now()
	e.post("a", "wait=checkpoint", `{"id":"1","payload":{}}`)
	h.Sample(t0)
	h.Sample(t0.Add(time.Second)) // nothing grew
	e.post("a", "wait=checkpoint", `{"id":"2","payload":{}}`+"\n"+`{"id":"3","payload":{}}`)
	h.Sample(t0.Add(2 * time.Second))
	h.Sample(t0.Add(3 * time.Second))
	var out struct {
		Interval float64 `json:"interval_seconds"`
		Samples  []api.Sample
	}
	e.getJSON("/v1/history", &out)
	if out.Interval != 1 || len(out.Samples) != 3 {
		t.Fatalf("history: interval %v, %d samples, want 1s and 3 (the oldest dropped)", out.Interval, len(out.Samples))
	}
	var got []string
	for _, s := range out.Samples {
		if len(s.Logs) != 2 || s.Logs["c"] != (api.LogSample{}) {
			t.Errorf("sample at %v holds logs %v, want a and b only", s.At, s.Logs)
		}
		a := s.Logs["a"]
		got = append(got, fmt.Sprintf("%d/%d/%.0f", a.Size, a.Checkpoint, a.CheckpointAge))
	}
	if want := "1/1/1 3/3/0 3/3/1"; strings.Join(got, " ") != want {
		t.Errorf("log a size/checkpoint/age: %s, want %s", strings.Join(got, " "), want)
	}
}
