// Package submit is the log side of witnessing: after the ledger signs a
// checkpoint, it sends it to each configured witness with add-checkpoint
// (c2sp.org/tlog-witness) and the consistency proof from the witness's
// last size, keeps the cosignatures, and reports each witness's lag and
// errors. It runs beside the ledger and never holds up an append.
package submit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/redact"
	"github.com/auditd/auditd/internal/redirect"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/witness"
)

// Witness is a witness the log submits its checkpoints to.
type Witness struct {
	// URL is the witness's base URL; requests go to URL/add-checkpoint.
	URL string
	// Verifier checks its cosignatures (a cosignature/v1 key); its name
	// labels the witness in metrics and status.
	Verifier note.Verifier
	// HTTP, if set, sends this witness's requests instead of
	// Options.HTTP (an https witness with its own CA or client
	// certificate).
	HTTP *http.Client
	// Logs are the log names or path.Match patterns ("payments.*") whose
	// checkpoints go to this witness; empty means every log. A witness
	// that knows only some logs would answer the others with errors
	// forever.
	Logs []string
}

// Covers reports whether the witness takes log's checkpoints.
func (w Witness) Covers(log string) bool {
	if len(w.Logs) == 0 {
		return true
	}
	for _, p := range w.Logs {
		if ok, _ := path.Match(p, log); ok || p == log {
			return true
		}
	}
	return false
}

// Log is the part of a ledger log the submitter reads. *ledger.Log
// implements it.
type Log interface {
	Name() string
	Checkpoint() *ledger.SignedCheckpoint
	WaitCheckpoint(ctx context.Context, size uint64) (*ledger.SignedCheckpoint, error)
	ConsistencyProof(from, to uint64) ([]merkle.Hash, error)
	// Forked puts the log read-only on a witness's evidence that it
	// forked (see ledger.Log.Forked).
	Forked(source, detail string) *ledger.IntegrityError
}

var _ Log = (*ledger.Log)(nil)

// Logs lists the logs to submit the checkpoints of. It is asked again
// every Options.LogPoll, so logs created later are picked up.
type Logs func() []Log

// Options tune a Submitter. Zero values take the defaults.
type Options struct {
	HTTP       *http.Client  // default: 10s timeout
	LogPoll    time.Duration // default 1s
	MinBackoff time.Duration // default 100ms
	MaxBackoff time.Duration // default 30s
	Logger     *slog.Logger
	// OnCosigned and OnError, if set, are called after each cosignature
	// held and each failed submission (tests and benchmarks wait on them).
	OnCosigned func(log, witness string, size uint64)
	OnError    func(log, witness string, err error)
}

// Submitter sends checkpoints to witnesses and holds their cosignatures.
type Submitter struct {
	logs      Logs
	witnesses []Witness
	opts      Options
	log       *slog.Logger

	mu    sync.Mutex
	state map[string][]*state // log -> one per witness, in config order
	open  map[string]Log      // the logs followed

	submissions *prometheus.CounterVec
	lag         *lagCollector
	delay       *prometheus.HistogramVec
}

// state is what the submitter knows of one witness for one log.
type state struct {
	cosigned  uint64 // size of the checkpoint held cosigned
	have      bool   // a cosignature is held
	lines     []byte // its cosignature lines
	lastErr   string
	lastErrAt time.Time
	errors    uint64
}

