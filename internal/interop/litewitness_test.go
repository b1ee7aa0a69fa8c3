package interop_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/crypto/ssh"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/witness"
)

// torchwood's witness, as an operator runs it: cmd/litewitness (tools of
// this module, see go.mod), configured with cmd/witnessctl, its Ed25519
// key held by a dedicated OpenSSH ssh-agent, state in SQLite.

var lwBuild struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

// lwBinaries builds litewitness and witnessctl once per test binary; the
// directory is removed by TestMain.
func lwBinaries(t testing.TB) (litewitness, witnessctl string) {
	t.Helper()
	lwBuild.once.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		if lwBuild.dir, lwBuild.err = os.MkdirTemp("", "litewitness-bin"); lwBuild.err != nil {
			return
		}
		lwBuild.out, lwBuild.err = exec.Command(gobin, "build", "-o", lwBuild.dir+string(filepath.Separator),
			"filippo.io/torchwood/cmd/litewitness", "filippo.io/torchwood/cmd/witnessctl").CombinedOutput()
	})
	if lwBuild.err != nil {
		t.Fatalf("go build torchwood/cmd/litewitness, cmd/witnessctl: %v\n%s", lwBuild.err, lwBuild.out)
	}
	return filepath.Join(lwBuild.dir, "litewitness"), filepath.Join(lwBuild.dir, "witnessctl")
}

func removeLWBinaries() {
	if lwBuild.dir != "" {
		os.RemoveAll(lwBuild.dir)
	}
}

// needOpenSSH skips (fails under CI=true) without OpenSSH's ssh-agent,
// ssh-add and ssh-keygen.
func needOpenSSH(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"ssh-agent", "ssh-add", "ssh-keygen"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (CI=true; .ci/run installs Debian's openssh-client): %v", bin, err)
			}
			t.Skipf("%s is not installed (apt-get install openssh-client); litewitness takes its key from an ssh-agent. CI runs this test", bin)
		}
	}
}

// lwKey is an Ed25519 key made by ssh-keygen and loaded into a dedicated
// ssh-agent.
type lwKey struct {
	sock        string // the agent's socket
	fingerprint string // SHA256:..., as ssh-keygen -l prints it
	priv        ed25519.PrivateKey
}

