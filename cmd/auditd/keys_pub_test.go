package main

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyPubRewritten: a .pub beside a valid key that is missing, empty
// (what a crash right after writing it left before it was synced) or not
// the key's verifier key is rewritten from the private key when the key is
// next loaded; the private key is left as it was.
func TestKeyPubRewritten(t *testing.T) {
	_, otherVKey, err := generateNoteKey("other.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		pub    string
		remove bool // no .pub at all
	}{
		{"missing", "", true},
		{"empty", "", false},
		{"blank", " \n\n", false},
		{"another key", otherVKey + "\n", false},
		{"garbage", "not a key\n", false},
		{"truncated", "keys.test+", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "auditd.key")
			if err := writeNewKey(path, "keys.test"); err != nil {
				t.Fatal(err)
			}
			skey, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.remove {
				err = os.Remove(path + ".pub")
			} else {
				err = os.WriteFile(path+".pub", []byte(tc.pub), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			k, created, err := loadOrCreateKey(path, "keys.test")
			if err != nil || created {
				t.Fatalf("loadOrCreateKey = created %v, %v", created, err)
			}
			if b, err := os.ReadFile(path + ".pub"); err != nil || string(b) != k.vkey+"\n" {
				t.Errorf(".pub holds %q, %v; want %q", b, err, k.vkey+"\n")
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, skey) {
				t.Errorf("the private key changed")
			}
		})
	}
}

// TestKeyPubRewriteLogged: openSigningKey logs the rewrite and why, logs
// nothing when the .pub is right, and a .pub it cannot fix (here a
// directory) is a warning, not a failed start.
func TestKeyPubRewriteLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auditd.key")
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	k, created, err := openSigningKey(path, "keys.test", logger)
	if err != nil || !created {
		t.Fatalf("openSigningKey = created %v, %v", created, err)
	}
	if logs.Len() != 0 {
		t.Errorf("a new key logged %q", logs.String())
	}
	if err := os.WriteFile(path+".pub", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openSigningKey(path, "keys.test", logger); err != nil {
		t.Fatal(err)
	}
	if s := logs.String(); !strings.Contains(s, "rewrote the verifier key file") || !strings.Contains(s, "reason=empty") || !strings.Contains(s, k.vkey) {
		t.Errorf("log %q does not say the empty .pub was rewritten", s)
	}
	logs.Reset()
	if _, _, err := openSigningKey(path, "keys.test", logger); err != nil || logs.Len() != 0 {
		t.Errorf("a right .pub: %v, logged %q", err, logs.String())
	}
	if err := os.Remove(path + ".pub"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path+".pub", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openSigningKey(path, "keys.test", logger); err != nil {
		t.Errorf("a .pub that cannot be fixed stopped the load: %v", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("no warning for a .pub that cannot be fixed: %q", logs.String())
	}
}

// TestWriteKeyFiles: the key is 0600, the .pub 0644 whatever the umask
// (a public key; serve runs under umask 077), no temporary file is left,
// and an existing key is never replaced.
func TestWriteKeyFiles(t *testing.T) {
	defer umask(umask(0o022)) // serve sets 077 for the whole process
	dir := filepath.Join(t.TempDir(), "new", "dir")
	path := filepath.Join(dir, "auditd.key")
	skey, vkey, err := generateNoteKey("keys.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeKeyFiles(path, skey, vkey); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]struct {
		data string
		mode fs.FileMode
	}{"auditd.key": {skey + "\n", 0o600}, "auditd.key.pub": {vkey + "\n", 0o644}} {
		fi, err := os.Stat(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, file))
		if string(b) != want.data || fi.Mode().Perm() != want.mode {
			t.Errorf("%s: %q mode %04o, want %q mode %04o", file, b, fi.Mode().Perm(), want.data, want.mode)
		}
	}
	skey2, vkey2, err := generateNoteKey("keys.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeKeyFiles(path, skey2, vkey2); !errors.Is(err, fs.ErrExist) {
		t.Errorf("writing over an existing key: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != skey+"\n" {
		t.Errorf("the existing key was replaced")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files %v, want the key and its .pub", names)
	}

	umask(0o077)
	private := filepath.Join(t.TempDir(), "auditd.key")
	if err := writeKeyFiles(private, skey, vkey); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(private + ".pub"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openSigningKey(private, "keys.test", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(private + ".pub"); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o644 {
		t.Errorf("under umask 077 the rewritten .pub has mode %04o, want 0644", fi.Mode().Perm())
	}
}
