package interop_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestShippedBinaryLinksNoInteropModule: tessera, torchwood and their
// dependencies (klog, OpenTelemetry, the fsck terminal UI; litewitness's
// SQLite, zombiezen.com/go/sqlite over modernc.org/sqlite, and
// sigsum-go) are test and tool dependencies only; cmd/auditd does not
// import them.
func TestShippedBinaryLinksNoInteropModule(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/auditd/auditd/cmd/auditd").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps cmd/auditd: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 50 {
		t.Fatalf("go list -deps cmd/auditd listed %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		for _, bad := range []string{"github.com/transparency-dev/tessera", "filippo.io/torchwood", "k8s.io/klog", "go.opentelemetry.io", "github.com/charmbracelet",
			"zombiezen.com", "modernc.org", "sigsum.org"} {
			if strings.HasPrefix(p, bad) {
				t.Errorf("cmd/auditd imports %s", p)
			}
		}
	}
}