func startAgent(t testing.TB) lwKey {
	t.Helper()
	needOpenSSH(t)
	dir, err := os.MkdirTemp("", "lw") // short: a socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	keyFile := filepath.Join(dir, "wkey")
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(nil, "ssh-keygen", "-t", "ed25519", "-N", "", "-C", "litewitness-test", "-f", keyFile, "-q")
	k := lwKey{sock: filepath.Join(dir, "agent.sock")}
	agent := exec.Command("ssh-agent", "-D", "-a", k.sock) // -D: in the foreground, a child this test stops
	listening := make(chan struct{}, 1)
	out := &lineWriter{match: func(line string) {
		if strings.HasPrefix(line, "SSH_AUTH_SOCK=") { // printed once its socket listens
			select {
			case listening <- struct{}{}:
			default:
			}
		}
	}}
	agent.Stdout, agent.Stderr = out, out
	if err := agent.Start(); err != nil {
		t.Fatalf("ssh-agent: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	t.Cleanup(func() { agent.Process.Signal(syscall.SIGTERM); <-exited })
	select {
	case <-listening:
	case err := <-exited:
		t.Fatalf("ssh-agent -D exited: %v\n%s", err, out)
	case <-time.After(30 * time.Second):
		t.Fatalf("ssh-agent -D printed no socket within 30s:\n%s", out)
	}
	run([]string{"SSH_AUTH_SOCK=" + k.sock}, "ssh-add", "-q", keyFile)
	if f := strings.Fields(run(nil, "ssh-keygen", "-l", "-E", "sha256", "-f", keyFile+".pub")); len(f) < 2 || !strings.HasPrefix(f[1], "SHA256:") {
		t.Fatalf("ssh-keygen -l printed %q", f)
	} else {
		k.fingerprint = f[1]
	}
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ssh.ParseRawPrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	switch p := raw.(type) {
	case *ed25519.PrivateKey:
		k.priv = *p
	case ed25519.PrivateKey:
		k.priv = p
	default:
		t.Fatalf("ssh-keygen -t ed25519 wrote a %T", raw)
	}
	return k
}

// litewitness is a running cmd/litewitness.
type litewitness struct {
	url  string
	name string
	// vkey is the verifier key litewitness logs at start.
	vkey string
	// verifier is torchwood's own cosignature verifier for the agent's key
	// and the witness name (built from the private key, not from vkey).
	verifier note.Verifier
	db, ctl  string
}

// lineWriter collects a child's output and calls match on each line.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	line  []byte
	match func(line string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.match(string(w.line[:i]))
		w.line = w.line[i+1:]
	}
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// vkeyLine returns the vkey of litewitness's `msg="verifier key"
// vkey=...` log line (slog's text format).
func vkeyLine(line string) (string, bool) {
	if !strings.Contains(line, `msg="verifier key"`) {
		return "", false
	}
	_, v, _ := strings.Cut(line, " vkey=")
	v, _, _ = strings.Cut(v, " ")
	if u, err := strconv.Unquote(v); err == nil {
		v = u
	}
	return v, true
}

// startLitewitness runs litewitness named name on a free loopback port and
// waits for it to answer HTTP. It is interrupted when the test ends.
func startLitewitness(t testing.TB, name string) *litewitness {
	t.Helper()
	k := startAgent(t) // first: it skips without OpenSSH
	bin, ctl := lwBinaries(t)
	cs, err := torchwood.NewCosignatureSigner(name, k.priv)
	if err != nil {
		t.Fatal(err)
	}
	w := &litewitness{name: name, verifier: cs.Verifier(), db: filepath.Join(t.TempDir(), "litewitness.db"), ctl: ctl}
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		vkeys := make(chan string, 1)
		stderr := &lineWriter{match: func(line string) {
			if v, ok := vkeyLine(line); ok {
				select {
				case vkeys <- v:
				default:
				}
			}
		}}
		cmd := exec.Command(bin, "-db", w.db, "-name", name, "-key", k.fingerprint, "-ssh-agent", k.sock, "-listen", addr)
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("litewitness: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		w.url = "http://" + addr
		err = waitLitewitness(w.url, vkeys, exited, &w.vkey)
		if err == nil {
			t.Cleanup(func() {
				cmd.Process.Signal(os.Interrupt)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					cmd.Process.Kill()
					<-exited
				}
			})
			checkVKey(t, w, k.priv)
			return w
		}
		cmd.Process.Kill()
		<-exited
		if attempt < 2 && strings.Contains(stderr.String(), "address already in use") {
			continue // the free port was taken meanwhile
		}
		t.Fatalf("litewitness did not start: %v\n%s", err, stderr.String())
	}
}

func waitLitewitness(url string, vkeys <-chan string, exited <-chan error, vkey *string) error {
	deadline := time.After(30 * time.Second)
	select {
	case *vkey = <-vkeys:
	case err := <-exited:
		return fmt.Errorf("exited: %v", err)
	case <-deadline:
		return fmt.Errorf("no verifier key logged within 30s")
	}
	c := &http.Client{Timeout: time.Second}
	for {
		// It logs "listening" before it listens: poll until it answers.
		if resp, err := c.Get(url + "/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		case <-deadline:
			return fmt.Errorf("no answer on %s within 30s", url)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// witnessctl runs cmd/witnessctl on the witness's database.
func (w *litewitness) witnessctl(t testing.TB, cmd string, args ...string) string {
	t.Helper()
	out, err := exec.Command(w.ctl, append([]string{cmd, "-db", w.db}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("witnessctl %s %s: %v\n%s", cmd, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addLog configures the log origin, its checkpoints verified by vkey
// (witnessctl add-log, add-key).
func (w *litewitness) addLog(t testing.TB, origin, vkey string) {
	t.Helper()
	w.witnessctl(t, "add-log", "-origin", origin)
	w.witnessctl(t, "add-key", "-origin", origin, "-key", vkey)
}

// size is the tree size the witness holds for origin (witnessctl
// list-logs).
func (w *litewitness) size(t testing.TB, origin string) int64 {
	t.Helper()
	for _, line := range strings.Split(w.witnessctl(t, "list-logs"), "\n") {
		var l struct {
			Origin string `json:"origin"`
			Size   int64  `json:"size"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Origin == origin {
			return l.Size
		}
	}
	t.Fatalf("witnessctl list-logs does not list %s", origin)
	return 0
}

// checkVKey checks that the verifier key litewitness logs is the one
// auditd's witness package makes for the same name and Ed25519 key, and
// that auditd reads it.
func checkVKey(t testing.TB, w *litewitness, priv ed25519.PrivateKey) {
	t.Helper()
	c, err := witness.NewCosigner(w.name, priv)
	if err != nil {
		t.Fatal(err)
	}
	if w.vkey != c.VerifierKey() {
		t.Fatalf("litewitness logs the verifier key %q; auditd's witness package makes %q for its name and ssh key", w.vkey, c.VerifierKey())
	}
	if got := w.verifier.(fmt.Stringer).String(); got != w.vkey {
		t.Fatalf("torchwood's verifier for the ssh key encodes %q, litewitness logs %q", got, w.vkey)
	}
	if _, err := witness.NewVerifier(w.vkey); err != nil {
		t.Fatalf("auditd does not read litewitness's verifier key %q: %v", w.vkey, err)
	}
}
