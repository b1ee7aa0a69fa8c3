package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/client"
)

// TestCrashRecovery runs the daemon as a real process under append load,
// kills it with SIGKILL at random moments, restarts it on the same data
// directory each time, and then checks that every acknowledged entry is
// present exactly once, that requests cut off by a kill succeed when
// retried, and runs the ledger scrub and the checkpoint audit through the
// API: every leaf, tile and checkpoint root rebuilt from the entries, every
// checkpoint signed and consistent with the latest.
func TestCrashRecovery(t *testing.T) {
	iterations := 25
	if testing.Short() {
		iterations = 6
	}
	// A bound for the whole test, so a hang fails instead of blocking.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	bin := buildDaemon(t, ctx)
	h := &crashHarness{
		t:       t,
		bin:     bin,
		dataDir: filepath.Join(t.TempDir(), "data"),
		logs:    []string{"crash-a", "crash-b"},
		events:  map[string]*crashEvent{},
		acked:   map[string]*crashAck{},
		byIndex: map[string]map[uint64]string{},
		seenCPs: map[string]map[string]bool{},
		cpMax:   map[string]uint64{},
	}
	t.Cleanup(h.cleanup)

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d iterations", seed, iterations)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))

	for iter := range iterations {
		d := h.start(ctx, iter)
		retried, added, dups := h.retryUnknown(ctx, d)
		h.quickCheck(ctx, d, rng)
		if t.Failed() {
			t.FailNow()
		}
		before := h.ackCount()
		loadFor := time.Duration(50+rng.IntN(351)) * time.Millisecond
		h.load(ctx, d, loadFor, rng.Uint64())
		sizes := h.sizes()
		t.Logf("iteration %d: retried %d cut-off requests (%d entries new, %d committed before the kill); load %v: %d entries acked, %d requests cut off by SIGKILL; acked total %d, per log %v",
			iter, retried, added, dups, loadFor, h.ackCount()-before, len(h.unknown), h.ackCount(), sizes)
		if t.Failed() {
			t.FailNow()
		}
	}

	d := h.start(ctx, iterations)
	retried, added, dups := h.retryUnknown(ctx, d)
	t.Logf("final start: retried %d cut-off requests (%d entries new, %d committed before the kill); acked total %d", retried, added, dups, h.ackCount())
	h.quickCheck(ctx, d, rng)
	for _, name := range h.logs {
		h.verifyLog(ctx, d, name)
	}
	if t.Failed() {
		return
	}
	// A clean stop after all that must still work.
	if err := d.stop(ctx); err != nil {
		t.Errorf("SIGTERM after the crash run: %v", err)
	}
}

// daemonBin is the auditd binary the tests run, built once per test
// process (each build links the whole daemon: seconds, many times over).
var daemonBin struct {
	once sync.Once
	path string
	err  error
}

// buildDaemon builds the auditd binary, once for all the tests of the
// process, into the directory TestMain removes at the end; the tests only
// run it.
func buildDaemon(t *testing.T, ctx context.Context) string {
	t.Helper()
	daemonBin.once.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			daemonBin.err = fmt.Errorf("go tool not found: %v", err)
			return
		}
		bin := filepath.Join(testTempDir, "bin", "auditd")
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(bctx, gobin, "build", "-o", bin, "github.com/auditd/auditd/cmd/auditd")
		if out, err := cmd.CombinedOutput(); err != nil {
			daemonBin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		daemonBin.path = bin
	})
	if daemonBin.err != nil {
		t.Fatal(daemonBin.err)
	}
	return daemonBin.path
}

// crashEvent is one event the test sent; its JSON is resent byte for byte.
type crashEvent struct {
	log     string
	id      string
	json    []byte
	payload []byte
	time    string // "" when the server stamps it
}

// crashAck is what an acknowledgment said about an event.
type crashAck struct {
	log      string
	index    uint64
	leafHash string
}

// crashReq is one POST body.
type crashReq struct {
	log    string
	body   []byte
	events []*crashEvent
}

