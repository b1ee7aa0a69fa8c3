package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// runAuditd runs the auditd binary with args and returns its exit code,
// stdout and stderr.
func runAuditd(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("run auditd %s: %v", args[0], err)
	return 0, "", ""
}

// testRepairIndexCommand (run by TestFsck, on a copy of its store, with
// its binary) deletes a bucket of the ingested id index chunk of a stopped
// daemon's log, as a lost or damaged table would: fsck reports
// index_mismatch; repair-index --dry-run names the chunk and writes
// nothing; repair-index rebuilds it, after which fsck is clean and a
// second repair finds nothing to do. Without --data-dir it is a usage
// error.
func testRepairIndexCommand(t *testing.T, bin, clean string) {
	dir := copyStore(t, clean)
	editStore(t, dir, "pay", func(db *pebble.DB, id uint32) {
		// The packed id index bucket 0x42 of chunk 0: i, log, chunk, bucket.
		k := append(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{'i'}, id), 0), 0x42)
		if _, closer, err := db.Get(k); err != nil {
			t.Fatalf("bucket %x: %v", k, err)
		} else {
			closer.Close()
		}
		if err := db.Delete(k, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	})
	fsck := func() (int, []string) {
		t.Helper()
		code, out, stderr := runFsckBin(t, bin, "--data-dir", dir, "--json", "--quiet")
		var got []string
		for _, f := range parseFsck(t, out).Findings {
			got = append(got, describeFsck(f.Check, f.Log, f.Kind, f.Index, f.Tile, f.Checkpoint))
		}
		if code == 2 {
			t.Fatalf("fsck could not run: %s", stderr)
		}
		return code, got
	}
	if code, got := fsck(); code != 1 || len(got) != 1 || !strings.HasPrefix(got[0], "scrub pay index_mismatch") {
		t.Fatalf("fsck of the damaged store: exit %d, findings %q; want one index_mismatch of pay", code, got)
	}

	code, out, stderr := runAuditd(t, bin, "repair-index", "--data-dir", dir, "--dry-run")
	if code != 1 || !strings.Contains(out, "pay: id index chunk 0: differs (dry run: not rebuilt); it had: id index chunk 0 (packed)") ||
		!strings.Contains(out, "other: every index chunk matches its entries") {
		t.Fatalf("repair-index --dry-run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if code, got := fsck(); code != 1 || len(got) != 1 {
		t.Fatalf("fsck after the dry run: exit %d, findings %q; want the index_mismatch still there", code, got)
	}

	code, out, stderr = runAuditd(t, bin, "repair-index", "--data-dir", dir, "--log", "pay")
	if code != 0 || !strings.Contains(out, "pay: id index chunk 0: rebuilt; it had: ") || strings.Contains(out, "other:") {
		t.Fatalf("repair-index --log pay: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "pay: 65536/65536 entries read") {
		t.Errorf("repair-index printed no progress: stderr:\n%s", stderr)
	}
	if code, got := fsck(); code != 0 || len(got) != 0 {
		t.Fatalf("fsck after the repair: exit %d, findings %q; want clean", code, got)
	}
	code, out, stderr = runAuditd(t, bin, "repair-index", "--data-dir", dir, "--quiet")
	if code != 0 || !strings.Contains(out, "pay: every index chunk matches its entries") || stderr != "" {
		t.Fatalf("a second repair-index: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}

	if code, _, stderr := runAuditd(t, bin, "repair-index"); code != 2 || !strings.Contains(stderr, "--data-dir is required") {
		t.Errorf("repair-index without --data-dir: exit %d, stderr:\n%s", code, stderr)
	}
	if code, _, stderr := runAuditd(t, bin, "repair-index", "--data-dir", dir, "--log", "nope"); code != 1 || !strings.Contains(stderr, `no log "nope"`) {
		t.Errorf("repair-index --log nope: exit %d, stderr:\n%s", code, stderr)
	}
}
