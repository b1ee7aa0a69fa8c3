package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/merkle"
)

// compareLog is the log the auditd targets append to; each round starts a
// fresh server, so one name serves every round.
const compareLog = "bench"

// target is one server kind of a comparison, with what it takes to start
// it for a round and to talk to it.
type target struct {
	spec targetSpec
	exe  string
	// start runs the server as a child with its state in dir.
	start func(ctx context.Context, dir string, profile bool) (*running, error)
}

// running is a target's server during one round.
type running struct {
	child       *loadtest.Child
	postURL     string
	contentType string
	// body appends the request body of events first .. first+count-1.
	body func(dst []byte, b *loadtest.Bodies, first uint64, count int) []byte
	// size reads the tree size an ack reports (0 where there is none).
	size func(resp []byte) (uint64, error)
	// checkpoint fetches and verifies the latest signed checkpoint and
	// returns its size; nil where the target has none.
	checkpoint func(ctx context.Context, c *http.Client) (uint64, error)
	profileURL string // the child's /debug/pprof/ base, if it serves one
}

func newTarget(spec targetSpec, f compareFlags) (*target, error) {
	t := &target{spec: spec}
	var err error
	switch spec.kind {
	case "auditd":
		t.exe, err = auditdBinary(firstNonEmpty(spec.exe, f.auditd))
		if err != nil {
			return nil, usageError{fmt.Errorf("compare: auditd: no binary beside this one or on $PATH: go build -o /tmp/cmp/auditd ./cmd/auditd and pass -auditd /tmp/cmp/auditd")}
		}
		t.start = func(ctx context.Context, dir string, profile bool) (*running, error) {
			return startAuditd(ctx, t.exe, dir, f.auditdArgs, profile)
		}
	case "tessera":
		if t.exe, err = tesseraBinary(firstNonEmpty(spec.exe, f.tessera)); err != nil {
			return nil, err
		}
		t.start = func(ctx context.Context, dir string, _ bool) (*running, error) { return startTessera(ctx, t.exe, dir) }
	case "decodeonly":
		if t.exe = spec.exe; t.exe == "" {
			if t.exe, err = os.Executable(); err != nil {
				return nil, err
			}
		}
		t.start = func(ctx context.Context, _ string, profile bool) (*running, error) {
			return startDecodeOnly(ctx, t.exe, profile)
		}
	}
	if _, err := os.Stat(t.exe); err != nil {
		return nil, usageError{fmt.Errorf("compare: %s: %w", spec.label, err)}
	}
	return t, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// tesseraBinary is -tessera, else posix on $PATH, else /tmp/tbin/posix.
func tesseraBinary(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if p, err := exec.LookPath("posix"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/tmp/tbin/posix"); err == nil {
		return "/tmp/tbin/posix", nil
	}
	return "", usageError{errors.New("compare: tessera: no posix binary on $PATH nor /tmp/tbin/posix: " +
		"GOBIN=/tmp/tbin go install github.com/transparency-dev/tessera/cmd/conformance/posix@v1.0.4, or pass -tessera PATH")}
}

var (
	auditdServing = regexp.MustCompile(`msg="auditd serving".* addr=(http://[0-9.:]+)`)
	auditdDebug   = regexp.MustCompile(`msg="serving Go profiles" addr=(http://[0-9.:]+/debug/pprof/)`)
	decodeServing = regexp.MustCompile(`^decodeonly serving (http://[0-9.:]+)`)
	decodeDebug   = regexp.MustCompile(`^decodeonly profiles (http://[0-9.:]+/debug/pprof/)`)
)

// startAuditd runs auditd serve on a loopback port with its data in dir.
func startAuditd(ctx context.Context, exe, dir string, extra []string, profile bool) (*running, error) {
	args := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--log-format", "text"}
	if profile {
		args = append(args, "--debug-listen", "127.0.0.1:0")
	}
	args = append(args, extra...)
	// The client sends no tokens: the server must ask for none.
	env := []string{"AUDITD_WRITE_TOKEN=", "AUDITD_READ_TOKEN="}
	c, found, err := loadtest.StartChild(ctx, "auditd", exe, args, env, auditdServing, time.Minute, auditdDebug)
	if err != nil {
		return nil, err
	}
	base := found[1]
	v, err := fetchVerifier(ctx, base)
	if err != nil {
		c.Stop()
		return nil, err
	}
	cpURL, origin := base+"/v1/logs/"+compareLog+"/checkpoint", v.Name()+"/"+compareLog
	return &running{
		child: c, postURL: base + "/v1/logs/" + compareLog + "/entries", contentType: "application/x-ndjson",
		body:       func(dst []byte, b *loadtest.Bodies, first uint64, n int) []byte { return b.AppendNDJSON(dst, first, n) },
		size:       sizeField,
		checkpoint: checkpointFetcher(cpURL, v, origin),
		profileURL: found[0],
	}, nil
}

// startTessera runs Tessera's POSIX conformance server on a free loopback
// port with its log in dir and a fresh signing key.
func startTessera(ctx context.Context, exe, dir string) (*running, error) {
	skey, vkey, err := note.GenerateKey(crand.Reader, "bench.tessera.example")
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--storage_dir", dir, "--listen", addr}
	c, _, err := loadtest.StartChild(ctx, "tessera", exe, args, []string{"LOG_PRIVATE_KEY=" + skey}, nil, 0)
	if err != nil {
		return nil, err
	}
	base := "http://" + addr
	fetch := checkpointFetcher(base+"/checkpoint", v, v.Name())
	if err := waitServing(ctx, c, fetch); err != nil {
		c.Stop()
		return nil, err
	}
	return &running{
		child: c, postURL: base + "/add", contentType: "application/octet-stream",
		body: func(dst []byte, b *loadtest.Bodies, first uint64, n int) []byte { return b.AppendPayload(dst, first) },
		size: func(resp []byte) (uint64, error) {
			idx, err := strconv.ParseUint(string(bytes.TrimSpace(resp)), 10, 64)
			return idx + 1, err
		},
		checkpoint: fetch,
	}, nil
}

// waitServing waits up to a minute for the child's first checkpoint.
func waitServing(ctx context.Context, c *loadtest.Child, fetch func(context.Context, *http.Client) (uint64, error)) error {
	cl := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := fetch(ctx, cl)
		if err == nil {
			return nil
		}
		if c.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: not serving a checkpoint (%v): %s", c.Name, err, c.Tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startDecodeOnly runs this binary's decodeonly mode.
func startDecodeOnly(ctx context.Context, exe string, profile bool) (*running, error) {
	args := []string{"decodeonly", "-listen", "127.0.0.1:0"}
	if profile {
		args = append(args, "-debug-listen", "127.0.0.1:0")
	}
	c, found, err := loadtest.StartChild(ctx, "decodeonly", exe, args, nil, decodeServing, time.Minute, decodeDebug)
	if err != nil {
		return nil, err
	}
	return &running{
		child: c, postURL: found[1] + "/v1/logs/" + compareLog + "/entries", contentType: "application/x-ndjson",
		body:       func(dst []byte, b *loadtest.Bodies, first uint64, n int) []byte { return b.AppendNDJSON(dst, first, n) },
		size:       sizeField,
		profileURL: found[0],
	}, nil
}

// freePort returns a loopback address no one listens on (it may be taken
// again before the child binds it: the child then fails to start).
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// sizeField reads the "size" of a JSON ack without decoding the rest (an
// auditd ack of a batch lists every entry).
func sizeField(resp []byte) (uint64, error) {
	_, rest, ok := bytes.Cut(resp, []byte(`"size":`))
	if !ok {
		return 0, fmt.Errorf("no size in the ack %.200q", resp)
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	return strconv.ParseUint(string(rest[:end]), 10, 64)
}

// checkpointFetcher GETs a signed checkpoint at url, verifies it with v
// and its origin, and returns its size.
func checkpointFetcher(url string, v note.Verifier, origin string) func(context.Context, *http.Client) (uint64, error) {
	return func(ctx context.Context, cl *http.Client) (uint64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(resp.Body); err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		cp, err := merkle.OpenCheckpoint(buf.Bytes(), v, origin)
		if err != nil {
			return 0, err
		}
		return cp.Size, nil
	}
}

// relDir names a round's data directory under tmp.
func relDir(tmp, label string, round int) string {
	return filepath.Join(tmp, fmt.Sprintf("%s-%d", sanitizeLabel(strings.TrimSuffix(label, "/")), round))
}