type crashHarness struct {
	t       *testing.T
	bin     string
	dataDir string
	logs    []string

	mu      sync.Mutex
	nextID  int
	events  map[string]*crashEvent       // by id
	acked   map[string]*crashAck         // by id
	byIndex map[string]map[uint64]string // log -> index -> id
	ackList map[string][]string          // log -> acked ids, for resending
	unknown []*crashReq                  // no response: outcome unknown
	seenCPs map[string]map[string]bool   // log -> checkpoint notes published while running
	cpMax   map[string]uint64            // log -> largest published checkpoint size
	cur     *daemon
	dead    []*daemon
}

func (h *crashHarness) ackCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acked)
}

func (h *crashHarness) sizes() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, a := range h.acked {
		out[a.log]++
	}
	return out
}

func (h *crashHarness) cleanup() {
	if h.cur != nil {
		h.cur.kill()
	}
	if !h.t.Failed() {
		return
	}
	all := append(h.dead, h.cur)
	var warn []string
	for _, d := range all {
		if d == nil {
			continue
		}
		for _, l := range d.stderr.lines() {
			if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") || strings.Contains(l, "panic") {
				warn = append(warn, fmt.Sprintf("[run %d] %s", d.run, l))
			}
		}
	}
	if len(warn) > 40 {
		warn = warn[len(warn)-40:]
	}
	if len(warn) > 0 {
		h.t.Logf("warnings and errors the daemon logged (last %d):\n%s", len(warn), strings.Join(warn, "\n"))
	}
	for _, d := range all[max(0, len(all)-2):] {
		if d == nil {
			continue
		}
		ls := d.stderr.lines()
		h.t.Logf("stderr tail of daemon run %d (%s):\n%s", d.run, d.exitStatus(), strings.Join(ls[max(0, len(ls)-40):], "\n"))
	}
}

// start starts the daemon on the data dir and waits until it is healthy.
func (h *crashHarness) start(ctx context.Context, run int) *daemon {
	h.t.Helper()
	d, err := startDaemon(ctx, h.bin, h.dataDir, run)
	if d != nil {
		h.cur = d
	}
	if err != nil {
		h.t.Fatalf("run %d: daemon did not restart on the data dir the previous run left: %v", run, err)
	}
	return d
}

// newRequest makes a batch of 1..200 new events for one log, now and then
// with some already acknowledged events of that log mixed in (they must come
// back as duplicates at their index) or an event repeated within the batch.
func (h *crashHarness) newRequest(rng *rand.Rand, client int) *crashReq {
	h.mu.Lock()
	defer h.mu.Unlock()
	log := h.logs[rng.IntN(len(h.logs))]
	n := 1 + rng.IntN(200)
	r := &crashReq{log: log}
	for range n {
		h.nextID++
		id := fmt.Sprintf("c%d-e%06d", client, h.nextID)
		payload := fmt.Appendf(nil, `{"client":%d,"n":%d,"pad":%q}`, client, h.nextID, strings.Repeat("x", rng.IntN(64)))
		ev := &crashEvent{log: log, id: id, payload: payload}
		var b bytes.Buffer
		fmt.Fprintf(&b, `{"id":%q`, id)
		if rng.IntN(3) == 0 {
			fmt.Fprintf(&b, `,"key":"k%d"`, rng.IntN(10))
		}
		if rng.IntN(2) == 0 {
			ts := time.Unix(1_700_000_000+rng.Int64N(100_000_000), rng.Int64N(1e9)).UTC()
			ev.time = ts.Format(time.RFC3339Nano)
			fmt.Fprintf(&b, `,"time":%q`, ev.time)
		}
		fmt.Fprintf(&b, `,"payload":%s}`, payload)
		ev.json = b.Bytes()
		h.events[id] = ev
		r.events = append(r.events, ev)
	}
	if old := h.ackList[log]; len(old) > 0 && rng.IntN(8) == 0 {
		for range 1 + rng.IntN(3) {
			ev := h.events[old[rng.IntN(len(old))]]
			at := rng.IntN(len(r.events) + 1)
			r.events = slices.Insert(r.events, at, ev)
		}
	}
	if rng.IntN(16) == 0 {
		i := rng.IntN(len(r.events))
		r.events = append(r.events, r.events[i])
	}
	var b bytes.Buffer
	ndjson := rng.IntN(2) == 0
	if !ndjson {
		b.WriteByte('[')
	}
	for i, ev := range r.events {
		if i > 0 {
			if ndjson {
				b.WriteByte('\n')
			} else {
				b.WriteByte(',')
			}
		}
		b.Write(ev.json)
	}
	if !ndjson {
		b.WriteByte(']')
	}
	r.body = b.Bytes()
	return r
}