// New returns a submitter of logs' checkpoints to witnesses.
func New(logs Logs, witnesses []Witness, opts Options) (*Submitter, error) {
	seen := map[string]bool{}
	for i, w := range witnesses {
		if w.URL == "" || w.Verifier == nil {
			return nil, fmt.Errorf("submit: witness %d: url and verifier key are required", i)
		}
		if seen[w.Verifier.Name()] {
			return nil, fmt.Errorf("submit: witness %q listed twice", w.Verifier.Name())
		}
		seen[w.Verifier.Name()] = true
		for _, p := range w.Logs {
			if _, err := path.Match(p, ""); p == "" || err != nil {
				return nil, fmt.Errorf("submit: witness %q: logs: %q is not a log name or a path.Match pattern", w.Verifier.Name(), p)
			}
		}
	}
	if opts.HTTP == nil {
		opts.HTTP = &http.Client{Timeout: 10 * time.Second, CheckRedirect: redirect.SameOrigin}
	}
	if opts.LogPoll <= 0 {
		opts.LogPoll = time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Submitter{
		logs: logs, witnesses: witnesses, opts: opts, log: opts.Logger, state: map[string][]*state{},
		submissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "witness_submissions_total",
			Help: "add-checkpoint requests sent to witnesses, by witness and result (ok, conflict, error, fork).",
		}, []string{"witness", "result"}),
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "witness_cosignature_delay_seconds",
			Help:    "Time from seeing a signed checkpoint to holding a witness's cosignature of it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"witness"}),
		open: map[string]Log{},
	}
	s.lag = &lagCollector{s: s, desc: prometheus.NewDesc("witness_lag_entries",
		"Entries the latest checkpoint a witness cosigned is behind the log's latest checkpoint (all of them before its first cosignature).",
		[]string{"log", "witness"}, nil)}
	return s, nil
}

// Collectors returns the submitter's Prometheus collectors.
func (s *Submitter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.submissions, s.lag, s.delay}
}

