package keyfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("PRIVATE+KEY+x\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(key, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{key, link} { // a symlink to a key is followed (Kubernetes mounts secrets so)
		b, perm, err := Read("key file", p)
		if err != nil || string(b) != "PRIVATE+KEY+x\n" || perm != 0o640 {
			t.Errorf("Read(%s) = %q, %04o, %v", p, b, perm, err)
		}
	}
	max := filepath.Join(dir, "max")
	if err := os.WriteFile(max, make([]byte, MaxSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _, err := Read("key file", max); err != nil || len(b) != MaxSize {
		t.Errorf("a file of MaxSize bytes: %d bytes, %v", len(b), err)
	}
	over := filepath.Join(dir, "over")
	if err := os.WriteFile(over, make([]byte, MaxSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{over, "token file " + over + " is larger than 64 KiB"},
		{fifo, "token file " + fifo + " is not a regular file (a named pipe)"},
		{"/dev/zero", "token file /dev/zero is not a regular file (a character device)"},
		{dir, "token file " + dir + " is not a regular file (a directory)"},
		{filepath.Join(dir, "missing"), "token file: open " + filepath.Join(dir, "missing")},
	} {
		if _, _, err := Read("token file", tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Read(%s): %v, want %q", tc.path, err, tc.want)
		}
	}
	if _, _, err := Read("key file", filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestCheckPrivate(t *testing.T) {
	for _, perm := range []fs.FileMode{0o600, 0o400, 0o700} {
		if err := CheckPrivate("key file", "/k", perm); err != nil {
			t.Errorf("%04o: %v", perm, err)
		}
	}
	for _, perm := range []fs.FileMode{0o644, 0o640, 0o604, 0o660, 0o602} {
		err := CheckPrivate("witness key file", "/k", perm)
		if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "witness key file /k has mode ") || !strings.Contains(err.Error(), "chmod 600 /k") {
			t.Errorf("%04o: %v", perm, err)
		}
	}
}