type postResult struct {
	Size    uint64 `json:"size"`
	Entries []struct {
		Index     uint64 `json:"index"`
		ID        string `json:"id"`
		LeafHash  string `json:"leaf_hash"`
		Duplicate bool   `json:"duplicate"`
	} `json:"entries"`
}

// post sends r. A nil error with status 200 is an acknowledgment; an error
// means no (complete) response: the outcome is unknown.
func (d *daemon) post(ctx context.Context, r *crashReq) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, d.url+"/v1/logs/"+r.log+"/entries", bytes.NewReader(r.body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, body, nil
}

// recordAck checks an acknowledgment of r against everything acknowledged
// before and records it. retry says r was sent before without an answer.
// It returns how many entries were new and how many were held already
// without ever having been acknowledged.
func (h *crashHarness) recordAck(r *crashReq, body []byte, retry bool) (added, dups int) {
	t := h.t
	var res postResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Errorf("POST %s: 200 with an unreadable body: %v: %.300s", r.log, err, body)
		return 0, 0
	}
	if len(res.Entries) != len(r.events) {
		t.Errorf("POST %s: %d events acknowledged as %d entries", r.log, len(r.events), len(res.Entries))
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	idx := h.byIndex[r.log]
	if idx == nil {
		idx = map[uint64]string{}
		h.byIndex[r.log] = idx
	}
	for i, e := range res.Entries {
		ev := r.events[i]
		if e.ID != ev.id {
			t.Errorf("POST %s: entry %d acknowledged as id %q, sent %q", r.log, i, e.ID, ev.id)
			continue
		}
		if e.Index >= res.Size {
			t.Errorf("POST %s: id %s acknowledged at index %d, not below the returned size %d", r.log, ev.id, e.Index, res.Size)
		}
		prev := h.acked[ev.id]
		switch {
		case prev != nil && (prev.index != e.Index || prev.leafHash != e.LeafHash):
			t.Errorf("POST %s (retry %v): id %s acknowledged at index %d (leaf %s), earlier at index %d (leaf %s)",
				r.log, retry, ev.id, e.Index, e.LeafHash, prev.index, prev.leafHash)
		case prev != nil && !e.Duplicate:
			t.Errorf("POST %s (retry %v): id %s, acknowledged before at index %d, appended again (duplicate false)", r.log, retry, ev.id, prev.index)
		case prev == nil && e.Duplicate && !retry:
			t.Errorf("POST %s: id %s sent for the first time came back as a duplicate of index %d", r.log, ev.id, e.Index)
		}
		if other, ok := idx[e.Index]; ok && other != ev.id {
			t.Errorf("POST %s (retry %v): index %d acknowledged for id %s and for id %s", r.log, retry, e.Index, other, ev.id)
		}
		switch {
		case !e.Duplicate:
			added++
		case prev == nil:
			dups++ // held, but never acknowledged before
		}
		if prev == nil {
			h.acked[ev.id] = &crashAck{log: r.log, index: e.Index, leafHash: e.LeafHash}
			idx[e.Index] = ev.id
			if h.ackList == nil {
				h.ackList = map[string][]string{}
			}
			h.ackList[r.log] = append(h.ackList[r.log], ev.id)
		}
	}
	return added, dups
}

