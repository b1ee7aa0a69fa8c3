package api_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/witness"
	wserver "github.com/auditd/auditd/witness/server"
)

// stallBody sends the headers of a request announcing a 1,000-byte body,
// 10 bytes of it, and then nothing. It returns what the server sent before
// closing the connection, or fails if the server still holds it after
// 10 s (far beyond the body timeout the tests set).
func stallBody(t *testing.T, addr, method, path string, headers ...string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := method + " " + path + " HTTP/1.1\r\nHost: auditd\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"+`{"payload"`); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s %s with a stalled body: the server still holds the connection after 10s (got %q)", method, path, got)
	}
	return string(got)
}

// TestStalledBodyEveryRoute: a request whose body never arrives is ended
// after the body timeout on every route, not only on POST entries: a route
// that reads no body (POST /healthz: 405), one that reads it
// (add-checkpoint, the witness), and routes whose token is missing (401).
func TestStalledBodyEveryRoute(t *testing.T) {
	t.Parallel()
	wstore := ledgertest.Open(t)
	b, err := wstore.Bucket("witness")
	if err != nil {
		t.Fatal(err)
	}
	skey, _, err := witness.GenerateKey(rand.Reader, "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	cosigner, err := witness.ParseKey(skey)
	if err != nil {
		t.Fatal(err)
	}
	wsrv, err := wserver.New(b, cosigner, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t, envConfig{logs: []string{"a"}, opts: api.Options{
		Limits:     api.Limits{BodyTimeout: 200 * time.Millisecond},
		Auth:       api.Tokens{Write: "w", Read: "r"},
		Components: api.Components{Witnessing: api.Witnessing{AddCheckpoint: wsrv}},
	}})
	addr := env.http.Listener.Addr().String()
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/healthz", "405"},
		{"POST", "/add-checkpoint", "400"},
		{"POST", "/v1/logs/a/entries", "401"},
		{"GET", "/v1/logs", "401"},
		{"PUT", "/v1/logs/a/entries", "405"},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			t.Parallel()
			got := stallBody(t, addr, tc.method, tc.path)
			if !strings.HasPrefix(got, "HTTP/1.1 "+tc.want) {
				t.Errorf("answer %q, want a %s", got, tc.want)
			}
		})
	}
	t.Run("POST entries with the token", func(t *testing.T) {
		t.Parallel()
		got := stallBody(t, addr, "POST", "/v1/logs/a/entries", "Authorization: Bearer w")
		if !strings.HasPrefix(got, "HTTP/1.1 408") || !strings.Contains(got, `"body_timeout"`) {
			t.Errorf("answer %q, want 408 body_timeout", got)
		}
	})
}

// TestBodyDeadlineWrapsOtherHandlers: api.BodyDeadline bounds the bodies of
// any handler (serve wraps the status page and the debug listener with it).
func TestBodyDeadlineWrapsOtherHandlers(t *testing.T) {
	t.Parallel()
	ignore := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("page\n")) })
	srv := &http.Server{Handler: api.BodyDeadline(ignore, 200*time.Millisecond), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if got := stallBody(t, ln.Addr().String(), "POST", "/"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("answer %q, want the page", got)
	}
}

// TestStreamCap: past MaxStreams open event streams, one more gets 503
// too_many_streams with a Retry-After; once one closes a new one gets in.
// The streams outlive the body timeout (they have no body).
func TestStreamCap(t *testing.T) {
	t.Parallel()
	env, _ := newAlertEnv(t, api.Options{Limits: api.Limits{MaxStreams: 3, BodyTimeout: 50 * time.Millisecond, StreamKeepalive: 20 * time.Millisecond}})
	var cancels []context.CancelFunc
	var readers []*bufio.Reader
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		res, _ := openStream(t, env, ctx)
		t.Cleanup(func() { res.Body.Close() })
		cancels = append(cancels, cancel)
		readers = append(readers, bufio.NewReader(res.Body))
	}
	code, header, b := tryStream(t, env)
	var body struct {
		Code  string `json:"code"`
		Limit int    `json:"limit"`
	}
	if err := json.Unmarshal(b, &body); err != nil || code != http.StatusServiceUnavailable ||
		body.Code != "too_many_streams" || body.Limit != 3 || header.Get("Retry-After") == "" {
		t.Fatalf("4th stream: %d %q, want 503 too_many_streams, limit 3, with a Retry-After", code, b)
	}
	// The open streams go on past the body timeout: 5 keepalives are 100ms.
	for range 5 {
		for {
			line, err := readers[0].ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			if strings.HasPrefix(line, ": keepalive") {
				break
			}
		}
	}
	cancels[1]()
	// The server lets the stream's place go once it sees the client gone.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, b := tryStream(t, env)
		if code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("a stream after one closed: %d %q, want 200", code, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tryStream opens an event stream and closes it at once: its status, and
// its header and body unless it is a stream.
func tryStream(t *testing.T, env *testEnv) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, env.http.URL+"/v1/alerts/stream", nil)
	res, err := env.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return res.StatusCode, res.Header, nil
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, b
}
