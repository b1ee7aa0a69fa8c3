package durable

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "cp")
	if err := WriteFile(p, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two, longer\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "two, longer\n" {
		t.Fatalf("content %q, %v", got, err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if err := WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); len(got) != 0 {
		t.Fatalf("empty write left %q", got)
	}
	assertNoTemp(t, dir)
}

// A rename that fails (the target is a non-empty directory) leaves the
// target as it was and no temporary file.
func TestWriteFileFailureLeavesNoTrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "cp")
	if err := os.MkdirAll(filepath.Join(p, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o600); err == nil {
		t.Fatal("WriteFile over a non-empty directory succeeded")
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		t.Fatalf("target changed: %v %v", fi, err)
	}
	assertNoTemp(t, dir)
	if err := WriteFile(filepath.Join(dir, "missing", "cp"), []byte("x"), 0o600); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("write into a missing directory: %v, want ErrNotExist", err)
	}
}

// Readers racing a writer see one whole version or the other, never a mix
// or a short file.
func TestWriteFileReadersSeeWholeVersions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "cp")
	a, b := bytes.Repeat([]byte("a"), 256<<10), bytes.Repeat([]byte("b"), 100<<10)
	if err := WriteFile(p, a, 0o600); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				got, err := os.ReadFile(p)
				if err != nil {
					t.Errorf("read: %v", err)
					return
				}
				if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
					t.Errorf("read %d bytes that are neither version", len(got))
					return
				}
				reads.Add(1)
			}
		}()
	}
	for i := range 60 {
		v := a
		if i%2 == 0 {
			v = b
		}
		if err := WriteFile(p, v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if reads.Load() == 0 {
		t.Fatal("no reads raced the writes")
	}
	assertNoTemp(t, dir)
}

// A process killed (SIGKILL) while it rewrites the file in a loop leaves a
// whole version; RemoveTemp removes the temporary file it may leave, and
// only that.
func TestWriteFileKilled(t *testing.T) {
	t.Parallel()
	if dir := os.Getenv("DURABLE_TEST_CHILD_DIR"); dir != "" {
		p := filepath.Join(dir, "cp")
		for i := 0; ; i++ {
			if err := WriteFile(p, version(i%2), 0o600); err != nil {
				os.Exit(3)
			}
		}
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "cp")
	if err := WriteFile(p, version(1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	leftovers := 0
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriteFileKilled$")
		cmd.Env = append(os.Environ(), "DURABLE_TEST_CHILD_DIR="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(50+round*37) * time.Millisecond)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(got, version(0)) && !bytes.Equal(got, version(1)) {
			t.Fatalf("round %d: file holds %d bytes that are neither version", round, len(got))
		}
		removed, err := RemoveTemp(dir)
		if err != nil {
			t.Fatal(err)
		}
		leftovers += len(removed)
		assertNoTemp(t, dir)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "other")); err != nil || string(got) != "keep" {
		t.Fatalf("RemoveTemp touched another file: %q %v", got, err)
	}
	t.Logf("%d temporary files left by kills, all removed", leftovers)
}

func TestRemoveTempOnlyRemovesTemp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, n := range []string{".tmp-cp-123", ".tmp-x-", "cp", "tmp-cp", ".other"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveTemp(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Fatalf("removed %v, want the two .tmp- files", removed)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{".other", "cp", "tmp-cp"}) {
		t.Fatalf("left %v", left)
	}
}

func TestMkdirAll(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	d := filepath.Join(base, "a", "b", "c")
	if err := MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
		t.Fatalf("%v %v", fi, err)
	}
	if err := MkdirAll(d, 0o700); err != nil {
		t.Fatalf("existing: %v", err)
	}
	f := filepath.Join(base, "file")
	os.WriteFile(f, nil, 0o600)
	if err := MkdirAll(f, 0o700); err == nil {
		t.Fatal("MkdirAll over a file succeeded")
	}
}

func version(i int) []byte {
	return bytes.Repeat([]byte{byte('0' + i)}, 64<<10+i*1000)
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if IsTemp(e.Name()) {
			t.Fatalf("temporary file %s left in %s", e.Name(), dir)
		}
	}
}

// BenchmarkWriteFile measures one replacement of a checkpoint-sized file
// (two fsyncs: the file and its directory).
func BenchmarkWriteFile(b *testing.B) {
	p := filepath.Join(b.TempDir(), "cp")
	data := bytes.Repeat([]byte("c"), 300)
	for b.Loop() {
		if err := WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}
