package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// TestServeRollback runs the real binary on a data directory whose newest
// Pebble WAL lost its tail after a clean stop (issue 8, defect 2). Before
// the fix serve started silently 10,000 entries behind its last signed
// checkpoint and would sign a fork; now it exits non-zero naming the log
// and the remedy, and with --rollback-read-only it serves the log
// read-only: POST gets 503 read_only, the checkpoint served is an old one,
// /v1/alerts carries the integrity alert. Every checkpoint the daemon ever
// served is checked against an independent recomputation of the tree
// (golang.org/x/mod/sumdb/tlog) from the acknowledged leaf hashes: none is
// a fork.
func TestServeRollback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	dataDir := filepath.Join(t.TempDir(), "data")
	const log, commits, per = "rb", 20, 1000

	d, err := startDaemon(ctx, bin, dataDir, 0)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer d.kill()
	verifierKey, err := d.getText(ctx, "/v1/verifier")
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := note.NewVerifier(strings.TrimSpace(verifierKey))
	if err != nil {
		t.Fatal(err)
	}
	var leaves []tlog.Hash
	served := map[string]bool{} // every checkpoint note the daemon served
	type walMark struct {
		wal  string
		len  int64
		size uint64
	}
	var marks []walMark
	for c := range commits {
		var body bytes.Buffer
		for i := range per {
			fmt.Fprintf(&body, `{"id":"e-%d-%d","payload":{"c":%d,"i":%d}}`+"\n", c, i, c, i)
		}
		code, resp, err := d.postBody(ctx, log, "?wait=checkpoint", body.Bytes())
		if err != nil || code != http.StatusOK {
			t.Fatalf("POST %d: %d %v %.300s", c, code, err, resp)
		}
		var out struct {
			Size    uint64 `json:"size"`
			Entries []struct {
				Index    uint64 `json:"index"`
				LeafHash string `json:"leaf_hash"`
			} `json:"entries"`
			Checkpoint string `json:"checkpoint"`
		}
		if err := json.Unmarshal(resp, &out); err != nil {
			t.Fatal(err)
		}
		for _, e := range out.Entries {
			if e.Index != uint64(len(leaves)) {
				t.Fatalf("entry index %d, want %d", e.Index, len(leaves))
			}
			h, err := base64.StdEncoding.DecodeString(e.LeafHash)
			if err != nil || len(h) != tlog.HashSize {
				t.Fatalf("leaf hash %q: %v", e.LeafHash, err)
			}
			leaves = append(leaves, tlog.Hash(h))
		}
		served[out.Checkpoint] = true
		wal := newestWALFile(t, dataDir)
		fi, err := os.Stat(wal)
		if err != nil {
			t.Fatal(err)
		}
		marks = append(marks, walMark{wal, fi.Size(), out.Size})
	}
	top := marks[len(marks)-1].size
	topNote := getCheckpoint(t, ctx, d, log)
	served[topNote] = true
	if err := d.stop(ctx); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	cpFile := filepath.Join(dataDir, "checkpoints", log)
	if b, err := os.ReadFile(cpFile); err != nil || string(b) != topNote {
		t.Errorf("checkpoint file %q, %v; want the last checkpoint served", b, err)
	}

	// The disk loses the newest WAL's tail: everything after the first
	// commit it holds.
	wal := newestWALFile(t, dataDir)
	k := slices.IndexFunc(marks, func(m walMark) bool { return m.wal == wal })
	if k < 0 || k == len(marks)-1 || marks[len(marks)-1].wal != wal {
		t.Fatalf("the newest WAL %s holds fewer than two commits", wal)
	}
	left := marks[k].size
	if top-left < 5000 {
		t.Fatalf("the truncation loses %d entries; want at least 5,000", top-left)
	}
	if err := os.Truncate(wal, marks[k].len); err != nil {
		t.Fatal(err)
	}
	t.Logf("truncated %s to %d bytes: %d of %d entries left", filepath.Base(wal), marks[k].len, left, top)

	// Refused: serve exits non-zero, naming the log, the sizes and what
	// to do.
	d, err = startDaemon(ctx, bin, dataDir, 1)
	if err == nil {
		// What the fix prevents: serving behind the signed checkpoint,
		// and signing a different checkpoint at the same size.
		defer d.kill()
		t.Errorf("serve started %d entries behind its signed checkpoint", top-left)
		var body bytes.Buffer
		for i := range top - left {
			fmt.Fprintf(&body, `{"id":"new-%d","payload":{}}`+"\n", i)
		}
		_, resp, _ := d.postBody(ctx, log, "?wait=checkpoint", body.Bytes())
		var out struct {
			Checkpoint string `json:"checkpoint"`
		}
		json.Unmarshal(resp, &out)
		if out.Checkpoint != topNote {
			t.Fatalf("signed a fork at size %d:\nbefore: %s\nnow:    %s", top, topNote, out.Checkpoint)
		}
		t.FailNow()
	}
	<-d.exited
	if d.err == nil {
		t.Fatalf("serve exited 0; want a non-zero exit")
	}
	stderr := strings.Join(d.stderr.lines(), "\n")
	for _, want := range []string{"refusing to open", "log " + log, fmt.Sprintf("holds %d entries", left),
		fmt.Sprintf("signed at size %d", top), "Restore the data directory from a backup", "--rollback-read-only"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("serve's output does not say %q:\n%s", want, stderr)
		}
	}
	t.Logf("serve refused (%v):\n%s", d.err, lastLine(stderr))

	// With the opt-in: the log is served read-only.
	d, err = startDaemonArgs(ctx, bin, 2, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "20ms", "--log-format", "text", "--rollback-read-only")
	if err != nil {
		t.Fatalf("start with --rollback-read-only: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
	}
	defer d.kill()
	code, resp, err := d.postBody(ctx, log, "", []byte(`{"id":"after","payload":{}}`))
	if err != nil || code != http.StatusServiceUnavailable || !bytes.Contains(resp, []byte(`"read_only"`)) {
		t.Errorf("POST to the read-only log: %d %v %s; want 503 read_only", code, err, resp)
	}
	code, resp, err = d.postBody(ctx, log, "?wait=checkpoint", []byte(`{"id":"after2","payload":{}}`))
	if err != nil || code != http.StatusServiceUnavailable || !bytes.Contains(resp, []byte(`"read_only"`)) {
		t.Errorf("POST ?wait=checkpoint to the read-only log: %d %v %s; want 503 read_only", code, err, resp)
	}
	cp := getCheckpoint(t, ctx, d, log)
	if !served[cp] {
		t.Errorf("the read-only log serves a checkpoint never served before:\n%s", cp)
	}
	var info struct {
		Size     uint64 `json:"size"`
		ReadOnly string `json:"read_only"`
	}
	if err := d.getJSON(ctx, "/v1/logs/"+log+"/", &info); err != nil || info.Size != left {
		t.Errorf("log size %d (%v), want %d", info.Size, err, left)
	}
	if !strings.Contains(info.ReadOnly, "read-only") {
		t.Errorf("GET /v1/logs/%s: read_only %q, want why the log is read-only", log, info.ReadOnly)
	}
	var alerts struct {
		Alerts []struct {
			ID      string            `json:"id"`
			Kind    string            `json:"kind"`
			State   string            `json:"state"`
			Subject string            `json:"subject"`
			Summary string            `json:"summary"`
			Labels  map[string]string `json:"labels"`
		} `json:"alerts"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := d.getJSON(ctx, "/v1/alerts?kind=integrity", &alerts); err != nil {
			t.Fatal(err)
		}
		if len(alerts.Alerts) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(alerts.Alerts) != 1 || alerts.Alerts[0].ID != "integrity/"+log+"/rollback" || alerts.Alerts[0].State != "firing" ||
		alerts.Alerts[0].Subject != log || !strings.Contains(alerts.Alerts[0].Summary, fmt.Sprintf("signed at size %d", top)) {
		t.Errorf("integrity alerts: %+v; want one firing integrity/%s/rollback", alerts.Alerts, log)
	}
	// Other logs take appends as usual.
	if code, resp, err := d.postBody(ctx, "other", "?wait=checkpoint", []byte(`{"id":"o","payload":{}}`)); err != nil || code != http.StatusOK {
		t.Errorf("POST to another log: %d %v %s", code, err, resp)
	}
	// Every checkpoint stored is one served before the loss.
	var list []struct {
		Note string `json:"note"`
	}
	if err := d.getJSON(ctx, "/v1/logs/"+log+"/checkpoints?limit=1000", &list); err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		served[c.Note] = true // checked below with the rest
	}
	if err := d.stop(ctx); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if b, err := os.ReadFile(cpFile); err != nil || string(b) != topNote {
		t.Fatalf("checkpoint file changed: %q, %v", b, err)
	}
	// Refused again without the opt-in.
	d, err = startDaemon(ctx, bin, dataDir, 3)
	if err == nil {
		t.Fatal("serve started without the opt-in after a read-only run")
	}

	// A checkpoint file whose log the database does not hold (here a copy
	// of rb's, so it does not verify as ghost's either), with the log
	// listed in the configuration: read-only, serve still starts, the log
	// stays absent and cannot be created.
	b, _ := os.ReadFile(cpFile)
	if err := os.WriteFile(filepath.Join(dataDir, "checkpoints", "ghost"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "auditd.yaml")
	if err := os.WriteFile(cfgFile, []byte("logs: [ghost, rb]\nrollback_read_only: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err = startDaemonArgs(ctx, bin, 4, "serve", "--config", cfgFile, "--data-dir", dataDir, "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "20ms", "--log-format", "text")
	if err != nil {
		t.Fatalf("start with rollback_read_only in the config and an orphan file: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
	}
	defer d.kill()
	if code, resp, err := d.postBody(ctx, "ghost", "", []byte(`{"id":"g","payload":{}}`)); err != nil || code != http.StatusServiceUnavailable || !bytes.Contains(resp, []byte(`"read_only"`)) {
		t.Errorf("POST to the orphan log: %d %v %s; want 503 read_only", code, err, resp)
	}
	if code, _, err := d.get(ctx, "/v1/logs/ghost/"); err != nil || code != http.StatusNotFound {
		t.Errorf("GET the orphan log: %d %v; want 404", code, err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if err := d.getJSON(ctx, "/v1/alerts?kind=integrity&subject=ghost", &alerts); err != nil {
			t.Fatal(err)
		}
		if len(alerts.Alerts) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(alerts.Alerts) != 1 || alerts.Alerts[0].ID != "integrity/ghost/checkpoint_bad" {
		t.Errorf("alerts about ghost: %+v; want integrity/ghost/checkpoint_bad", alerts.Alerts)
	}
	if err := d.stop(ctx); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}

	// No checkpoint ever served is a fork: each verifies and its root is
	// the independent tree's at its size.
	checkNoFork(t, verifier, verifier.Name()+"/"+log, served, leaves)
}

func lastLine(s string) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return ls[len(ls)-1]
}

// checkNoFork verifies each signed checkpoint note against the verifier and
// the root of the tree over leaves at its size, computed with tlog.
func checkNoFork(t *testing.T, v note.Verifier, origin string, notes map[string]bool, leaves []tlog.Hash) {
	t.Helper()
	var stored []tlog.Hash
	hr := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, lh := range leaves {
		hs, err := tlog.StoredHashesForRecordHash(int64(i), lh, hr)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
	}
	for n := range notes {
		msg, err := note.Open([]byte(n), note.VerifierList(v))
		if err != nil {
			t.Errorf("served checkpoint does not verify: %v\n%s", err, n)
			continue
		}
		o, size, root, err := parseCheckpointText(msg.Text)
		if err != nil || o != origin || size > uint64(len(leaves)) {
			t.Errorf("served checkpoint %q: origin %q size %d: %v", msg.Text, o, size, err)
			continue
		}
		want, err := tlog.TreeHash(int64(size), hr)
		if err != nil {
			t.Fatal(err)
		}
		if root != want {
			t.Errorf("served checkpoint at size %d has root %v; the tree of the acknowledged entries has %v: a fork", size, root, want)
		}
	}
	t.Logf("%d checkpoints served, none a fork", len(notes))
}

func getCheckpoint(t *testing.T, ctx context.Context, d *daemon, log string) string {
	t.Helper()
	cp, err := d.getText(ctx, "/v1/logs/"+log+"/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// postBody POSTs an NDJSON body of events to log, with query (e.g.
// "?wait=checkpoint").
func (d *daemon) postBody(ctx context.Context, log, query string, body []byte) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, d.url+"/v1/logs/"+log+"/entries"+query, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// newestWALFile returns Pebble's WAL file (NNNNNN.log) with the highest
// number in dir.
func newestWALFile(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wals []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") && !e.IsDir() {
			wals = append(wals, e.Name())
		}
	}
	if len(wals) == 0 {
		t.Fatalf("no WAL in %s", dir)
	}
	slices.Sort(wals)
	return filepath.Join(dir, wals[len(wals)-1])
}

// TestServeRefusesRestoredDataDir (issue 26, item 3): restoring a whole
// data directory from an older copy rolls its checkpoint files back with
// it, so before the fix serve started on it, behind checkpoints it had
// served, and would sign a fork. The guard copies outside the data dir
// (by default under $XDG_STATE_HOME/auditd/guard, keyed by the signing
// key) catch it: serve refuses, naming the log and the guard copy, or
// with --rollback-read-only serves the log read-only; a copy restored to
// another path is refused too, and fsck reports the restored copy. Only
// with the guard off does serve start on it.
func TestServeRefusesRestoredDataDir(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state) // the default guard dir of this test's daemons
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	root := t.TempDir()
	dataDir, backup := filepath.Join(root, "data"), filepath.Join(root, "backup")
	const log = "rs"
	post := func(d *daemon, from, n int) string {
		t.Helper()
		var body bytes.Buffer
		for i := from; i < from+n; i++ {
			fmt.Fprintf(&body, `{"id":"e-%d","payload":{"i":%d}}`+"\n", i, i)
		}
		code, resp, err := d.postBody(ctx, log, "?wait=checkpoint", body.Bytes())
		if err != nil || code != http.StatusOK {
			t.Fatalf("POST: %d %v %.300s", code, err, resp)
		}
		return getCheckpoint(t, ctx, d, log)
	}

	d, err := startDaemon(ctx, bin, dataDir, 0)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer d.kill()
	oldNote := post(d, 0, 1500)
	if err := d.stop(ctx); err != nil {
		t.Fatal(err)
	}
	cpA(t, dataDir, backup) // the backup
	d, err = startDaemon(ctx, bin, dataDir, 1)
	if err != nil {
		t.Fatalf("start again: %v", err)
	}
	defer d.kill()
	post(d, 1500, 500)
	topNote := post(d, 2000, 700) // two more checkpoints, the last at 2,700
	if err := d.stop(ctx); err != nil {
		t.Fatal(err)
	}
	guards, _ := filepath.Glob(filepath.Join(state, "auditd", "guard", "*", log))
	if len(guards) != 1 {
		t.Errorf("guard copies %q; want one, under %s/auditd/guard/<key>/%s", guards, state, log)
	} else if b, err := os.ReadFile(guards[0]); err != nil || string(b) != topNote {
		t.Errorf("guard copy %s: %q, %v; want the last checkpoint served", guards[0], b, err)
	}

	// The whole data dir restored from the backup, checkpoint files and all.
	restore := func(to string) {
		t.Helper()
		if err := os.RemoveAll(to); err != nil {
			t.Fatal(err)
		}
		cpA(t, backup, to)
	}
	restore(dataDir)
	refused := func(run int, dir string, extra ...string) {
		t.Helper()
		d, err := startDaemonArgs(ctx, bin, run, append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0",
			"--checkpoint-interval", "20ms", "--log-format", "text"}, extra...)...)
		if err == nil {
			defer d.kill()
			t.Errorf("serve started on a data dir restored from before its last checkpoints (%s)", dir)
			if cp := getCheckpoint(t, ctx, d, log); cp != oldNote {
				t.Errorf("serves a checkpoint the backup does not hold:\n%s", cp)
			}
			return
		}
		<-d.exited
		stderr := strings.Join(d.stderr.lines(), "\n")
		for _, want := range []string{"refusing to open", "log " + log, "holds 1500 entries", "signed at size 2700", "guard copy " + filepath.Join(state, "auditd", "guard")} {
			if !strings.Contains(stderr, want) {
				t.Errorf("serve's refusal does not say %q:\n%s", want, stderr)
			}
		}
		t.Logf("serve on %s refused: %s", dir, lastLine(stderr))
	}
	refused(2, dataDir)
	// Restored to another path: the guard is the key's, not the path's.
	elsewhere := filepath.Join(t.TempDir(), "restored")
	restore(elsewhere)
	refused(3, elsewhere)

	// fsck on the restored copy says so, and so with the default guard.
	code, out, stderr := runFsckBin(t, bin, "--data-dir", dataDir, "--json", "--quiet")
	found := false
	if code == 1 {
		for _, f := range parseFsck(t, out).Findings {
			if f.Check == "open" && f.Log == log && f.Kind == "rollback" && strings.Contains(f.Detail, "guard copy") {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("fsck of the restored copy: exit %d, want 1 with a rollback of %s by its guard copy\n%s\n%s", code, log, out, stderr)
	}
	_, text, _ := runFsckBin(t, bin, "--data-dir", dataDir, "--quiet")
	t.Logf("fsck of the restored copy:\n%s", text)

	// Read-only as it is, on request: the old checkpoint served, no appends.
	d, err = startDaemonArgs(ctx, bin, 4, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "20ms", "--log-format", "text", "--rollback-read-only")
	if err != nil {
		t.Fatalf("start with --rollback-read-only: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
	}
	defer d.kill()
	if code, resp, err := d.postBody(ctx, log, "", []byte(`{"id":"after","payload":{}}`)); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("POST to the restored log: %d %v %s; want 503 read_only", code, err, resp)
	}
	if cp := getCheckpoint(t, ctx, d, log); cp != oldNote {
		t.Errorf("the read-only log serves\n%s\nwant the backup's checkpoint\n%s", cp, oldNote)
	}
	if err := d.stop(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(guards[0]); err != nil || string(b) != topNote {
		t.Errorf("the guard copy changed: %q, %v", b, err)
	}

	// Without the guard only a witness can tell: serve starts.
	d, err = startDaemonArgs(ctx, bin, 5, "serve", "--data-dir", elsewhere, "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "20ms", "--log-format", "text", "--checkpoint-guard-dir", "off")
	if err != nil {
		t.Fatalf("start with the guard off: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
	}
	if err := d.stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// cpA copies the directory from to to as an operator would, with cp -a.
func cpA(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, out)
	}
}