// load runs four clients against d for about dur, then kills d with SIGKILL
// while they are still sending.
func (h *crashHarness) load(ctx context.Context, d *daemon, dur time.Duration, seed uint64) {
	var killed atomic.Bool
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for ctx.Err() == nil && !killed.Load() {
				r := h.newRequest(rng, c)
				code, body, err := d.post(ctx, r)
				switch {
				case err != nil:
					h.mu.Lock()
					h.unknown = append(h.unknown, r)
					h.mu.Unlock()
					if !killed.Load() {
						h.t.Errorf("POST %s to a live daemon failed: %v", r.log, err)
						return
					}
				case code == http.StatusOK:
					h.recordAck(r, body, false)
				default:
					h.mu.Lock()
					h.unknown = append(h.unknown, r)
					h.mu.Unlock()
					h.t.Errorf("POST %s (%d events): status %d: %.500s", r.log, len(r.events), code, body)
					return
				}
			}
		}()
	}
	// Watch the published checkpoints while the load runs: each must stay
	// stored, and what is published never goes back, not even across a kill.
	for _, name := range h.logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && !killed.Load() {
				code, body, err := d.get(ctx, "/v1/logs/"+name+"/checkpoint")
				if err == nil && code == http.StatusOK {
					h.sawCheckpoint(d.run, name, string(body))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	select {
	case <-time.After(dur):
	case <-ctx.Done():
	}
	killed.Store(true)
	d.kill()
	wg.Wait()
	h.dead = append(h.dead, d)
	h.cur = nil
	d.client.CloseIdleConnections()
}

// sawCheckpoint records a checkpoint note the daemon published.
func (h *crashHarness) sawCheckpoint(run int, log, signed string) {
	text, _, _ := strings.Cut(signed, "\n\n")
	_, size, _, err := parseCheckpointText(text + "\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.t.Errorf("run %d: log %s: published checkpoint does not parse: %v\n%s", run, log, err, signed)
		return
	}
	if size < h.cpMax[log] {
		h.t.Errorf("run %d: log %s: published checkpoint went back from size %d to %d", run, log, h.cpMax[log], size)
	}
	h.cpMax[log] = max(h.cpMax[log], size)
	if h.seenCPs[log] == nil {
		h.seenCPs[log] = map[string]bool{}
	}
	h.seenCPs[log][signed] = true
}

// retryUnknown resends, byte for byte, every request that got no answer.
// Each must now succeed, every event new or a duplicate, never a conflict.
// It returns the number of requests and of their entries that were new and
// that were already held (committed before the kill, never acknowledged).
func (h *crashHarness) retryUnknown(ctx context.Context, d *daemon) (reqs, added, dups int) {
	h.mu.Lock()
	todo := h.unknown
	h.unknown = nil
	h.mu.Unlock()
	var wg sync.WaitGroup
	var nAdded, nDups atomic.Int64
	work := make(chan *crashReq)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				code, body, err := d.post(ctx, r)
				switch {
				case err != nil:
					h.t.Errorf("retry of a cut-off POST %s (%d events): %v", r.log, len(r.events), err)
				case code != http.StatusOK:
					h.t.Errorf("retry of a cut-off POST %s (%d events): status %d (want 200, entries new or duplicate): %.500s",
						r.log, len(r.events), code, body)
				default:
					a, d := h.recordAck(r, body, true)
					nAdded.Add(int64(a))
					nDups.Add(int64(d))
				}
			}
		}()
	}
	for _, r := range todo {
		work <- r
	}
	close(work)
	wg.Wait()
	return len(todo), int(nAdded.Load()), int(nDups.Load())
}

// quickCheck runs after each restart: the daemon is ready, each log holds
// at least every acknowledged index, a sample of acknowledged ids is found
// at its index, and the published checkpoint is remembered for the end.
func (h *crashHarness) quickCheck(ctx context.Context, d *daemon, rng *rand.Rand) {
	t := h.t
	if code, body, err := d.get(ctx, "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("run %d: /readyz: %d %v %s", d.run, code, err, body)
	}
	h.mu.Lock()
	maxIdx := map[string]uint64{}
	has := map[string]bool{}
	for _, a := range h.acked {
		has[a.log] = true
		maxIdx[a.log] = max(maxIdx[a.log], a.index)
	}
	var sample []string
	for _, ids := range h.ackList {
		for range min(20, len(ids)) {
			sample = append(sample, ids[rng.IntN(len(ids))])
		}
	}
	h.mu.Unlock()
	for _, name := range h.logs {
		if !has[name] {
			continue
		}
		var info struct {
			Size       uint64 `json:"size"`
			Checkpoint *struct {
				Size uint64 `json:"size"`
				Note string `json:"note"`
			} `json:"checkpoint"`
			Error string `json:"error"`
		}
		if err := d.getJSON(ctx, "/v1/logs/"+name+"/", &info); err != nil {
			t.Errorf("run %d: %v", d.run, err)
			continue
		}
		if info.Error != "" {
			t.Errorf("run %d: log %s reports an error after restart: %s", d.run, name, info.Error)
		}
		if info.Size <= maxIdx[name] {
			t.Errorf("run %d: log %s restarted with size %d, but index %d was acknowledged", d.run, name, info.Size, maxIdx[name])
		}
		if info.Checkpoint != nil {
			if info.Checkpoint.Size > info.Size {
				t.Errorf("run %d: log %s: checkpoint of size %d beyond the tree of size %d", d.run, name, info.Checkpoint.Size, info.Size)
			}
			h.sawCheckpoint(d.run, name, info.Checkpoint.Note)
		}
	}
	for _, id := range sample {
		h.checkByID(ctx, d, id)
	}
}

