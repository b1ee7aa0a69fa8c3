package main

import (
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/auditd/auditd/witness"
)

// witnessedLog is a log of another auditd (a key of its own) for cfg to
// witness, so that serve loads the witness key.
func witnessedLog(t *testing.T) WitnessedLog {
	t.Helper()
	k, _, err := loadOrCreateKey(filepath.Join(t.TempDir(), "other.key"), "other.example")
	if err != nil {
		t.Fatal(err)
	}
	return WitnessedLog{Origin: "other.example/orders", VerifierKey: k.vkey}
}

// Issue 28 item 8: a witness key that group or others can read is refused
// as the signing key is, with the mode and the chmod that fixes it; 0600
// starts; --allow-insecure-key-file starts with a loud error.
func TestWitnessKeyMode(t *testing.T) {
	w := newWitnessInstance(t)
	w.cfg.Witness.Logs = []WitnessedLog{witnessedLog(t)}
	key := filepath.Join(w.cfg.DataDir, "witness.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := tryServe(t, w.cfg, nil)
	want := "witness key file " + key + " has mode 0644"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "chmod 600 "+key) {
		t.Fatalf("serve with a witness key of mode 0644: %v\nwant an error with %q and chmod 600", err, want)
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tryServe(t, w.cfg, nil); err != nil {
		t.Fatalf("serve with a witness key of mode 0600: %v", err)
	}
	insecure := newWitnessInstance(t)
	insecure.cfg.Witness.Logs = []WitnessedLog{witnessedLog(t)}
	if err := os.Chmod(filepath.Join(insecure.cfg.DataDir, "witness.key"), 0o640); err != nil {
		t.Fatal(err)
	}
	insecure.cfg.AllowInsecureKeyFile = true
	var logs syncBuffer
	if _, err := tryServe(t, insecure.cfg, &logs); err != nil {
		t.Fatalf("serve --allow-insecure-key-file: %v", err)
	}
	if !strings.Contains(logs.String(), `level=ERROR msg="INSECURE: the witness key`) {
		t.Errorf("no loud error in the log:\n%s", logs.String())
	}
}

// Issue 28 item 8: the witness key must not be a checkpoint key of a log
// it would vouch for: this auditd's own (the same file, or the same
// Ed25519 key in cosignature/v1 form), or a witnessed log's; nor may a
// witness this auditd submits to verify with its checkpoint key.
func TestWitnessKeyNotCheckpointKey(t *testing.T) {
	own := func(t *testing.T) *witnessInstance {
		w := newWitnessInstance(t)
		w.cfg.Witness.Logs = []WitnessedLog{witnessedLog(t)}
		return w
	}
	skeyOf := func(t *testing.T, path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	t.Run("same file", func(t *testing.T) {
		w := own(t)
		w.cfg.Witness.KeyFile = w.cfg.KeyFile
		_, err := tryServe(t, w.cfg, nil)
		if err == nil || !strings.Contains(err.Error(), "is this auditd's checkpoint signing key") || !strings.Contains(err.Error(), "independent") {
			t.Fatalf("witness key = checkpoint key file: %v, want a refusal saying a witness must be independent", err)
		}
	})
	t.Run("same key, cosignature form", func(t *testing.T) {
		w := own(t)
		// The checkpoint key's seed as a cosignature/v1 key of another name.
		parts := strings.SplitN(skeyOf(t, w.cfg.KeyFile), "+", 5)
		raw, err := base64.StdEncoding.DecodeString(parts[4])
		if err != nil {
			t.Fatal(err)
		}
		raw[0] = witness.AlgCosignatureV1
		path := filepath.Join(t.TempDir(), "witness.key")
		if err := os.WriteFile(path, []byte("PRIVATE+KEY+renamed.example+00000000+"+base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		w.cfg.Witness.KeyFile = path
		_, err = tryServe(t, w.cfg, nil)
		if err == nil || !strings.Contains(err.Error(), "is this auditd's checkpoint signing key") {
			t.Fatalf("witness key = checkpoint key renamed: %v, want a refusal", err)
		}
	})
	t.Run("a witnessed log's key", func(t *testing.T) {
		w := own(t)
		other := filepath.Join(t.TempDir(), "other.key")
		k, _, err := loadOrCreateKey(other, "other.example")
		if err != nil {
			t.Fatal(err)
		}
		w.cfg.Witness.KeyFile = other
		w.cfg.Witness.Logs = []WitnessedLog{{Origin: "other.example/orders", VerifierKey: k.vkey}}
		_, err = tryServe(t, w.cfg, nil)
		if err == nil || !strings.Contains(err.Error(), "witness.logs[0]") || !strings.Contains(err.Error(), "independent") {
			t.Fatalf("witness key = witnessed log's key: %v, want a refusal naming witness.logs[0]", err)
		}
	})
	t.Run("a witness with this auditd's key", func(t *testing.T) {
		w := newWitnessInstance(t)
		c, err := witness.ParseKey(skeyOf(t, w.cfg.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		w.cfg.Witness.Witnesses = []WitnessEndpoint{{URL: "http://127.0.0.1:1", VerifierKey: c.VerifierKey()}}
		_, err = tryServe(t, w.cfg, nil)
		if err == nil || !strings.Contains(err.Error(), "witness.witnesses[0]") || !strings.Contains(err.Error(), "independent") {
			t.Fatalf("witness verifying with this auditd's checkpoint key: %v, want a refusal", err)
		}
	})
}

// Issue 28 item 8: every key and token file auditd reads must be a small
// regular file: /dev/zero (read without bound before), a FIFO (waited on
// forever) and a 10 MiB file are refused at once, with an error naming
// the file and why. Each read runs under a deadline so that a reader that
// hangs fails the test instead of hanging it.
func TestKeyFilesSmallRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Unblock a reader waiting in open (before the fix).
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	big := filepath.Join(dir, "big")
	f, err := os.OpenFile(big, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(10 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()

	discard := slog.New(slog.DiscardHandler)
	readers := map[string]func(path string) error{
		"signing key": func(p string) error { _, _, err := openSigningKey(p, "x.example", discard); return err },
		"witness key": func(p string) error { _, err := loadOrCreateWitnessKey(p, "x.example/witness"); return err },
		"write token": func(p string) error { c := Config{WriteTokenFile: p}; return c.readTokenFiles() },
		"read token":  func(p string) error { c := Config{ReadTokenFile: p}; return c.readTokenFiles() },
		"peer key": func(p string) error {
			_, err := PeersConfig{List: []PeerConfig{{URL: "http://127.0.0.1:1", KeyFile: p}}}.peers(nil)
			return err
		},
		"verifier key":      func(p string) error { _, err := verifierKeyArg("@"+p, ""); return err },
		"fsck signing key":  func(p string) error { _, err := fsckVerifier(dir, p, ""); return err },
		"fsck verifier key": func(p string) error { _, err := fsckVerifier(dir, "", "@"+p); return err },
	}
	// /dev/zero last: a reader that reads it without bound goes on
	// allocating after the test gave up on it.
	for _, tc := range []struct{ path, want string }{
		{fifo, fifo + " is not a regular file (a named pipe)"},
		{big, big + " is larger than 64 KiB"},
		{"/dev/zero", "/dev/zero is not a regular file (a character device)"},
	} {
	readers:
		for name, read := range readers {
			done := make(chan error, 1)
			go func() { done <- read(tc.path) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s %s: %v, want an error with %q", name, tc.path, err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("%s %s: still reading after 5s", name, tc.path)
				break readers // the next file: this one hangs
			}
		}
	}
}
