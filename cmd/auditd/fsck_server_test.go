package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// TestFsckServer runs the fsck binary with --server against a real auditd
// API on loopback (log "pay" of 3,000 entries, signed every 1,000; log
// "other" of 300): clean, it exits 0 having read every entry. Through a
// proxy that rewrites one entry's payload, and with it the leaf and leaf
// hash it serves so that the entry is self-consistent, only the tree can
// tell: exit 1 and the one finding, by log, entry and tile. A server whose
// checkpoints are not signed by the key given is not checked at all (exit
// 2), and neither is one given with a data dir.
func TestFsckServer(t *testing.T) {
	ctx := context.Background()
	bin := buildDaemon(t, ctx)
	dir := filepath.Join(t.TempDir(), "data")
	k, _, err := loadOrCreateKey(filepath.Join(dir, "auditd.key"), "fsck.test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(dir, k.signer, k.verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)), ledger.WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, lg := range []struct {
		name         string
		total, batch int
	}{{"other", 300, 300}, {"pay", 3000, 1000}} {
		l, err := st.CreateLog(lg.name)
		if err != nil {
			t.Fatal(err)
		}
		for next := 0; next < lg.total; next += lg.batch {
			es := make([]ledger.Entry, lg.batch)
			for j := range es {
				es[j] = ledger.Entry{ID: fmt.Sprintf("%s-%d", lg.name, next+j), Payload: []byte(fmt.Sprintf("p-%d\x00", next+j))}
			}
			if _, err := l.Append(ctx, es); err != nil {
				t.Fatal(err)
			}
			if _, err := l.WaitCheckpoint(ctx, uint64(next+lg.batch)); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv := httptest.NewServer(api.New(st, k.vkey, api.Options{}))
	defer srv.Close()

	fsck := func(url, vkey string) (int, fsckJSON, string) {
		t.Helper()
		code, out, stderr := runFsckBin(t, bin, "--server", url, "--verifier-key", vkey, "--json", "--quiet")
		var res fsckJSON
		if code != fsckError {
			res = parseFsck(t, out)
		}
		return code, res, stderr
	}
	if code, res, stderr := fsck(srv.URL, k.vkey); code != fsckClean || len(res.Findings) != 0 || res.Entries != 3300 {
		t.Fatalf("clean server: exit %d, %d entries, findings %+v\n%s", code, res.Entries, res.Findings, stderr)
	}

	const bad = 1234
	proxy := httptest.NewServer(rewriteEntry(t, srv.URL, "pay", bad))
	defer proxy.Close()
	code, res, stderr := fsck(proxy.URL, k.vkey)
	var got []string
	for _, f := range res.Findings {
		got = append(got, describeFsck(f.Check, f.Log, f.Kind, f.Index, f.Tile, f.Checkpoint))
	}
	want := []string{describeFsck("scrub", "pay", ledger.IntegrityLeafMismatch, ptr(uint64(bad)), fmt.Sprintf("0/%d", bad/merkle.TileWidth), nil)}
	if code != fsckFindings || !slices.Equal(got, want) {
		t.Fatalf("tampering server: exit %d, findings %q, want %q\n%s", code, got, want, stderr)
	}

	other, _, err := loadOrCreateKey(filepath.Join(t.TempDir(), "other.key"), "fsck.test")
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := fsck(srv.URL, other.vkey); code != fsckError || !strings.Contains(stderr, "checkpoint") {
		t.Errorf("another key: exit %d, want %d, and a checkpoint error\n%s", code, fsckError, stderr)
	}
	if code, _, _ := runFsckBin(t, bin, "--server", srv.URL, "--verifier-key", k.vkey, "--data-dir", dir); code != fsckError {
		t.Errorf("--server with --data-dir: exit %d, want %d", code, fsckError)
	}
}

func ptr(v uint64) *uint64 { return &v }

// rewriteEntry forwards to backend and, in every entries page of log,
// appends a byte to entry index's payload and rewrites the payload hash,
// leaf and leaf hash served with it to match.
func rewriteEntry(t *testing.T, backend, log string, index uint64) http.Handler {
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, target.String()+r.URL.RequestURI(), r.Body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if strings.HasSuffix(r.URL.Path, "/"+log+"/entries") && resp.StatusCode == http.StatusOK {
			var page struct {
				Entries []client.Entry `json:"entries"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				t.Errorf("proxy: %v", err)
			}
			for i := range page.Entries {
				if e := &page.Entries[i]; e.Index == index {
					tamper(t, e)
				}
			}
			body, _ = json.Marshal(page)
		}
		for k, v := range resp.Header {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	})
}

// tamper changes e's payload and makes the rest of e agree with it.
func tamper(t *testing.T, e *client.Entry) {
	p, _ := base64.StdEncoding.DecodeString(*e.PayloadBase64)
	p = append(bytes.Clone(p), '!')
	s := base64.StdEncoding.EncodeToString(p)
	e.PayloadBase64 = &s
	ph := sha256.Sum256(p)
	e.PayloadSHA256 = base64.StdEncoding.EncodeToString(ph[:])
	lb, err := base64.StdEncoding.DecodeString(e.Leaf)
	if err != nil {
		t.Errorf("proxy: leaf: %v", err)
	}
	var l merkle.Leaf
	if err := l.UnmarshalBinary(lb); err != nil {
		t.Errorf("proxy: leaf: %v", err)
	}
	l.PayloadSHA256 = ph
	nb, _ := l.MarshalBinary()
	e.Leaf = base64.StdEncoding.EncodeToString(nb)
	e.LeafHash = merkle.LeafHash(nb)
}