// Run submits checkpoints until ctx ends: one goroutine per log and
// witness, each woken by the log's new checkpoints.
func (s *Submitter) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(s.opts.LogPoll)
	defer t.Stop()
	for {
		for _, l := range s.logs() {
			s.mu.Lock()
			_, started := s.state[l.Name()]
			if !started {
				st := make([]*state, len(s.witnesses)) // nil: the witness does not take this log
				for i, w := range s.witnesses {
					if w.Covers(l.Name()) {
						st[i] = &state{}
					}
				}
				s.state[l.Name()] = st
				s.open[l.Name()] = l
			}
			s.mu.Unlock()
			if started {
				continue
			}
			for i, w := range s.witnesses {
				if !w.Covers(l.Name()) {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.follow(ctx, l, i)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// follow submits each new checkpoint of l to witness i, retrying with
// backoff.
func (s *Submitter) follow(ctx context.Context, l Log, i int) {
	w := s.witnesses[i]
	var old uint64 // the witness's size as last learned (a guess of 0 at first)
	var next uint64
	backoff := s.opts.MinBackoff
	for ctx.Err() == nil {
		cp, err := l.WaitCheckpoint(ctx, next)
		if err != nil {
			if errors.Is(err, ledger.ErrReadOnly) {
				return // it signs nothing more
			}
			if ctx.Err() == nil && !errors.Is(err, ledger.ErrClosed) {
				s.fail(l.Name(), i, fmt.Errorf("waiting for a checkpoint: %w", err))
				s.sleep(ctx, &backoff)
				continue
			}
			return
		}
		seen := time.Now()
		lines, known, err := s.submit(ctx, l, w, old, cp)
		old = known
		var fe *forkError
		if errors.As(err, &fe) {
			// Positive evidence against this log: it signs nothing more,
			// so there is nothing more to submit.
			s.fail(l.Name(), i, err)
			s.submissions.WithLabelValues(w.Verifier.Name(), "fork").Inc()
			l.Forked("witness "+w.Verifier.Name(), fe.detail)
			return
		}
		if err != nil {
			s.fail(l.Name(), i, err)
			s.sleep(ctx, &backoff)
			continue
		}
		backoff = s.opts.MinBackoff
		s.delay.WithLabelValues(w.Verifier.Name()).Observe(time.Since(seen).Seconds())
		s.mu.Lock()
		st := s.state[l.Name()][i]
		st.cosigned, st.have, st.lines = cp.Size, true, lines
		s.mu.Unlock()
		if f := s.opts.OnCosigned; f != nil {
			f(l.Name(), w.Verifier.Name(), cp.Size)
		}
		next = cp.Size + 1
	}
}

func (s *Submitter) sleep(ctx context.Context, backoff *time.Duration) {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	*backoff = min(2**backoff, s.opts.MaxBackoff)
}

func (s *Submitter) fail(log string, i int, err error) {
	name := s.witnesses[i].Verifier.Name()
	// An error of net/http or of url.Parse may quote the URL.
	err = redact.Error(err, s.witnesses[i].URL)
	s.submissions.WithLabelValues(name, "error").Inc()
	s.mu.Lock()
	st := s.state[log][i]
	st.lastErr, st.lastErrAt = err.Error(), time.Now()
	st.errors++
	s.mu.Unlock()
	s.log.Warn("witness: submitting a checkpoint failed", "log", log, "witness", name, "err", err)
	if f := s.opts.OnError; f != nil {
		f(log, name, err)
	}
}

// forkError is a witness's answer that is positive evidence the log
// forked: the witness verified, with the log's key, a checkpoint that the
// log's own latest checkpoint contradicts. A witness cosigns only what
// verifies with the log's key and is consistent with what it cosigned
// before, so it holds a larger size than the log ever signed only if the
// log (or another signer with its key) signed it, and it refuses our
// consistency proof, or holds another root at our size, only if the
// history it cosigned is not ours.
type forkError struct{ detail string }

func (e *forkError) Error() string { return "fork: " + e.detail }

// submit sends cp to w, from the witness's size old; on 409 it learns the
// witness's size and sends again. It returns the verified cosignature
// lines and the witness's size as last learned, or a *forkError when the
// witness's answer contradicts cp:
//   - 409 with a size larger than cp's;
//   - 409 again when sent cp's own size (the witness holds another root at
//     that size: c2sp.org/tlog-witness);
//   - 422: the consistency proof from the witness's size to cp, built from
//     the log's own tree, does not verify against what the witness holds.
func (s *Submitter) submit(ctx context.Context, l Log, w Witness, old uint64, cp *ledger.SignedCheckpoint) ([]byte, uint64, error) {
	for try := 0; ; try++ {
		if old > cp.Size {
			return nil, old, &forkError{fmt.Sprintf("witness %s holds a checkpoint of size %d signed with the log's key, larger than the log's latest checkpoint (size %d, root %s): the log was rolled back, or another instance signs with its key", w.Verifier.Name(), old, cp.Size, cp.Root)}
		}
		var proof []merkle.Hash
		if old > 0 && old < cp.Size {
			p, err := l.ConsistencyProof(old, cp.Size)
			if err != nil {
				return nil, old, fmt.Errorf("consistency proof %d to %d: %w", old, cp.Size, err)
			}
			proof = p
		}
		body := (&witness.Request{OldSize: old, Proof: proof, Checkpoint: cp.Note}).Marshal()
		status, resp, err := s.post(ctx, w, body)
		if err != nil {
			return nil, old, err
		}
		switch status {
		case http.StatusOK:
			s.submissions.WithLabelValues(w.Verifier.Name(), "ok").Inc()
			lines, err := checkCosignature(cp.Note, resp, w.Verifier)
			return lines, cp.Size, err
		case http.StatusConflict:
			s.submissions.WithLabelValues(w.Verifier.Name(), "conflict").Inc()
			known, err := strconv.ParseUint(strings.TrimSpace(string(resp)), 10, 64)
			if err != nil {
				return nil, old, fmt.Errorf("409 from witness %s without a size: %q", w.Verifier.Name(), trim(resp))
			}
			if try > 0 && known == old {
				if old == cp.Size {
					return nil, old, &forkError{fmt.Sprintf("witness %s holds another checkpoint of size %d than the log's (root %s): two checkpoints of one size signed with the log's key", w.Verifier.Name(), cp.Size, cp.Root)}
				}
				return nil, old, fmt.Errorf("witness %s answers 409 with size %d, the size sent", w.Verifier.Name(), known)
			}
			old = known
			if try >= 2 {
				return nil, old, fmt.Errorf("witness %s: sizes keep changing (last %d)", w.Verifier.Name(), known)
			}
			continue
		case http.StatusUnprocessableEntity:
			return nil, old, &forkError{fmt.Sprintf("witness %s refuses the consistency proof from its size %d to the log's checkpoint (size %d, root %s), built from the log's own tree: the history it cosigned is not the log's (%s)", w.Verifier.Name(), old, cp.Size, cp.Root, strings.TrimSpace(trim(resp)))}
		}
		return nil, old, fmt.Errorf("witness %s: %d: %s", w.Verifier.Name(), status, trim(resp))
	}
}

func (s *Submitter) post(ctx context.Context, w Witness, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(w.URL, "/")+"/add-checkpoint", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	hc := s.opts.HTTP
	if w.HTTP != nil {
		hc = w.HTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the witness's answer: %w", err)
	}
	return resp.StatusCode, b, nil
}

// checkCosignature returns the lines of resp that are cosignatures of the
// checkpoint by v, and an error if there is none.
func checkCosignature(signed, resp []byte, v note.Verifier) ([]byte, error) {
	var out []byte
	for _, line := range strings.SplitAfter(string(resp), "\n") {
		if line == "" || !strings.HasSuffix(line, "\n") {
			continue
		}
		n, err := merkle.OpenNote(append(append([]byte(nil), signed...), line...), note.VerifierList(v))
		if err == nil && len(n.Sigs) == 1 {
			out = append(out, line...)
		}
	}
	if out == nil {
		return nil, fmt.Errorf("witness %s answered 200 without a valid cosignature: %q", v.Name(), trim(resp))
	}
	return out, nil
}

func trim(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}

// Cosigned returns cp's note with the cosignature lines of every witness
// that cosigned exactly cp appended.
func (s *Submitter) Cosigned(log string, cp *ledger.SignedCheckpoint) []byte {
	out := cp.Note
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.state[log] {
		if st != nil && st.have && st.cosigned == cp.Size {
			out = append(append([]byte(nil), out...), st.lines...)
		}
	}
	return out
}

// Status is one witness's state for one log, as GET /v1/logs/{log} shows
// it.
type Status struct {
	Witness       string    `json:"witness"`
	URL           string    `json:"url"` // without its password (redact.URL)
	CosignedSize  *uint64   `json:"cosigned_size"`
	Lag           uint64    `json:"lag"`
	Errors        uint64    `json:"errors"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
}

// Status reports the state of each witness that takes log, given the
// log's latest checkpoint size.
func (s *Submitter) Status(log string, size uint64) []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.witnesses))
	for i, w := range s.witnesses {
		if !w.Covers(log) {
			continue
		}
		ws := Status{Witness: w.Verifier.Name(), URL: redact.URL(w.URL), Lag: size}
		if st := s.stateOf(log, i); st != nil {
			if st.have {
				c := st.cosigned
				ws.CosignedSize, ws.Lag = &c, size-min(c, size)
			}
			ws.Errors, ws.LastError, ws.LastErrorTime = st.errors, st.lastErr, st.lastErrAt
		}
		out = append(out, ws)
	}
	return out
}

func (s *Submitter) stateOf(log string, i int) *state {
	if st := s.state[log]; st != nil {
		return st[i]
	}
	return nil
}

// lagCollector reports each witness's lag when scraped, so a witness
// whose request hangs still shows the log moving away from it.
type lagCollector struct {
	s    *Submitter
	desc *prometheus.Desc
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, l := range s.open {
		cp := l.Checkpoint()
		if cp == nil {
			continue
		}
		for i, st := range s.state[name] {
			if st == nil {
				continue // the witness does not take this log
			}
			lag := cp.Size
			if st.have {
				lag -= min(st.cosigned, cp.Size)
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(lag), name, s.witnesses[i].Verifier.Name())
		}
	}
}
