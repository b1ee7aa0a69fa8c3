package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory, unmounted
// when the test ends. It skips the test, saying why, where mounting is
// impossible (not root, no mount permission in the sandbox).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func remountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v: %s", dir, err, out)
	}
}

// fillDisk writes a file in dir until the file system is full (ENOSPC).
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	// The last partial block.
	for _, n := range []int{64 << 10, 4 << 10, 512} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	return path
}

// diskPoster posts batches of incompressible events to one log and keeps
// what was acknowledged.
type diskPoster struct {
	t      *testing.T
	d      *daemon
	log    string
	next   int
	acked  map[string]uint64 // id -> index
	codes  map[int]int
	errs   map[string]int // error code -> count
	client *http.Client
}

func newDiskPoster(t *testing.T, d *daemon, log string) *diskPoster {
	return &diskPoster{t: t, d: d, log: log, acked: map[string]uint64{}, codes: map[int]int{}, errs: map[string]int{},
		client: &http.Client{Timeout: 30 * time.Second}}
}

// post sends one batch of n events of about size payload bytes and returns
// the status and the error code of a refusal.
func (p *diskPoster) post(ctx context.Context, n, size int) (int, string) {
	p.t.Helper()
	var body bytes.Buffer
	ids := make([]string, n)
	raw := make([]byte, size*3/4)
	for i := range n {
		ids[i] = fmt.Sprintf("ev-%06d", p.next)
		p.next++
		rand.Read(raw)
		fmt.Fprintf(&body, `{"id":%q,"key":"k%d","payload":{"blob":%q}}`+"\n", ids[i], i%17, base64.StdEncoding.EncodeToString(raw))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.d.url+"/v1/logs/"+p.log+"/entries", &body)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatalf("POST: %v (daemon %s)\n%s", err, p.d.exitStatus(), strings.Join(lastLines(p.d, 30), "\n"))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	p.codes[resp.StatusCode]++
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal(b, &e); err != nil {
			// Whether a refused event was written is unknown: resent later.
			p.t.Fatalf("POST %d: not a JSON error: %.300s", resp.StatusCode, b)
		}
		p.errs[e.Code]++
		p.next -= n // the same ids again next time
		return resp.StatusCode, e.Code
	}
	var out struct {
		Entries []struct {
			ID    string `json:"id"`
			Index uint64 `json:"index"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Entries) != n {
		p.t.Fatalf("POST 200: %v: %.300s", err, b)
	}
	for _, e := range out.Entries {
		p.acked[e.ID] = e.Index
	}
	return resp.StatusCode, ""
}

// checkAcked checks every acknowledged event is in the log at the index its
// acknowledgement gave, paging through the log.
func (p *diskPoster) checkAcked(ctx context.Context, d *daemon) {
	p.t.Helper()
	byIndex := map[uint64]string{}
	for start := uint64(0); ; {
		var page struct {
			Entries []struct {
				Index uint64 `json:"index"`
				ID    string `json:"id"`
			} `json:"entries"`
			Next *uint64 `json:"next"`
		}
		if err := d.getJSON(ctx, fmt.Sprintf("/v1/logs/%s/entries?start=%d&payload=false", p.log, start), &page); err != nil {
			p.t.Fatal(err)
		}
		for _, e := range page.Entries {
			byIndex[e.Index] = e.ID
		}
		if page.Next == nil {
			break
		}
		start = *page.Next
	}
	lost := 0
	for id, i := range p.acked {
		if byIndex[i] != id {
			lost++
			if lost < 5 {
				p.t.Errorf("acknowledged %s at index %d; the log holds %q there", id, i, byIndex[i])
			}
		}
	}
	if lost > 0 {
		p.t.Errorf("%d of %d acknowledged events lost", lost, len(p.acked))
	}
}

func lastLines(d *daemon, n int) []string {
	ls := d.stderr.lines()
	return ls[max(0, len(ls)-n):]
}

func readyz(ctx context.Context, d *daemon) (int, map[string]any) {
	code, body, err := d.get(ctx, "/readyz")
	if err != nil {
		return 0, nil
	}
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	return code, m
}

// TestDiskFull runs the daemon with its data directory on a 64 MiB tmpfs
// and posts until the disk fills: appends are refused with 503 disk_full,
// never a 500 and never a crash; reads go on; /readyz is 503 with reason
// disk_full and the alert storage/disk_full fires; once the file system
// grows appends resume by themselves, within 30 s, with nothing
// acknowledged lost. Then the disk is filled from outside while the daemon
// runs, and after a stop the daemon is started on a full disk: it exits
// promptly, non-zero, saying why, and starts again once space is freed.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon on a tmpfs")
	}
	mnt := mountTmpfs(t, "64m")
	ctx := context.Background()
	bin := buildDaemon(t, ctx)
	dataDir := filepath.Join(mnt, "data")
	start := func(run int) *daemon {
		d, err := startDaemonArgs(ctx, bin, run, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0",
			"--checkpoint-interval", "20ms", "--log-format", "text")
		if err != nil {
			t.Fatalf("start: %v\n%s", err, strings.Join(lastLines(d, 30), "\n"))
		}
		t.Cleanup(d.kill)
		return d
	}
	d := start(1)
	p := newDiskPoster(t, d, "orders")

	// Fill: 256 events of ~1 KiB a batch until refused.
	refusedAt := 0
	for i := 0; i < 2000; i++ {
		code, ecode := p.post(ctx, 256, 1024)
		if code == http.StatusOK {
			continue
		}
		if code != http.StatusServiceUnavailable || ecode != "disk_full" {
			t.Fatalf("POST refused with %d %q, want 503 disk_full", code, ecode)
		}
		refusedAt = len(p.acked)
		break
	}
	if refusedAt == 0 {
		t.Fatalf("never refused after %d acknowledged events; codes %v", len(p.acked), p.codes)
	}
	t.Logf("disk full after %d acknowledged events (%d bytes of payload each)", refusedAt, 1024)
	// Still refused, still alive, still reading.
	for range 3 {
		if code, ecode := p.post(ctx, 16, 1024); code != http.StatusServiceUnavailable || ecode != "disk_full" {
			t.Fatalf("POST while full: %d %q, want 503 disk_full", code, ecode)
		}
	}
	if code, m := readyz(ctx, d); code != http.StatusServiceUnavailable || m["reason"] != "disk_full" {
		t.Errorf("/readyz while full: %d %v, want 503 reason disk_full", code, m)
	}
	for _, path := range []string{"/v1/logs/orders/checkpoint", "/v1/logs/orders/entries/0", "/v1/logs/orders/tile/0/000",
		"/v1/logs/orders/proof/inclusion?index=1000", "/v1/logs/orders/proof/consistency?from=1&to=1000", "/healthz"} {
		if code, body, err := d.get(ctx, path); err != nil || code != http.StatusOK {
			t.Errorf("GET %s while full: %d %v %.200s", path, code, err, body)
		}
	}
	waitUntil(t, "the alert storage/disk_full", func() bool {
		var a struct {
			State string            `json:"state"`
			Label map[string]string `json:"labels"`
		}
		return d.getJSON(ctx, "/v1/alerts/storage/disk_full", &a) == nil && a.State == "firing" && a.Label["severity"] == "critical"
	})

	// Space freed: appends resume by themselves.
	remountTmpfs(t, mnt, "128m")
	freed := time.Now()
	var resumed time.Duration
	for {
		code, _ := p.post(ctx, 16, 1024)
		if code == http.StatusOK {
			resumed = time.Since(freed)
			break
		}
		if time.Since(freed) > 30*time.Second {
			t.Fatalf("appends not resumed 30s after space was freed\n%s", strings.Join(lastLines(d, 20), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("appends resumed %v after space was freed", resumed.Round(time.Millisecond))
	for range 20 {
		if code, ecode := p.post(ctx, 256, 1024); code != http.StatusOK {
			t.Fatalf("POST after space was freed: %d %q", code, ecode)
		}
	}
	waitUntil(t, "/readyz 200 again", func() bool { code, _ := readyz(ctx, d); return code == http.StatusOK })
	waitUntil(t, "the alert storage/disk_full to resolve", func() bool {
		var a struct {
			State string `json:"state"`
		}
		return d.getJSON(ctx, "/v1/alerts/storage/disk_full", &a) == nil && a.State == "resolved"
	})

	// Filled from outside while running: refused within the guard's poll
	// (what is taken meanwhile goes to the WAL Pebble preallocated, and is
	// durable), not crashed.
	filler := fillDisk(t, mnt)
	sawRefusal := false
	for filled := time.Now(); time.Since(filled) < 10*time.Second && !sawRefusal; time.Sleep(50 * time.Millisecond) {
		code, ecode := p.post(ctx, 64, 1024)
		switch {
		case code == http.StatusOK:
		case code == http.StatusServiceUnavailable && ecode == "disk_full":
			sawRefusal = true
		default:
			t.Fatalf("POST on a disk filled from outside: %d %q\n%s", code, ecode, strings.Join(lastLines(d, 20), "\n"))
		}
	}
	if !sawRefusal {
		t.Fatalf("appends still taken on a full disk")
	}
	if code, _, err := d.get(ctx, "/v1/logs/orders/checkpoint"); err != nil || code != http.StatusOK {
		t.Errorf("GET checkpoint on a disk filled from outside: %d %v", code, err)
	}
	// SIGTERM works on a full disk.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.stop(sctx); err != nil {
		t.Errorf("SIGTERM on a full disk: %v\n%s", err, strings.Join(lastLines(d, 20), "\n"))
	}

	// Starting on a full disk: a prompt non-zero exit that says why.
	cmd := exec.Command(bin, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--log-format", "text")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			t.Errorf("serve on a full disk exited 0")
		}
		if !strings.Contains(stderr.String(), "free") {
			t.Errorf("serve on a full disk does not say why:\n%s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("serve on a full disk still running after 30s:\n%s", stderr.String())
	}

	// Space freed: it starts, and holds everything acknowledged.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	d = start(3)
	p.d = d
	p.checkAcked(ctx, d)
	if code, ecode := p.post(ctx, 16, 1024); code != http.StatusOK {
		t.Errorf("POST after a restart with space: %d %q", code, ecode)
	}
	t.Logf("acknowledged %d events in all; status codes %v; refusals %v", len(p.acked), p.codes, p.errs)
	if p.codes[http.StatusInternalServerError] > 0 {
		t.Errorf("%d POSTs answered 500", p.codes[http.StatusInternalServerError])
	}
}
