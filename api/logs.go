package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

type logOut struct {
	Name     string      `json:"name"`
	Size     uint64      `json:"size"`
	RootHash merkle.Hash `json:"root_hash"`
}

func (s *Server) listLogs(w http.ResponseWriter, r *http.Request) {
	infos, next, err := pageLogs(s.store.Logs(), r)
	if err != nil {
		s.badParam(w, err)
		return
	}
	out := make([]logOut, len(infos))
	for i, li := range infos {
		out[i] = logOut{Name: li.Name, Size: li.Size, RootHash: li.Root}
	}
	if next != "" {
		w.Header().Set("Link", "<"+next+`>; rel="next"`)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) logOf(w http.ResponseWriter, r *http.Request) (*ledger.Log, bool) {
	l, err := s.store.Log(chi.URLParam(r, "log"))
	if err != nil {
		s.writeErr(w, r, err)
		return nil, false
	}
	return l, true
}

type checkpointOut struct {
	Size     uint64      `json:"size"`
	RootHash merkle.Hash `json:"root_hash"`
	Note     string      `json:"note"`
}

func (s *Server) getLog(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	// Size and root come from one snapshot of the committed tree; the tree
	// is not recomputed from tiles.
	li := l.Info()
	out := struct {
		logOut
		Origin     string         `json:"origin"`
		Checkpoint *checkpointOut `json:"checkpoint,omitempty"`
		Source     any            `json:"source,omitempty"`
		Error      string         `json:"error,omitempty"`
		// ReadOnly says why the log takes no appends: it was opened
		// read-only (--rollback-read-only) behind a checkpoint it signed,
		// or a witness or peer gave evidence that it forked.
		ReadOnly  string `json:"read_only,omitempty"`
		Witnesses any    `json:"witnesses,omitempty"`
	}{logOut: logOut{Name: li.Name, Size: li.Size, RootHash: li.Root}, Origin: l.Origin()}
	if src := s.parts.Sources; src != nil {
		if st, ok := src.Status(li.Name); ok {
			out.Source = st
		}
	}
	if cp := l.Checkpoint(); cp != nil {
		out.Checkpoint = &checkpointOut{Size: cp.Size, RootHash: cp.Root, Note: string(cp.Note)}
	}
	if err := l.Err(); err != nil {
		out.Error = err.Error()
	}
	if err := l.ReadOnly(); err != nil {
		out.ReadOnly = err.Error()
	}
	out.Witnesses = s.witnessStatus(l)
	writeJSON(w, http.StatusOK, out)
}

// renderEntry renders a record in the API's entry form (client.Entry);
// forceBase64 serves even JSON payloads as payload_base64, for clients that
// cannot keep a JSON value's exact bytes.
func renderEntry(rec *ledger.Record, forceBase64 bool) client.Entry {
	l := &rec.Leaf
	out := client.Entry{
		Index:         rec.Index,
		ID:            l.ID,
		Time:          time.Unix(0, l.Time).UTC().Format(time.RFC3339Nano),
		TimeAssigned:  l.TimeAssigned,
		Source:        l.Source,
		PayloadPruned: rec.PayloadPruned,
		PayloadSHA256: base64.StdEncoding.EncodeToString(l.PayloadSHA256[:]),
		Leaf:          base64.StdEncoding.EncodeToString(rec.LeafBytes),
		LeafHash:      rec.LeafHash,
		Headers:       l.Headers,
		Marks:         merkle.MarkNames(l.Marks),
	}
	if l.HasKey {
		if utf8.Valid(l.Key) {
			k := string(l.Key)
			out.Key = &k
		} else {
			k := base64.StdEncoding.EncodeToString(l.Key)
			out.KeyBase64 = &k
		}
	}
	if !rec.PayloadPruned {
		if rec.PayloadJSON && !forceBase64 && isCompactJSON(rec.Payload) {
			out.Payload = rec.Payload
		} else {
			p := base64.StdEncoding.EncodeToString(rec.Payload)
			out.PayloadBase64 = &p
		}
	}
	return out
}

// isCompactJSON reports whether b is a JSON value encoding/json will write
// byte for byte: valid and without insignificant whitespace.
func isCompactJSON(b []byte) bool {
	var buf bytes.Buffer
	buf.Grow(len(b))
	return json.Compact(&buf, b) == nil && bytes.Equal(buf.Bytes(), b)
}

func (s *Server) getEntry(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	idx, err := parseUint("index", chi.URLParam(r, "index"))
	if err != nil {
		s.badParam(w, err)
		return
	}
	rec, err := l.Entry(idx)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, withLedgeredAt(l, rec, renderEntry(rec, r.URL.Query().Get("payload") == "base64")))
}

