package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// adminAck is one acknowledged event of a writer.
type adminAck struct {
	log, id  string
	index    uint64
	leafHash string
}

// tokenPost POSTs an NDJSON body to log with a bearer token; it returns the
// acknowledged entries (nil unless 200).
func tokenPost(ctx context.Context, d *daemon, token, log string, body []byte) (int, []adminAck, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/logs/"+log+"/entries", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, err
	}
	var res struct {
		Entries []struct {
			Index    uint64          `json:"index"`
			ID       string          `json:"id"`
			LeafHash json.RawMessage `json:"leaf_hash"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return resp.StatusCode, nil, err
	}
	out := make([]adminAck, len(res.Entries))
	for i, e := range res.Entries {
		out[i] = adminAck{log: log, id: e.ID, index: e.Index, leafHash: string(e.LeafHash)}
	}
	return resp.StatusCode, out, nil
}

// TestBackupRestoreUnderWriteLoad runs the binary: two clients POST to two
// logs without pause while auditd backup takes a backup; auditd restore
// puts it in a new data dir (fsck clean, as restore checks) and serve
// starts on it with the key, holding every event acknowledged before the
// backup began, byte for byte (leaf hashes). The adversary's cases: a
// backup without the token, a restore over a non-empty dir, a restore on
// the host whose guard has seen later checkpoints (refused, the dir left
// empty), a truncated and a flipped archive (refused, nothing left).
func TestBackupRestoreUnderWriteLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // the binary's build included
	defer cancel()
	bin := buildDaemon(t, ctx)
	dir := t.TempDir()
	data, guard1 := filepath.Join(dir, "data"), filepath.Join(dir, "guard1")
	const token = "backup-write-token"
	d, err := startDaemonArgs(ctx, bin, 1, "serve", "--data-dir", data, "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "20ms", "--log-format", "text", "--write-token", token, "--checkpoint-guard-dir", guard1)
	if err != nil {
		t.Fatalf("serve: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
	}
	defer d.kill()

	var mu sync.Mutex
	var acks []adminAck
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for c, log := range []string{"orders", "payments"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; wctx.Err() == nil; n++ {
				var b bytes.Buffer
				for j := range 50 {
					fmt.Fprintf(&b, `{"id":"c%d-%d-%d","payload":{"n":%d,"pad":%q}}`+"\n", c, n, j, n*50+j, strings.Repeat("x", j))
				}
				code, got, err := tokenPost(wctx, d, token, log, b.Bytes())
				if err != nil || code != http.StatusOK {
					if wctx.Err() == nil {
						t.Errorf("POST to %s: %d %v", log, code, err)
					}
					return
				}
				mu.Lock()
				acks = append(acks, got...)
				mu.Unlock()
			}
		}()
	}
	acked := func() int { mu.Lock(); defer mu.Unlock(); return len(acks) }
	waitAcks := func(n int) {
		for acked() < n {
			if ctx.Err() != nil {
				t.Fatalf("writers stalled at %d acknowledged events", acked())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitAcks(3000)

	// The token is needed.
	out := filepath.Join(dir, "b.tar.gz")
	if code, _, errs := runAuditd(t, bin, "backup", "--server", d.url, "--out", out, "--quiet"); code != 1 || !strings.Contains(errs, "write token") {
		t.Errorf("backup without the token: exit %d, want 1 naming the write token\n%s", code, errs)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused backup left %s: %v", out, err)
	}

	mu.Lock()
	before := append([]adminAck(nil), acks...) // acknowledged before the backup began
	mu.Unlock()
	code, stdout, stderr := runAuditd(t, bin, "backup", "--server", d.url, "--out", out, "--token", token)
	if code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "wrote "+out) || !strings.Contains(stdout, "orders at ") || !strings.Contains(stdout, "payments at ") {
		t.Errorf("backup's report: %q", stdout)
	}
	// The daemon went on: its guard copies are ahead of the backup now.
	waitAcks(len(before) + 2000)
	stopWriters()
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // a checkpoint interval or more: the guard signed past the backup
	if err := d.stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}

	// Restored on this host, beside the guard that saw the daemon go on:
	// refused, the directory left as it was (missing).
	refused := filepath.Join(dir, "refused")
	code, _, stderr = runAuditd(t, bin, "restore", "--from", out, "--data-dir", refused, "--checkpoint-guard-dir", guard1)
	if code != 1 || !strings.Contains(stderr, "behind") {
		t.Errorf("restore behind the guard: exit %d, want 1 saying it is behind\n%s", code, stderr)
	}
	if _, err := os.Stat(refused); !os.IsNotExist(err) {
		t.Errorf("a refused restore left %s: %v", refused, err)
	}

	// Unless told: restored for an investigation, with a warning.
	code, _, stderr = runAuditd(t, bin, "restore", "--from", out, "--data-dir", refused, "--checkpoint-guard-dir", guard1, "--allow-behind-guard")
	if code != 0 || !strings.Contains(stderr, "--allow-behind-guard") || !strings.Contains(stderr, "read-only") {
		t.Errorf("restore --allow-behind-guard: exit %d, want 0 with a warning\n%s", code, stderr)
	}

	// Damaged archives are refused whole.
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"truncated": raw[:len(raw)*2/3],
		"flipped":   flipByte(raw, len(raw)/2),
	} {
		p := filepath.Join(dir, name+".tar.gz")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		into := filepath.Join(dir, "into-"+name)
		if code, _, errs := runAuditd(t, bin, "restore", "--from", p, "--data-dir", into, "--checkpoint-guard-dir", filepath.Join(dir, "guard-"+name)); code != 1 {
			t.Errorf("restore of a %s archive: exit %d, want 1\n%s", name, code, errs)
		}
		if _, err := os.Stat(into); !os.IsNotExist(err) {
			t.Errorf("restore of a %s archive left %s: %v", name, into, err)
		}
	}

	// On a new host (a guard of its own): restored, fsck clean.
	restored, guard2 := filepath.Join(dir, "restored"), filepath.Join(dir, "guard2")
	code, stdout, stderr = runAuditd(t, bin, "restore", "--from", out, "--data-dir", restored, "--checkpoint-guard-dir", guard2)
	if code != 0 || !strings.Contains(stdout, "fsck clean") {
		t.Fatalf("restore: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, errs := runAuditd(t, bin, "restore", "--from", out, "--data-dir", restored, "--checkpoint-guard-dir", guard2); code != 2 || !strings.Contains(errs, "not empty") {
		t.Errorf("restore over a non-empty dir: exit %d, want 2\n%s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(restored, "auditd.key")); !os.IsNotExist(err) {
		t.Errorf("the private key was restored: %v", err)
	}
	key, err := os.ReadFile(filepath.Join(data, "auditd.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(restored, "auditd.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := startDaemonArgs(ctx, bin, 2, "serve", "--data-dir", restored, "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "20ms", "--log-format", "text", "--checkpoint-guard-dir", guard2)
	if err != nil {
		t.Fatalf("serve on the restored dir: %v\n%s", err, strings.Join(r.stderr.lines(), "\n"))
	}
	defer r.kill()
	for i, a := range before {
		if i%5 != 0 && i != len(before)-1 {
			continue // a sample, and the last acknowledged
		}
		var e struct {
			ID       string          `json:"id"`
			LeafHash json.RawMessage `json:"leaf_hash"`
		}
		if err := r.getJSON(ctx, fmt.Sprintf("/v1/logs/%s/entries/%d", a.log, a.index), &e); err != nil {
			t.Fatalf("event %s acknowledged before the backup: %v", a.id, err)
		}
		if e.ID != a.id || string(e.LeafHash) != a.leafHash {
			t.Fatalf("%s[%d] in the restored ledger: %s %s, acknowledged %s %s", a.log, a.index, e.ID, e.LeafHash, a.id, a.leafHash)
		}
	}
	if err := r.stop(ctx); err != nil {
		t.Errorf("stop the restored daemon: %v", err)
	}
}

func flipByte(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x40
	return c
}