// checkByID looks an acknowledged id up and checks the entry against what
// was sent and acknowledged.
func (h *crashHarness) checkByID(ctx context.Context, d *daemon, id string) {
	h.mu.Lock()
	ev, a := h.events[id], h.acked[id]
	h.mu.Unlock()
	var e entryJSON
	if err := d.getJSON(ctx, "/v1/logs/"+ev.log+"/entries?id="+url.QueryEscape(id), &e); err != nil {
		h.t.Errorf("run %d: acknowledged id %s (index %d): %v", d.run, id, a.index, err)
		return
	}
	if e.Index != a.index || e.ID != id || e.LeafHash != a.leafHash {
		h.t.Errorf("run %d: id %s: found index %d id %q leaf %s, acknowledged index %d leaf %s",
			d.run, id, e.Index, e.ID, e.LeafHash, a.index, a.leafHash)
	}
	sum := sha256.Sum256(ev.payload)
	if e.PayloadSHA256 != base64.StdEncoding.EncodeToString(sum[:]) || !bytes.Equal(e.Payload, ev.payload) {
		h.t.Errorf("run %d: id %s: payload %s (sha256 %s), sent %s", d.run, id, e.Payload, e.PayloadSHA256, ev.payload)
	}
	if ev.time == "" {
		if !e.TimeAssigned {
			h.t.Errorf("run %d: id %s was sent without a time but time_assigned is false", d.run, id)
		}
	} else {
		got, err1 := time.Parse(time.RFC3339Nano, e.Time)
		want, _ := time.Parse(time.RFC3339Nano, ev.time)
		if err1 != nil || !got.Equal(want) || e.TimeAssigned {
			h.t.Errorf("run %d: id %s: time %q (assigned %v), sent %q", d.run, id, e.Time, e.TimeAssigned, ev.time)
		}
	}
}

type entryJSON struct {
	Index         uint64          `json:"index"`
	ID            string          `json:"id"`
	Time          string          `json:"time"`
	TimeAssigned  bool            `json:"time_assigned"`
	Payload       json.RawMessage `json:"payload"`
	PayloadSHA256 string          `json:"payload_sha256"`
	Leaf          string          `json:"leaf"`
	LeafHash      string          `json:"leaf_hash"`
}