// withLedgeredAt adds to a single entry's rendering when the log ledgered
// it, where it was recorded.
func withLedgeredAt(l *ledger.Log, rec *ledger.Record, e client.Entry) client.Entry {
	if t, ok, err := l.LedgeredAt(rec.Index); err == nil && ok {
		t = t.UTC()
		e.LedgeredAt = &t
	}
	return e
}

func (s *Server) getEntryByID(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if q.Has("start") && !q.Has("id") {
		s.listEntries(w, r, l)
		return
	}
	if !q.Has("id") {
		writeError(w, http.StatusBadRequest, "invalid_parameter", "pass ?id=EVENT_ID or ?start=INDEX&end=INDEX, or GET /entries/{index}", nil)
		return
	}
	rec, err := l.EntryByID(q.Get("id"))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, withLedgeredAt(l, rec, renderEntry(rec, r.URL.Query().Get("payload") == "base64")))
}

// maxListEntries bounds the entries of one GET /entries?start=&end=.
const maxListEntries = 10_000

// listEntries serves the entries [start, end) (end defaults to start+1000
// and is capped at the tree size and maxListEntries) as {"entries": [...]},
// with "next" (and a Link rel="next" header) when the page stopped short:
// before the end asked for, or, with no end, before the tree's size.
func (s *Server) listEntries(w http.ResponseWriter, r *http.Request, l *ledger.Log) {
	q := r.URL.Query()
	start, err := parseUint("start", q.Get("start"))
	if err != nil {
		s.badParam(w, err)
		return
	}
	end := start + min(1000, ^uint64(0)-start) // no wrap past 2^64-1
	if q.Has("end") {
		if end, err = parseUint("end", q.Get("end")); err != nil {
			s.badParam(w, err)
			return
		}
	}
	size := l.Size()
	if start > end || start > size {
		writeError(w, http.StatusBadRequest, "out_of_range", fmt.Sprintf("entries [%d, %d) of a tree of size %d", start, end, size), nil)
		return
	}
	asked := end
	end = min(end, size, start+maxListEntries)
	out := struct {
		Entries []client.Entry `json:"entries"`
		// Next is the start of the next page; absent on the last one.
		Next *uint64 `json:"next,omitempty"`
	}{Entries: make([]client.Entry, 0, end-start)}
	if end < size && (!q.Has("end") || end < asked) {
		out.Next = &end
		nq := url.Values{"start": {strconv.FormatUint(end, 10)}}
		for _, k := range []string{"end", "payload"} {
			if q.Has(k) {
				nq.Set(k, q.Get(k))
			}
		}
		w.Header().Set("Link", "<"+r.URL.Path+"?"+nq.Encode()+`>; rel="next"`)
	}
	base64 := q.Get("payload") == "base64"
	err = l.Entries(r.Context(), start, end, func(rec *ledger.Record) error {
		out.Entries = append(out.Entries, renderEntry(rec, base64))
		return nil
	})
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	cp := l.Checkpoint()
	if cp == nil {
		writeError(w, http.StatusNotFound, "no_checkpoint", "the log has no signed checkpoint yet", nil)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(s.cosigned(l, cp))
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	from, err := optUint(q.Get("from"), "from", 0)
	if err != nil {
		s.badParam(w, err)
		return
	}
	limit, err := optUint(q.Get("limit"), "limit", 100)
	if err != nil || limit == 0 || limit > 1000 {
		s.badParam(w, errors.New("limit must be 1..1000"))
		return
	}
	cps, err := l.Checkpoints(from, ^uint64(0), int(limit))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	out := make([]checkpointOut, len(cps))
	for i, cp := range cps {
		out[i] = checkpointOut{Size: cp.Size, RootHash: cp.Root, Note: string(cp.Note)}
	}
	writeJSON(w, http.StatusOK, out)
}

type inclusionOut struct {
	Index      uint64        `json:"index"`
	Size       uint64        `json:"size"`
	LeafHash   merkle.Hash   `json:"leaf_hash"`
	Hashes     []merkle.Hash `json:"hashes"`
	Checkpoint string        `json:"checkpoint,omitempty"`
}

func (s *Server) getInclusion(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var index uint64
	var leafHash merkle.Hash
	var err error
	given := 0
	for _, k := range []string{"index", "id", "hash"} {
		if q.Has(k) {
			given++
		}
	}
	if given != 1 {
		s.badParam(w, errors.New("pass exactly one of index, id or hash"))
		return
	}
	switch {
	case q.Has("index"):
		if index, err = parseUint("index", q.Get("index")); err != nil {
			s.badParam(w, err)
			return
		}
	case q.Has("id"):
		rec, err := l.EntryByID(q.Get("id"))
		if err != nil {
			s.writeErr(w, r, err)
			return
		}
		index, leafHash = rec.Index, rec.LeafHash
	case q.Has("hash"):
		h, err := merkle.ParseHash(q.Get("hash"))
		if err != nil {
			s.badParam(w, fmt.Errorf("hash=%s is not a base64 SHA-256 hash", echo(q.Get("hash"))))
			return
		}
		if index, err = l.IndexByLeafHash(h); err != nil {
			s.writeErr(w, r, err)
			return
		}
		leafHash = h
	}
	out := inclusionOut{Index: index}
	if q.Has("size") {
		if out.Size, err = parseUint("size", q.Get("size")); err != nil {
			s.badParam(w, err)
			return
		}
	} else {
		cp := l.Checkpoint()
		if cp == nil {
			writeError(w, http.StatusNotFound, "no_checkpoint", "the log has no signed checkpoint yet; pass size", nil)
			return
		}
		out.Size, out.Checkpoint = cp.Size, string(cp.Note)
	}
	if index >= out.Size {
		writeError(w, http.StatusBadRequest, "out_of_range", fmt.Sprintf("index %d is not below tree size %d", index, out.Size), nil)
		return
	}
	// The proof is verified against the signed checkpoint (or the root the
	// log vouches for at size) before it is served: an altered hash on its
	// path answers integrity, never a wrong proof.
	leaf, hashes, err := l.VerifiedLeafInclusion(index, out.Size)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if leafHash != (merkle.Hash{}) && leaf != leafHash {
		s.writeErr(w, r, fmt.Errorf("ledger: %s: leaf %d hash %s differs from its index entry %s", l.Name(), index, leaf, leafHash))
		return
	}
	out.LeafHash, out.Hashes = leaf, hashes
	writeJSON(w, http.StatusOK, out)
}

type consistencyOut struct {
	From   uint64        `json:"from"`
	To     uint64        `json:"to"`
	Hashes []merkle.Hash `json:"hashes"`
}

func (s *Server) getConsistency(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	from, err := parseUint("from", q.Get("from"))
	if err != nil {
		s.badParam(w, err)
		return
	}
	to, err := parseUint("to", q.Get("to"))
	if err != nil {
		s.badParam(w, err)
		return
	}
	if from > to {
		writeError(w, http.StatusBadRequest, "out_of_range", fmt.Sprintf("from %d is greater than to %d", from, to), nil)
		return
	}
	hs, err := l.ConsistencyProof(from, to)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, consistencyOut{From: from, To: to, Hashes: hs})
}

func (s *Server) badParam(w http.ResponseWriter, err error) {
	writeError(w, http.StatusBadRequest, "invalid_parameter", err.Error(), nil)
}

func parseUint(name, v string) (uint64, error) {
	if v == "" {
		return 0, fmt.Errorf("%s is required", name)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%s is not a non-negative integer", name, echo(v))
	}
	return n, nil
}

func optUint(v, name string, def uint64) (uint64, error) {
	if v == "" {
		return def, nil
	}
	return parseUint(name, v)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
