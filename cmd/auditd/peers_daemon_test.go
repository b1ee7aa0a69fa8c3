package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestDaemonPeerFork runs two daemons, each the other's peer, fed
// different records under one log name: each raises the fork as a critical
// integrity alert carrying both signed notes; a third daemon fed the same
// records as the first agrees with it (no alert).
func TestDaemonPeerFork(t *testing.T) {
	type daemon struct {
		addr, url, dir, key string
	}
	var ds [3]daemon
	for i := range ds {
		ds[i].dir = t.TempDir()
		ds[i].key = filepath.Join(ds[i].dir, "auditd.key")
		if err := writeNewKey(ds[i].key, fmt.Sprintf("auditd-%c.example", 'a'+i)); err != nil {
			t.Fatal(err)
		}
		ds[i].addr = freeAddr(t)
		ds[i].url = "http://" + ds[i].addr
	}
	// a and b are peers; c is a's honest twin, a peer of a only.
	peers := [3][]int{{1, 2}, {0}, {0}}
	for i := range ds {
		cfg := defaultConfig()
		cfg.DataDir, cfg.KeyFile, cfg.Listen = ds[i].dir, ds[i].key, ds[i].addr
		cfg.CheckpointInterval = 10 * time.Millisecond
		cfg.Checks.Peers.Interval = 100 * time.Millisecond
		for _, j := range peers[i] {
			cfg.Checks.Peers.List = append(cfg.Checks.Peers.List, PeerConfig{URL: ds[j].url, KeyFile: ds[j].key + ".pub"})
		}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ready, done := make(chan string, 1), make(chan error, 1)
		go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
		select {
		case <-ready:
		case err := <-done:
			cancel()
			t.Fatalf("serve %d: %v", i, err)
		}
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve returned %v", err)
			}
		})
	}
	records := func(fork bool) string {
		var b strings.Builder
		for i := range 300 {
			amount := i
			if fork && i == 150 {
				amount = -1
			}
			fmt.Fprintf(&b, `{"id":"o-%d","time":"2026-01-01T00:00:%02d.%03dZ","payload":{"amount":%d}}`+"\n", i, i/1000, i%1000, amount)
		}
		return b.String()
	}
	post(t, ds[0].url+"/v1/logs/pay/entries?wait=checkpoint", records(false))
	post(t, ds[1].url+"/v1/logs/pay/entries?wait=checkpoint", records(true))
	post(t, ds[2].url+"/v1/logs/pay/entries?wait=checkpoint", records(false))

	for _, i := range []int{0, 1} {
		a := getAlertHTTP(t, ds[i].url+"/v1/alerts/integrity/checks/peers/pay/fork")
		if a.State != "firing" || a.Kind != "integrity" || a.Labels["severity"] != "critical" || a.Labels["violation"] != "fork" {
			t.Fatalf("daemon %d: alert %+v", i, a)
		}
		var d struct {
			Findings []struct {
				Evidence []string `json:"evidence"`
			} `json:"findings"`
		}
		if err := json.Unmarshal(a.Details, &d); err != nil || len(d.Findings) != 1 || len(d.Findings[0].Evidence) != 2 {
			t.Fatalf("daemon %d: details %s (%v)", i, a.Details, err)
		}
		for j, ev := range d.Findings[0].Evidence {
			if !strings.Contains(ev, "/pay\n300\n") {
				t.Fatalf("daemon %d: evidence %d is not a checkpoint of pay at 300: %q", i, j, ev)
			}
		}
	}
	// c agrees with a: after some passes, no alert.
	time.Sleep(500 * time.Millisecond)
	resp, err := http.Get(ds[2].url + "/v1/alerts/integrity/checks/peers/pay/fork")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("honest twin: alert status %s, want 404", resp.Status)
	}
}

type alertJSON struct {
	State   string            `json:"state"`
	Kind    string            `json:"kind"`
	Labels  map[string]string `json:"labels"`
	Details json.RawMessage   `json:"details"`
}

func getAlertHTTP(t *testing.T, url string) alertJSON {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			var a alertJSON
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatal(err)
			}
			return a
		}
		if time.Now().After(deadline) {
			checks := strings.Replace(url, "/alerts/integrity/checks/peers/pay/fork", "/checks/peers", 1)
			cr, err := http.Get(checks)
			var cb []byte
			if err == nil {
				cb, _ = io.ReadAll(cr.Body)
				cr.Body.Close()
			}
			t.Fatalf("GET %s: %s %s; GET %s: %s %v", url, resp.Status, b, checks, cb, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