// verifyLog checks one log end to end against the acknowledgments, and
// runs the ledger scrub and the checkpoint audit (package checkers) through
// the daemon's API: every leaf recomputed from its entry, the tree rebuilt
// from the leaves and compared with every tile the API serves and every
// stored checkpoint's root, every checkpoint's signature verified and
// proven consistent with the latest.
func (h *crashHarness) verifyLog(ctx context.Context, d *daemon, name string) {
	t := h.t
	verifierKey, err := d.getText(ctx, "/v1/verifier")
	if err != nil {
		t.Fatalf("verifier: %v", err)
	}
	verifier, err := note.NewVerifier(strings.TrimSpace(verifierKey))
	if err != nil {
		t.Fatalf("verifier key %q: %v", verifierKey, err)
	}
	cl := client.New(d.url, verifier)

	// The tree must be fully covered by a checkpoint once appends stop.
	var size uint64
	for {
		var info struct {
			Size       uint64 `json:"size"`
			Checkpoint *struct {
				Size uint64 `json:"size"`
			} `json:"checkpoint"`
		}
		if err := d.getJSON(ctx, "/v1/logs/"+name+"/", &info); err != nil {
			t.Fatalf("log %s: %v", name, err)
		}
		size = info.Size
		if info.Checkpoint != nil && info.Checkpoint.Size == info.Size {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("log %s: no checkpoint covers the tree of size %d: %v", name, info.Size, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}

	// Every entry by index, no id twice.
	at := map[string]uint64{}
	for next := uint64(0); next < size; {
		es, err := cl.Entries(ctx, name, next, size)
		if err != nil || len(es) == 0 {
			t.Fatalf("log %s: entries from %d: %d, %v", name, next, len(es), err)
		}
		for _, e := range es {
			if j, dup := at[e.ID]; dup {
				t.Errorf("log %s: id %s is held twice, at index %d and %d", name, e.ID, j, e.Index)
			}
			at[e.ID] = e.Index
		}
		next += uint64(len(es))
	}

	// Every acknowledged id at its acknowledged index, by id and by index;
	// and nothing in the log that was not acknowledged (every cut-off
	// request has been retried and acknowledged by now).
	h.mu.Lock()
	var ackedHere []string
	ackOf := map[string]crashAck{}
	for id, a := range h.acked {
		if a.log == name {
			ackedHere = append(ackedHere, id)
			ackOf[id] = *a
		}
	}
	h.mu.Unlock()
	var lost int
	for _, id := range ackedHere {
		a := ackOf[id]
		i, ok := at[id]
		if !ok {
			lost++
			if lost <= 20 {
				t.Errorf("log %s: acknowledged id %s (index %d) is missing", name, id, a.index)
			}
			continue
		}
		if i != a.index {
			t.Errorf("log %s: acknowledged id %s at index %d is at index %d", name, id, a.index, i)
		}
	}
	if lost > 0 {
		t.Errorf("log %s: %d of %d acknowledged entries lost", name, lost, len(ackedHere))
	}
	if uint64(len(at)) != size || len(ackedHere) != len(at) {
		t.Errorf("log %s: size %d, %d distinct ids held, %d ids acknowledged", name, size, len(at), len(ackedHere))
	}
	for id := range at {
		if _, ok := ackOf[id]; !ok {
			t.Errorf("log %s: holds id %s that was never acknowledged", name, id)
			break
		}
	}
	var next atomic.Uint64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= uint64(len(ackedHere)) || ctx.Err() != nil {
					return
				}
				h.checkByID(ctx, d, ackedHere[i])
			}
		}()
	}
	wg.Wait()

	// The scrub and the checkpoint audit, remote.
	src := checkers.OnlyLog(checkers.RemoteSource(cl), name)
	var findings crashFindings
	for _, c := range []checkers.Checker{checkers.NewScrub(src, verifier), checkers.NewCheckpointAudit(src, verifier)} {
		if err := c.Run(ctx, &findings); err != nil {
			t.Fatalf("log %s: %s: %v", name, c.Name(), err)
		}
	}
	for _, f := range findings.list {
		t.Errorf("log %s: %v", name, f)
	}
	if findings.entries != size {
		t.Errorf("log %s: the scrub checked %d entries of %d", name, findings.entries, size)
	}

	// The checkpoint history: the latest covers the tree, and every
	// checkpoint the daemon published during the run is still stored.
	notes := map[string]bool{}
	var history []client.StoredCheckpoint
	for from := uint64(0); ; {
		page, err := cl.Checkpoints(ctx, name, from, 1000)
		if err != nil {
			t.Fatalf("log %s: checkpoints: %v", name, err)
		}
		history = append(history, page...)
		if len(page) < 1000 {
			break
		}
		from = page[len(page)-1].Size + 1
	}
	if len(history) == 0 {
		t.Fatalf("log %s: no checkpoints stored", name)
	}
	for _, c := range history {
		notes[c.Note] = true
	}
	if last := history[len(history)-1]; last.Size != size {
		t.Errorf("log %s: latest stored checkpoint has size %d, the tree %d", name, last.Size, size)
	}
	h.mu.Lock()
	seen := slices.Collect(maps.Keys(h.seenCPs[name]))
	h.mu.Unlock()
	for _, s := range seen {
		if !notes[s] {
			t.Errorf("log %s: a checkpoint published during the run is not in the stored history:\n%s", name, s)
		}
	}
	t.Logf("log %s: %d entries (%d acknowledged), %d checkpoints; scrub and checkpoint audit clean", name, size, len(ackedHere), len(history))
}

// crashFindings is a checkers.Progress that keeps the findings.
type crashFindings struct {
	mu      sync.Mutex
	list    []checkers.Finding
	entries uint64
}

