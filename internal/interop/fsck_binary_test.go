package interop_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestTesseraFsckBinary builds tessera's cmd/fsck (a tool of this module,
// see go.mod) and runs it against auditd over HTTP, as an operator would:
// it must report the whole log checked, and fail behind the proxy that flips
// one byte of one bundle. cmd/fsck exits 0 either way, so its log says which.
func TestTesseraFsckBinary(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fsck")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/transparency-dev/tessera/cmd/fsck").CombinedOutput(); err != nil {
		t.Fatalf("go build tessera/cmd/fsck: %v\n%s", err, out)
	}
	n := shortSize()
	s := serveLog(t, n)
	keyFile := filepath.Join(dir, "log.pub")
	if err := os.WriteFile(keyFile, []byte(s.vkey), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(prefix string) string {
		out, err := exec.Command(bin, "--storage_url="+prefix, "--public_key="+keyFile, "--origin="+s.origin,
			"--ui=false", "--N=4").CombinedOutput()
		if err != nil {
			t.Fatalf("fsck %s: %v\n%.2000s", prefix, err, out)
		}
		return string(out)
	}
	if out := run(s.prefix); !strings.Contains(out, "Successfully fsck'd log with size "+strconv.Itoa(n)) {
		t.Fatalf("fsck against auditd did not succeed:\n%.2000s", out)
	}
	out := run(tamperingProxy(t, s))
	if strings.Contains(out, "Successfully fsck'd") || !strings.Contains(out, "fsck failed") || !strings.Contains(out, "tile/0/003") {
		t.Fatalf("fsck behind the tampering proxy did not fail on tile 0/003:\n%.2000s", out)
	}
}