func (c *crashFindings) Checked(ctx context.Context, n int) error {
	c.mu.Lock()
	c.entries += uint64(n)
	c.mu.Unlock()
	return ctx.Err()
}

func (c *crashFindings) Found(f checkers.Finding) {
	c.mu.Lock()
	c.list = append(c.list, f)
	c.mu.Unlock()
}

// parseCheckpointText parses a C2SP checkpoint body: origin, decimal size,
// base64 root hash, each line ending in a newline (extension lines may
// follow).
func parseCheckpointText(text string) (origin string, size uint64, root tlog.Hash, err error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 {
		return "", 0, root, fmt.Errorf("checkpoint %q has fewer than 3 lines", text)
	}
	size, err = strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return "", 0, root, fmt.Errorf("checkpoint size %q", lines[1])
	}
	root, err = tlog.ParseHash(lines[2])
	if err != nil {
		return "", 0, root, fmt.Errorf("checkpoint root %q: %v", lines[2], err)
	}
	return lines[0], size, root, nil
}

// daemon is one run of the auditd binary.
type daemon struct {
	run    int
	cmd    *exec.Cmd
	url    string
	client *http.Client
	stderr *lineBuffer
	exited chan struct{}
	err    error // Wait's result, set before exited is closed
}

var servingAddr = regexp.MustCompile(`msg="auditd serving".* addr=(http://127\.0\.0\.1:[0-9]+)`)

func startDaemon(ctx context.Context, bin, dataDir string, run int) (*daemon, error) {
	return startDaemonArgs(ctx, bin, run, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "20ms", "--log-format", "text")
}

// startDaemonArgs runs the binary with args (a serve on 127.0.0.1:0 with text
// logs) and waits until it serves and answers /healthz.
func startDaemonArgs(ctx context.Context, bin string, run int, args ...string) (*daemon, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout = io.Discard
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &daemon{
		run: run, cmd: cmd, stderr: &lineBuffer{}, exited: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 20 * time.Second},
	}
	addr := make(chan string, 1)
	go func() {
		br := bufio.NewReader(pipe)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				line = strings.TrimRight(line, "\n")
				d.stderr.add(line)
				if m := servingAddr.FindStringSubmatch(line); m != nil {
					select {
					case addr <- m[1]:
					default:
					}
				}
			}
			if err != nil {
				break
			}
		}
		d.err = cmd.Wait()
		close(d.exited)
	}()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case d.url = <-addr:
	case <-d.exited:
		return d, fmt.Errorf("exited before serving: %v", d.err)
	case <-sctx.Done():
		d.kill()
		return d, fmt.Errorf("not serving after 30s: %w", sctx.Err())
	}
	for {
		code, _, err := d.get(sctx, "/healthz")
		if err == nil && code == http.StatusOK {
			return d, nil
		}
		select {
		case <-d.exited:
			return d, fmt.Errorf("exited before healthy: %v", d.err)
		case <-sctx.Done():
			d.kill()
			return d, fmt.Errorf("not healthy after 30s: %v (%w)", err, sctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (d *daemon) stop(ctx context.Context) error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-d.exited:
		return d.err
	case <-ctx.Done():
		d.kill()
		return fmt.Errorf("no exit after SIGTERM: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		d.kill()
		return errors.New("no exit within 30s of SIGTERM")
	}
}

func (d *daemon) exitStatus() string {
	select {
	case <-d.exited:
		if d.err == nil {
			return "exited 0"
		}
		return d.err.Error()
	default:
		return "running"
	}
}

func (d *daemon) get(ctx context.Context, path string) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, d.url+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func (d *daemon) getJSON(ctx context.Context, path string, v any) error {
	code, body, err := d.get(ctx, path)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: status %d: %.300s", path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w: %.300s", path, err, body)
	}
	return nil
}

func (d *daemon) getText(ctx context.Context, path string) (string, error) {
	code, body, err := d.get(ctx, path)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("GET %s: status %d: %.300s", path, code, body)
	}
	return string(body), nil
}

// lineBuffer keeps the last lines a daemon wrote to stderr.
type lineBuffer struct {
	mu sync.Mutex
	ls []string
}

func (b *lineBuffer) add(l string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ls) >= 2000 {
		b.ls = slices.Delete(b.ls, 0, 1000)
	}
	b.ls = append(b.ls, l)
}

func (b *lineBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ls)
}
