package api_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func strp(s string) *string { return &s }

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// openCheckpoint verifies a signed checkpoint twice: with note.Open and a
// hand parse of the C2SP body, and with merkle.OpenCheckpoint. It returns
// the checkpoint.
func openCheckpoint(t testing.TB, env *testEnv, log, signed string) merkle.Checkpoint {
	t.Helper()
	n, err := note.Open([]byte(signed), note.VerifierList(env.verifier))
	if err != nil {
		t.Fatalf("note.Open(%q): %v", signed, err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) != 4 || lines[3] != "" {
		t.Fatalf("checkpoint body %q: want 3 lines", n.Text)
	}
	if want := testKeyName + "/" + log; lines[0] != want {
		t.Errorf("checkpoint origin %q, want %q", lines[0], want)
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		t.Errorf("checkpoint size line %q is not a canonical decimal", lines[1])
	}
	root, err := merkle.ParseHash(lines[2])
	if err != nil {
		t.Errorf("checkpoint root line %q: %v", lines[2], err)
	}
	cp, err := merkle.OpenCheckpoint([]byte(signed), env.verifier, testKeyName+"/"+log)
	if err != nil {
		t.Fatalf("merkle.OpenCheckpoint: %v", err)
	}
	if cp.Size != size || cp.Root != root {
		t.Errorf("merkle.OpenCheckpoint = %d %s, note.Open body says %d %s", cp.Size, cp.Root, size, root)
	}
	return cp
}

// verifyInclusion checks an audit path with auditd's merkle package and,
// independently, with golang.org/x/mod/sumdb/tlog.
func verifyInclusion(t testing.TB, index, size uint64, leaf merkle.Hash, path []merkle.Hash, root merkle.Hash) {
	t.Helper()
	if err := merkle.VerifyInclusion(index, size, leaf, path, root); err != nil {
		t.Errorf("merkle.VerifyInclusion(%d, %d): %v", index, size, err)
	}
	if err := tlog.CheckRecord(toTlog(path), int64(size), tlog.Hash(root), int64(index), tlog.Hash(leaf)); err != nil {
		t.Errorf("tlog.CheckRecord(%d, %d): %v", index, size, err)
	}
}

// orderEvents is a batch exercising every event field.
var orderEvents = []string{
	`{"id":"ev-1","key":"cust-42","time":"2024-05-01T12:00:00.123456789+02:00","payload":{"amount": 10, "note": "a < b && c > d"}}`,
	`{"id":"ev-2","time":"2024-05-01T10:00:01Z","payload_base64":"AAECAw=="}`,
	`{"key_base64":"/w==","time":"2024-05-01T10:00:02Z","payload":[1, 2,3]}`,
}

// orderLeafHashes computes the leaf hashes of orderEvents posted to log,
// and the derived id of the third.
func orderLeafHashes(t testing.TB, log string) ([3]merkle.Hash, string) {
	t.Helper()
	derived := ledger.DeriveID(&ledger.Entry{HasKey: true, Key: []byte{0xff}, Time: mustTime(t, "2024-05-01T10:00:02Z"), Payload: []byte("[1,2,3]")})
	return [3]merkle.Hash{
		leafHashOf(t, log, "ev-1", strp("cust-42"), mustTime(t, "2024-05-01T10:00:00.123456789Z"), []byte(`{"amount":10,"note":"a < b && c > d"}`)),
		leafHashOf(t, log, "ev-2", nil, mustTime(t, "2024-05-01T10:00:01Z"), []byte{0, 1, 2, 3}),
		leafHashOf(t, log, derived, strp("\xff"), mustTime(t, "2024-05-01T10:00:02Z"), []byte("[1,2,3]")),
	}, derived
}

func TestPostNDJSON(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	h, derived := orderLeafHashes(t, "orders")
	body := ndjson(orderEvents...)

	_, r := env.post("orders", "", body)
	want := fmt.Sprintf(`{"size":3,"entries":[`+
		`{"index":0,"id":"ev-1","leaf_hash":"%s","duplicate":false},`+
		`{"index":1,"id":"ev-2","leaf_hash":"%s","duplicate":false},`+
		`{"index":2,"id":"%s","leaf_hash":"%s","duplicate":false}]}`+"\n", h[0], h[1], derived, h[2])
	wantBody(t, "first POST", r.body, want)

	// The same batch again: every event is a duplicate, nothing is added.
	_, r = env.post("orders", "", body)
	wantBody(t, "second POST", r.body, strings.ReplaceAll(want, `"duplicate":false`, `"duplicate":true`))

	// NDJSON with CRLF line ends and blank lines, one new event, one old.
	_, r = env.post("orders", "", "\r\n"+orderEvents[1]+"\r\n\r\n   \r\n"+`{"id":"ev-4","time":"2024-05-01T10:00:04Z","payload":"four"}`)
	h4 := leafHashOf(t, "orders", "ev-4", nil, mustTime(t, "2024-05-01T10:00:04Z"), []byte(`"four"`))
	wantBody(t, "CRLF POST", r.body, fmt.Sprintf(`{"size":4,"entries":[`+
		`{"index":1,"id":"ev-2","leaf_hash":"%s","duplicate":true},`+
		`{"index":3,"id":"ev-4","leaf_hash":"%s","duplicate":false}]}`+"\n", h[1], h4))

	// The entries as stored, to the byte.
	leaf := func(id string, key []byte, hasKey bool, ts string, payload []byte) string {
		l := merkle.Leaf{Log: "orders", ID: id, HasKey: hasKey, Key: key, Time: mustTime(t, ts).UnixNano(), PayloadSHA256: sha256.Sum256(payload)}
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b64(b)
	}
	sum := func(p []byte) string { s := sha256.Sum256(p); return b64(s[:]) }
	p0 := []byte(`{"amount":10,"note":"a < b && c > d"}`)
	wantEntries := []string{
		fmt.Sprintf(`{"index":0,"id":"ev-1","key":"cust-42","time":"2024-05-01T10:00:00.123456789Z","time_assigned":false,"payload":%s,"payload_sha256":"%s","leaf":"%s","leaf_hash":"%s"}`+"\n",
			p0, sum(p0), leaf("ev-1", []byte("cust-42"), true, "2024-05-01T10:00:00.123456789Z", p0), h[0]),
		fmt.Sprintf(`{"index":1,"id":"ev-2","time":"2024-05-01T10:00:01Z","time_assigned":false,"payload_base64":"AAECAw==","payload_sha256":"%s","leaf":"%s","leaf_hash":"%s"}`+"\n",
			sum([]byte{0, 1, 2, 3}), leaf("ev-2", nil, false, "2024-05-01T10:00:01Z", []byte{0, 1, 2, 3}), h[1]),
		fmt.Sprintf(`{"index":2,"id":"%s","key_base64":"/w==","time":"2024-05-01T10:00:02Z","time_assigned":false,"payload":[1,2,3],"payload_sha256":"%s","leaf":"%s","leaf_hash":"%s"}`+"\n",
			derived, sum([]byte("[1,2,3]")), leaf(derived, []byte{0xff}, true, "2024-05-01T10:00:02Z", []byte("[1,2,3]")), h[2]),
	}
	ids := []string{"ev-1", "ev-2", derived}
	// A single entry also says when it was ledgered (not committed by the
	// tree: compared apart).
	ledgered := regexp.MustCompile(`,"ledgered_at":"([^"]+)"`)
	single := func(what string, body []byte) []byte {
		t.Helper()
		m := ledgered.FindSubmatch(body)
		if m == nil {
			t.Errorf("%s: no ledgered_at in %s", what, body)
			return body
		}
		if at, err := time.Parse(time.RFC3339Nano, string(m[1])); err != nil || time.Since(at) > time.Hour || time.Since(at) < 0 {
			t.Errorf("%s: ledgered_at %s, want a moment ago", what, m[1])
		}
		return ledgered.ReplaceAll(body, nil)
	}
	for i, want := range wantEntries {
		r := env.getJSON(fmt.Sprintf("/v1/logs/orders/entries/%d", i), nil)
		wantBody(t, fmt.Sprintf("GET entries/%d", i), single("GET entries", r.body), want)
		r = env.getJSON("/v1/logs/orders/entries?id="+url.QueryEscape(ids[i]), nil)
		wantBody(t, fmt.Sprintf("GET entries?id=%s", ids[i]), single("GET entries?id", r.body), want)
		var e entryJSON
		if err := json.Unmarshal(r.body, &e); err != nil {
			t.Fatal(err)
		}
		recomputeLeaf(t, "orders", e)
	}
}

func TestPostJSONArray(t *testing.T) {
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	h, derived := orderLeafHashes(t, "orders")
	body := "  \n[\n  " + strings.Join(orderEvents, ",\n  ") + "\n]\n"
	_, r := env.post("orders", "", body)
	want := fmt.Sprintf(`{"size":3,"entries":[`+
		`{"index":0,"id":"ev-1","leaf_hash":"%s","duplicate":false},`+
		`{"index":1,"id":"ev-2","leaf_hash":"%s","duplicate":false},`+
		`{"index":2,"id":"%s","leaf_hash":"%s","duplicate":false}]}`+"\n", h[0], h[1], derived, h[2])
	wantBody(t, "array POST", r.body, want)

	// A pretty-printed event spanning lines: the payload is compacted.
	_, r = env.post("orders", "", `[
  {
    "id": "multi",
    "time": "2024-05-01T10:00:05Z",
    "payload": {
      "nested": [1, 2, {"deep": true}],
      "s": "keep  inner  spaces"
    }
  }
]`)
	hm := leafHashOf(t, "orders", "multi", nil, mustTime(t, "2024-05-01T10:00:05Z"), []byte(`{"nested":[1,2,{"deep":true}],"s":"keep  inner  spaces"}`))
	wantBody(t, "multi-line POST", r.body, fmt.Sprintf(`{"size":4,"entries":[{"index":3,"id":"multi","leaf_hash":"%s","duplicate":false}]}`+"\n", hm))

	// No id and no time: auditd derives the id and stamps the time; a
	// retry is a duplicate of the first (the assigned time is not content).
	ev := `[{"key":"k","payload":{"n":1}}]`
	res1, _ := env.post("orders", "", ev)
	wantID := ledger.DeriveID(&ledger.Entry{HasKey: true, Key: []byte("k"), Payload: []byte(`{"n":1}`)})
	if len(res1.Entries) != 1 || res1.Entries[0].ID != wantID || res1.Entries[0].Index != 4 || res1.Entries[0].Duplicate {
		t.Fatalf("id-less event: got %+v, want new entry 4 with id %s", res1, wantID)
	}
	res2, _ := env.post("orders", "", ev)
	if res2.Size != 5 || len(res2.Entries) != 1 || res2.Entries[0].Index != 4 || !res2.Entries[0].Duplicate || res2.Entries[0].LeafHash != res1.Entries[0].LeafHash {
		t.Fatalf("retry of id-less event: got %+v, want duplicate of entry 4", res2)
	}
	var e entryJSON
	env.getJSON("/v1/logs/orders/entries?id="+wantID, &e)
	if !e.TimeAssigned || e.ID != wantID || string(e.Payload) != `{"n":1}` {
		t.Errorf("id-less event stored as %+v", e)
	}
	if ts, err := time.Parse(time.RFC3339Nano, e.Time); err != nil || time.Since(ts) > time.Minute || time.Since(ts) < 0 {
		t.Errorf("assigned time %q is not the arrival time", e.Time)
	}
	recomputeLeaf(t, "orders", e)
}

func TestPostWaitCheckpoint(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	var leaves []merkle.Hash
	var cps []merkle.Checkpoint
	for round, n := range []int{1, 3, 6} {
		var lines []string
		for i := 0; i < n; i++ {
			lines = append(lines, fmt.Sprintf(`{"id":"r%d-%d","payload":{"round":%d,"i":%d}}`, round, i, round, i))
		}
		res, r := env.post("audit", "wait=checkpoint", ndjson(lines...))
		if res.Checkpoint == "" {
			t.Fatalf("round %d: no checkpoint in %s", round, r.body)
		}
		cp := openCheckpoint(t, env, "audit", res.Checkpoint)
		if cp.Size < res.Size {
			t.Fatalf("round %d: checkpoint size %d does not cover size %d", round, cp.Size, res.Size)
		}
		for i, e := range res.Entries {
			if want := uint64(len(leaves)); e.Index != want || e.ID != fmt.Sprintf("r%d-%d", round, i) || e.Duplicate {
				t.Fatalf("round %d entry %d: got %+v, want new index %d", round, i, e, want)
			}
			leaves = append(leaves, e.LeafHash)
		}
		if root := rfc6962Root(leaves[:cp.Size]); root != cp.Root {
			t.Fatalf("round %d: checkpoint root %s, independent RFC 6962 root %s", round, cp.Root, root)
		}
		for _, e := range res.Entries {
			verifyInclusion(t, e.Index, cp.Size, e.LeafHash, e.InclusionProof, cp.Root)
			// The leaf hash the POST reported is the hash of the served leaf.
			var got entryJSON
			env.getJSON(fmt.Sprintf("/v1/logs/audit/entries/%d", e.Index), &got)
			if got.LeafHash != e.LeafHash {
				t.Errorf("entry %d: POST said leaf hash %s, GET says %s", e.Index, e.LeafHash, got.LeafHash)
			}
			recomputeLeaf(t, "audit", got)
		}
		cps = append(cps, cp)
	}
	// Each checkpoint extends the one before.
	for i := 1; i < len(cps); i++ {
		var c struct {
			From, To uint64
			Hashes   []merkle.Hash
		}
		env.getJSON(fmt.Sprintf("/v1/logs/audit/proof/consistency?from=%d&to=%d", cps[i-1].Size, cps[i].Size), &c)
		if err := merkle.VerifyConsistency(cps[i-1].Size, cps[i].Size, c.Hashes, cps[i-1].Root, cps[i].Root); err != nil {
			t.Errorf("checkpoints %d -> %d: %v", cps[i-1].Size, cps[i].Size, err)
		}
		if err := tlog.CheckTree(toTlog(c.Hashes), int64(cps[i].Size), tlog.Hash(cps[i].Root), int64(cps[i-1].Size), tlog.Hash(cps[i-1].Root)); err != nil {
			t.Errorf("tlog.CheckTree %d -> %d: %v", cps[i-1].Size, cps[i].Size, err)
		}
	}
	// Duplicates also get a checkpoint and proofs.
	res, _ := env.post("audit", "wait=checkpoint", `{"id":"r0-0","payload":{"round":0,"i":0}}`)
	cp := openCheckpoint(t, env, "audit", res.Checkpoint)
	if len(res.Entries) != 1 || !res.Entries[0].Duplicate || res.Entries[0].Index != 0 {
		t.Fatalf("duplicate: %+v", res)
	}
	verifyInclusion(t, 0, cp.Size, leaves[0], res.Entries[0].InclusionProof, cp.Root)
}

// seed posts events e0..e(n-1) to log and waits for a checkpoint covering
// them. It returns their leaf hashes and the checkpoint.
func seed(t testing.TB, env *testEnv, log string, n int) ([]merkle.Hash, merkle.Checkpoint) {
	t.Helper()
	var lines []string
	for i := 0; i < n; i++ {
		lines = append(lines, fmt.Sprintf(`{"id":"e%d","time":"2024-01-01T00:00:%02d.5Z","payload":{"i":%d}}`, i, i%60, i))
	}
	res, _ := env.post(log, "wait=checkpoint", ndjson(lines...))
	hs := make([]merkle.Hash, len(res.Entries))
	for i, e := range res.Entries {
		hs[i] = e.LeafHash
	}
	return hs, openCheckpoint(t, env, log, res.Checkpoint)
}

func TestListAndGetLogs(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}, logs: []string{"empty"}})
	hs, cp := seed(t, env, "b.log", 5)
	if cp.Size != 5 {
		t.Fatalf("checkpoint size %d", cp.Size)
	}
	root := rfc6962Root(hs)
	empty := sha256.Sum256(nil)
	r := env.getJSON("/v1/logs", nil)
	wantBody(t, "GET /v1/logs", r.body, fmt.Sprintf(`[{"name":"b.log","size":5,"root_hash":"%s"},{"name":"empty","size":0,"root_hash":"%s"}]`+"\n", root, b64(empty[:])))

	note := env.get("/v1/logs/b.log/checkpoint", http.StatusOK).body
	r = env.getJSON("/v1/logs/b.log", nil)
	wantBody(t, "GET /v1/logs/b.log", r.body, fmt.Sprintf(`{"name":"b.log","size":5,"root_hash":"%s","origin":"%s/b.log","checkpoint":{"size":5,"root_hash":"%s","note":%s}}`+"\n",
		root, testKeyName, root, jsonString(string(note))))
	// Trailing slash: the same resource.
	r2 := env.getJSON("/v1/logs/b.log/", nil)
	wantBody(t, "GET /v1/logs/b.log/", r2.body, string(r.body))

	// A log that has never grown has a checkpoint of size 0 (the empty
	// root), as tlog clients expect, and it verifies.
	emptyNote := env.get("/v1/logs/empty/checkpoint", http.StatusOK).body
	if c := openCheckpoint(t, env, "empty", string(emptyNote)); c.Size != 0 || c.Root != merkle.Hash(empty) {
		t.Errorf("empty log's checkpoint: size %d root %s, want 0 and the empty root", c.Size, c.Root)
	}
	r = env.getJSON("/v1/logs/empty", nil)
	wantBody(t, "GET /v1/logs/empty", r.body, fmt.Sprintf(`{"name":"empty","size":0,"root_hash":"%s","origin":"%s/empty","checkpoint":{"size":0,"root_hash":"%s","note":%s}}`+"\n",
		b64(empty[:]), testKeyName, b64(empty[:]), jsonString(string(emptyNote))))

	// The checkpoint history.
	var list []struct {
		Size     uint64      `json:"size"`
		RootHash merkle.Hash `json:"root_hash"`
		Note     string      `json:"note"`
	}
	env.getJSON("/v1/logs/b.log/checkpoints", &list)
	if len(list) == 0 || list[len(list)-1].Size != 5 || list[len(list)-1].Note != string(note) {
		t.Fatalf("checkpoints: %+v", list)
	}
	for i, c := range list {
		got := openCheckpoint(t, env, "b.log", c.Note)
		if got.Size != c.Size || got.Root != c.RootHash || got.Root != rfc6962Root(hs[:c.Size]) {
			t.Errorf("checkpoint %d: listed %d %s, note %d %s", i, c.Size, c.RootHash, got.Size, got.Root)
		}
		if i > 0 && c.Size <= list[i-1].Size {
			t.Errorf("checkpoints not in ascending size: %d after %d", c.Size, list[i-1].Size)
		}
	}
	var none []json.RawMessage
	r = env.getJSON("/v1/logs/b.log/checkpoints?from=6", &none)
	wantBody(t, "checkpoints?from=6", r.body, "[]\n")
	var one []json.RawMessage
	env.getJSON("/v1/logs/b.log/checkpoints?from=0&limit=1", &one)
	if len(one) != 1 {
		t.Errorf("limit=1: %d checkpoints", len(one))
	}
}

func TestCheckpointText(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	hs, _ := seed(t, env, "payments.0", 3)
	r := env.get("/v1/logs/payments.0/checkpoint", http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("Cache-Control %q", cc)
	}
	root := rfc6962Root(hs)
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(testKeyName+"/payments.0\n3\n"+root.String()+"\n\n— "+testKeyName+" ") + `([A-Za-z0-9+/]+={0,2})\n$`)
	m := re.FindSubmatch(r.body)
	if m == nil {
		t.Fatalf("checkpoint is not in C2SP form:\n%s", r.body)
	}
	sig, err := base64.StdEncoding.DecodeString(string(m[1]))
	if err != nil || len(sig) != 4+64 {
		t.Fatalf("signature %q: %d bytes, %v (want key hash + Ed25519 signature)", m[1], len(sig), err)
	}
	if binary.BigEndian.Uint32(sig) != env.verifier.KeyHash() {
		t.Errorf("signature key hash %08x, verifier key hash %08x", binary.BigEndian.Uint32(sig), env.verifier.KeyHash())
	}
	cp := openCheckpoint(t, env, "payments.0", string(r.body))
	if cp.Size != 3 || cp.Root != root {
		t.Errorf("checkpoint %d %s, want 3 %s", cp.Size, cp.Root, root)
	}
	// A different key does not verify it.
	_, otherV, _ := note.GenerateKey(rand.Reader, testKeyName)
	if ov, err := note.NewVerifier(otherV); err == nil {
		if _, err := note.Open(r.body, note.VerifierList(ov)); err == nil {
			t.Error("checkpoint verifies under an unrelated key")
		}
	}
}

func TestPayloadBytesKept(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	// <, > and & would be rewritten by HTML escaping, as would U+2028 and
	// U+2029; escapes the producer wrote stay as written.
	payload := `{"html":"<b>Tom & Jerry</b>","js":"a` + "\u2028" + `b` + "\u2029" + `c","esc":"\u003c\u0026","n":1.50,"e":1e3,"uni":"é"}`
	_, _ = env.post("p", "", `{"id":"html","time":"2024-01-01T00:00:00Z","payload":`+payload+`}`)
	r := env.getJSON("/v1/logs/p/entries/0", nil)
	if !bytes.Contains(r.body, []byte(`"payload":`+payload+`,`)) {
		t.Errorf("payload not served byte for byte:\n got %s\nwant payload %s", r.body, payload)
	}
	var e entryJSON
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatal(err)
	}
	if got := recomputeLeaf(t, "p", e); string(got) != payload {
		t.Errorf("payload %s, want %s", got, payload)
	}
	want := leafHashOf(t, "p", "html", nil, mustTime(t, "2024-01-01T00:00:00Z"), []byte(payload))
	if e.LeafHash != want {
		t.Errorf("leaf hash %s, want %s", e.LeafHash, want)
	}

	// ?payload=base64 serves the same bytes in base64.
	for _, path := range []string{"/v1/logs/p/entries/0?payload=base64", "/v1/logs/p/entries?id=html&payload=base64"} {
		r = env.getJSON(path, nil)
		var eb entryJSON
		if err := json.Unmarshal(r.body, &eb); err != nil {
			t.Fatal(err)
		}
		if eb.Payload != nil || eb.PayloadBase64 == nil || *eb.PayloadBase64 != b64([]byte(payload)) {
			t.Errorf("%s: payload %s payload_base64 %v, want only payload_base64 %s", path, eb.Payload, eb.PayloadBase64, b64([]byte(payload)))
		}
		if bytes.Contains(r.body, []byte(`"payload":`)) {
			t.Errorf("%s: body has a payload field: %s", path, r.body)
		}
		if got := recomputeLeaf(t, "p", eb); string(got) != payload {
			t.Errorf("%s: payload %s", path, got)
		}
	}

	// A binary key and payload come back in base64.
	_, _ = env.post("p", "", `{"id":"bin","key_base64":"AP8=","time":"2024-01-01T00:00:01Z","payload_base64":"/wD+"}`)
	e = entryJSON{}
	env.getJSON("/v1/logs/p/entries?id=bin", &e)
	if e.KeyBase64 == nil || *e.KeyBase64 != "AP8=" || e.Key != nil || e.PayloadBase64 == nil || *e.PayloadBase64 != "/wD+" || e.Payload != nil {
		t.Errorf("binary entry: %+v", e)
	}
	recomputeLeaf(t, "p", e)
	// An empty key is a key.
	_, _ = env.post("p", "", `{"id":"ek","key":"","time":"2024-01-01T00:00:02Z","payload":null}`)
	e = entryJSON{}
	r = env.getJSON("/v1/logs/p/entries?id=ek", &e)
	if e.Key == nil || *e.Key != "" || !bytes.Contains(r.body, []byte(`"key":"",`)) {
		t.Errorf("empty key: %s", r.body)
	}
	recomputeLeaf(t, "p", e)
}

func TestInclusionProofs(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	const n = 7
	hs, cp := seed(t, env, "inc", n)
	if cp.Size != n {
		t.Fatalf("checkpoint size %d", cp.Size)
	}
	ref := newTlogTree(t, hs)
	noteText := string(env.get("/v1/logs/inc/checkpoint", http.StatusOK).body)
	for i := uint64(0); i < n; i++ {
		byWhat := map[string]string{
			"index": fmt.Sprint(i),
			"id":    fmt.Sprintf("e%d", i),
			"hash":  hs[i].String(),
		}
		for what, v := range byWhat {
			q := what + "=" + url.QueryEscape(v)
			// Without size: proved against the latest checkpoint, which
			// comes with the proof.
			r := env.getJSON("/v1/logs/inc/proof/inclusion?"+q, nil)
			path, err := tlog.ProveRecord(n, int64(i), ref.reader())
			if err != nil {
				t.Fatal(err)
			}
			wantBody(t, "inclusion "+q, r.body, fmt.Sprintf(`{"index":%d,"size":%d,"leaf_hash":"%s","hashes":%s,"checkpoint":%s}`+"\n",
				i, n, hs[i], hashesJSON(path), jsonString(noteText)))
			var out struct {
				Index, Size uint64
				LeafHash    merkle.Hash `json:"leaf_hash"`
				Hashes      []merkle.Hash
				Checkpoint  string
			}
			if err := json.Unmarshal(r.body, &out); err != nil {
				t.Fatal(err)
			}
			c := openCheckpoint(t, env, "inc", out.Checkpoint)
			verifyInclusion(t, out.Index, c.Size, out.LeafHash, out.Hashes, c.Root)

			// With every size that holds the entry.
			for size := i + 1; size <= n; size++ {
				r := env.getJSON(fmt.Sprintf("/v1/logs/inc/proof/inclusion?%s&size=%d", q, size), nil)
				path, err := tlog.ProveRecord(int64(size), int64(i), ref.reader())
				if err != nil {
					t.Fatal(err)
				}
				wantBody(t, fmt.Sprintf("inclusion %s size %d", q, size), r.body,
					fmt.Sprintf(`{"index":%d,"size":%d,"leaf_hash":"%s","hashes":%s}`+"\n", i, size, hs[i], hashesJSON(path)))
				if err := json.Unmarshal(r.body, &out); err != nil {
					t.Fatal(err)
				}
				verifyInclusion(t, i, size, hs[i], out.Hashes, rfc6962Root(hs[:size]))
			}
		}
	}
}

func TestConsistencyProofs(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	const n = 9
	hs, _ := seed(t, env, "con", n)
	ref := newTlogTree(t, hs)
	for to := uint64(0); to <= n; to++ {
		for from := uint64(0); from <= to; from++ {
			var want [][32]byte
			if from >= 1 {
				p, err := tlog.ProveTree(int64(to), int64(from), ref.reader())
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range p {
					want = append(want, h)
				}
			}
			r := env.getJSON(fmt.Sprintf("/v1/logs/con/proof/consistency?from=%d&to=%d", from, to), nil)
			wantBody(t, fmt.Sprintf("consistency %d -> %d", from, to), r.body,
				fmt.Sprintf(`{"from":%d,"to":%d,"hashes":%s}`+"\n", from, to, hashesJSON(want)))
			var out struct{ Hashes []merkle.Hash }
			if err := json.Unmarshal(r.body, &out); err != nil {
				t.Fatal(err)
			}
			if err := merkle.VerifyConsistency(from, to, out.Hashes, rfc6962Root(hs[:from]), rfc6962Root(hs[:to])); err != nil {
				t.Errorf("consistency %d -> %d: %v", from, to, err)
			}
			if from >= 1 {
				if err := tlog.CheckTree(toTlog(out.Hashes), int64(to), tlog.Hash(rfc6962Root(hs[:to])), int64(from), tlog.Hash(rfc6962Root(hs[:from]))); err != nil {
					t.Errorf("tlog.CheckTree %d -> %d: %v", from, to, err)
				}
			}
		}
	}
}

// tileReader fetches C2SP tiles from the server for tlog.TileHashReader,
// which checks every tile against the tree hash.
type tileReader struct {
	env  *testEnv
	log  string
	read []string
}

func (tr *tileReader) Height() int { return 8 }

func (tr *tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, tile := range tiles {
		// tlog writes tile/H/L/N[.p/W]; C2SP drops the height.
		p := "tile/" + strings.TrimPrefix(tile.Path(), "tile/8/")
		tr.read = append(tr.read, p)
		r := tr.env.do(http.MethodGet, "/v1/logs/"+tr.log+"/"+p, nil)
		if r.status != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %v", p, r)
		}
		out[i] = r.body
	}
	return out, nil
}

func (tr *tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

func TestTiles(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	hs, _ := seed(t, env, "tiles", 5)
	concat := func(hs []merkle.Hash) []byte {
		var b []byte
		for _, h := range hs {
			b = append(b, h[:]...)
		}
		return b
	}
	r := env.get("/v1/logs/tiles/tile/0/000.p/5", http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("tile Content-Type %q", ct)
	}
	// A partial tile of width W never changes (the tree only grows), so
	// it is as immutable as a full one: checked below, once the tree has
	// grown past it.
	if cc := r.header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" {
		t.Errorf("partial tile Cache-Control %q", cc)
	}
	if len(r.body) != 5*32 || !bytes.Equal(r.body, concat(hs)) {
		t.Errorf("tile/0/000.p/5: %d bytes, want the 5 leaf hashes", len(r.body))
	}
	partial5 := r
	r = env.get("/v1/logs/tiles/tile/0/000.p/3", http.StatusOK)
	if !bytes.Equal(r.body, concat(hs[:3])) {
		t.Errorf("tile/0/000.p/3: not the first 3 leaf hashes")
	}

	// Past a full tile.
	var lines []string
	for i := 5; i < 300; i++ {
		lines = append(lines, fmt.Sprintf(`{"id":"e%d","payload":%d}`, i, i))
	}
	res, _ := env.post("tiles", "wait=checkpoint", ndjson(lines...))
	for _, e := range res.Entries {
		hs = append(hs, e.LeafHash)
	}
	cp := openCheckpoint(t, env, "tiles", res.Checkpoint)
	if cp.Size != 300 || cp.Root != rfc6962Root(hs) {
		t.Fatalf("checkpoint %d %s", cp.Size, cp.Root)
	}
	r = env.get("/v1/logs/tiles/tile/0/000", http.StatusOK)
	if len(r.body) != 256*32 || !bytes.Equal(r.body, concat(hs[:256])) {
		t.Errorf("tile/0/000: %d bytes, want the first 256 leaf hashes", len(r.body))
	}
	if cc := r.header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" {
		t.Errorf("full tile Cache-Control %q", cc)
	}
	if r := env.get("/v1/logs/tiles/tile/0/000.p/5", http.StatusOK); !bytes.Equal(r.body, partial5.body) ||
		r.header.Get("ETag") != partial5.header.Get("ETag") || r.header.Get("ETag") == "" {
		t.Errorf("tile/0/000.p/5 changed as the tree grew past it: ETag %q, was %q", r.header.Get("ETag"), partial5.header.Get("ETag"))
	}
	r = env.get("/v1/logs/tiles/tile/0/001.p/44", http.StatusOK)
	if !bytes.Equal(r.body, concat(hs[256:300])) {
		t.Errorf("tile/0/001.p/44: not leaf hashes 256..299")
	}
	r = env.get("/v1/logs/tiles/tile/1/000.p/1", http.StatusOK)
	if sub := rfc6962Root(hs[:256]); !bytes.Equal(r.body, sub[:]) {
		t.Errorf("tile/1/000.p/1: %x, want the root of leaves 0..255 %s", r.body, sub)
	}

	// golang.org/x/mod/sumdb/tlog reads the tree through the tiles alone
	// and authenticates each tile against the checkpoint root.
	tr := &tileReader{env: env, log: "tiles"}
	hr := tlog.TileHashReader(tlog.Tree{N: int64(cp.Size), Hash: tlog.Hash(cp.Root)}, tr)
	th, err := tlog.TreeHash(int64(cp.Size), hr)
	if err != nil || merkle.Hash(th) != cp.Root {
		t.Fatalf("tlog.TreeHash over tiles = %s, %v; want %s", th, err, cp.Root)
	}
	for _, i := range []int64{0, 1, 255, 256, 299} {
		p, err := tlog.ProveRecord(int64(cp.Size), i, hr)
		if err != nil {
			t.Fatalf("tlog.ProveRecord(%d) over tiles: %v", i, err)
		}
		var out struct{ Hashes []merkle.Hash }
		env.getJSON(fmt.Sprintf("/v1/logs/tiles/proof/inclusion?index=%d&size=%d", i, cp.Size), &out)
		if hashesJSON(out.Hashes) != hashesJSON(p) {
			t.Errorf("inclusion proof of %d differs from tlog's proof over tiles", i)
		}
		verifyInclusion(t, uint64(i), cp.Size, hs[i], out.Hashes, cp.Root)
	}
	if len(tr.read) == 0 {
		t.Error("tlog read no tiles")
	}
}

func TestVerifierHealthReady(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{})
	r := env.get("/v1/verifier", http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("verifier Content-Type %q", ct)
	}
	wantBody(t, "GET /v1/verifier", r.body, env.vkey+"\n")
	if v, err := note.NewVerifier(strings.TrimSpace(string(r.body))); err != nil || v.Name() != testKeyName || v.KeyHash() != env.verifier.KeyHash() {
		t.Errorf("served verifier key does not parse to the store's key: %v", err)
	}
	wantBody(t, "GET /healthz", env.getJSON("/healthz", nil).body, `{"status":"ok"}`+"\n")
	wantBody(t, "GET /readyz", env.getJSON("/readyz", nil).body, `{"status":"ready"}`+"\n")
	// Without Options.Metrics there is no /metrics.
	r = env.get("/metrics", http.StatusNotFound)
	wantJSON(t, "GET /metrics", r.body, `{"code":"not_found","error":"no such endpoint: /metrics"}`)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}, metrics: true})
	seed(t, env, "m", 3)
	env.post("m", "", `{"id":"e0","time":"2024-01-01T00:00:00.5Z","payload":{"i":0}}`) // a duplicate
	env.get("/v1/logs/m/entries/99", http.StatusBadRequest)
	r := env.get("/metrics", http.StatusOK)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") && !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("metrics Content-Type %q", ct)
	}
	for _, want := range []string{
		`auditd_ledger_appended_entries_total{log="m"} 3`,
		`auditd_ledger_duplicate_entries_total{log="m"} 1`,
		`auditd_ledger_log_size_entries{log="m"} 3`,
		`auditd_ledger_checkpoints_signed_total{log="m"}`,
		`auditd_ledger_commit_duration_seconds_count`,
		`auditd_ledger_checkpoint_latency_seconds_count`,
		`auditd_http_requests_total{code="200",method="POST",route="/v1/logs/{log}/entries"} 2`,
		`auditd_http_requests_total{code="400",method="GET",route="/v1/logs/{log}/entries/{index}"} 1`,
		`auditd_http_request_duration_seconds_count{route="/v1/logs/{log}/entries"} 2`,
	} {
		if !bytes.Contains(r.body, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// No event ids or other unbounded values in labels.
	if bytes.Contains(r.body, []byte(`"e0"`)) {
		t.Errorf("/metrics mentions an event id")
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	t.Run("write token", func(t *testing.T) {
		env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}, Auth: api.Tokens{Write: "w-secret"}}})
		env.token = "w-secret"
		seed(t, env, "x", 2)
		// Reads are public.
		for _, p := range []string{"/v1/logs", "/v1/logs/x", "/v1/logs/x/entries/0", "/v1/logs/x/entries?id=e1",
			"/v1/logs/x/checkpoint", "/v1/logs/x/checkpoints", "/v1/logs/x/proof/inclusion?index=0",
			"/v1/logs/x/proof/consistency?from=1&to=2", "/v1/logs/x/tile/0/000.p/2", "/v1/verifier", "/healthz", "/readyz"} {
			if r := env.do(http.MethodGet, p, nil); r.status != http.StatusOK {
				t.Errorf("GET %s without a token: %v", p, r)
			}
		}
	})
	t.Run("read token", func(t *testing.T) {
		env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}, Auth: api.Tokens{Write: "w-secret", Read: "r-secret"}}})
		env.token = "w-secret"
		seed(t, env, "x", 2)
		for _, p := range []string{"/v1/logs", "/v1/logs/x", "/v1/logs/x/entries/0", "/v1/logs/x/checkpoint", "/v1/verifier"} {
			for _, tok := range []string{"r-secret", "w-secret"} {
				if r := env.do(http.MethodGet, p, nil, "Authorization: Bearer "+tok); r.status != http.StatusOK {
					t.Errorf("GET %s with %s: %v", p, tok, r)
				}
			}
		}
		// Health stays open to probes.
		for _, p := range []string{"/healthz", "/readyz"} {
			if r := env.do(http.MethodGet, p, nil); r.status != http.StatusOK {
				t.Errorf("GET %s without a token: %v", p, r)
			}
		}
	})
}

// badRequest is one row of TestBadRequests.
type badRequest struct {
	name    string
	env     string // "open", "closed", "write" or "read"
	method  string
	path    string
	body    string
	headers []string
	status  int
	code    string
	// fields are further fields the error body must hold, with their JSON
	// values.
	fields map[string]string
}

// TestBadRequests is the table the issue demands: each bad request gets a
// precise status and a JSON error body, never a crash, and the ledger is
// unchanged.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	const maxBody = 2048
	envs := map[string]*testEnv{
		// CreateLogs, a small body limit.
		"open": newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true, MaxBodyBytes: maxBody}}, logs: []string{"empty"}}),
		// Few events and small payloads.
		"small": newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{MaxEvents: 5, MaxPayloadBytes: 256}}, logs: []string{"orders"}}),
		// Logs must exist before a POST.
		"closed": newTestEnv(t, envConfig{logs: []string{"orders"}}),
		// Writes need a token.
		"write": newTestEnv(t, envConfig{opts: api.Options{Auth: api.Tokens{Write: "w-secret"}}, logs: []string{"orders"}}),
		// Reads need a token too.
		"read": newTestEnv(t, envConfig{opts: api.Options{Auth: api.Tokens{Write: "w-secret", Read: "r-secret"}}, logs: []string{"orders"}}),
	}
	envs["write"].token = "w-secret"
	envs["read"].token = "r-secret"
	// Every env holds orders: a, b, c, covered by a checkpoint.
	for name, env := range envs {
		tok := env.token
		if name == "read" {
			env.token = "w-secret"
		}
		res, _ := env.post("orders", "wait=checkpoint", ndjson(
			`{"id":"a","time":"2024-01-01T00:00:00Z","payload":{"n":1}}`,
			`{"id":"b","time":"2024-01-01T00:00:01Z","payload":{"n":2}}`,
			`{"id":"c","time":"2024-01-01T00:00:02Z","payload":{"n":3}}`))
		if res.Size != 3 || res.Checkpoint == "" {
			t.Fatalf("%s: seed: %+v", name, res)
		}
		env.token = tok
	}
	unknownHash := sha256.Sum256([]byte("nothing"))
	long := strings.Repeat("x", 100)
	var bigNDJSON, bigArray []string
	for i := 0; i < 30; i++ {
		ev := fmt.Sprintf(`{"id":"big-%d","payload":"%s"}`, i, long)
		bigNDJSON = append(bigNDJSON, ev)
		bigArray = append(bigArray, ev)
	}
	post, get := http.MethodPost, http.MethodGet
	const entries = "/v1/logs/orders/entries"
	rows := []badRequest{
		// Malformed bodies.
		{name: "malformed JSON array", method: post, path: entries, body: `[{"id":"x","payload":1},{"id":"y","payload":}]`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "1"}},
		{name: "malformed JSON object", method: post, path: entries, body: `{"id":"x","payload":`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "not JSON", method: post, path: entries, body: "hello\n", status: 400, code: "malformed_body", fields: map[string]string{"line": "1"}},
		{name: "JSON but not an event", method: post, path: entries, body: `"just a string"`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1"}},
		{name: "array of non-events", method: post, path: entries, body: `[1,2]`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "malformed NDJSON names the line", method: post, path: entries, body: ndjson(`{"id":"n1","payload":1}`, `{"id":"n2","payload":2}`, `{"id":"n3","payload":}`, `{"id":"n4","payload":4}`), status: 400, code: "malformed_body", fields: map[string]string{"line": "3", "item": "2"}},
		{name: "malformed NDJSON after blank lines", method: post, path: entries, body: ndjson(`{"id":"n1","payload":1}`, ``, `   `, `{"id":"n2","payload":}`), status: 400, code: "malformed_body", fields: map[string]string{"line": "4", "item": "1"}},
		{name: "malformed NDJSON after leading blank lines", method: post, path: entries, body: "\n\n" + ndjson(`{"id":"n1","payload":1}`, `{oops}`), status: 400, code: "malformed_body", fields: map[string]string{"line": "4", "item": "1"}},
		{name: "malformed NDJSON with CRLF", method: post, path: entries, body: "{\"id\":\"n1\",\"payload\":1}\r\n{\"id\":\"n2\",\"payload\":2}\r\n{oops}\r\n", status: 400, code: "malformed_body", fields: map[string]string{"line": "3", "item": "2"}},
		{name: "two values on one NDJSON line", method: post, path: entries, body: ndjson(`{"id":"n1","payload":1} {"id":"n2","payload":2}`), status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "array syntax error on line 4", method: post, path: entries, body: "[\n{\"id\":\"s1\",\"payload\":1},\n{\"id\":\"s2\",\"payload\":2},\n{\"id\":\"s3\",\"payload\":}\n]", status: 400, code: "malformed_body", fields: map[string]string{"line": "4", "item": "2"}},
		{name: "array type error on line 3", method: post, path: entries, body: "[\n{\"id\":\"t1\",\"payload\":1},\n{\"id\":5,\"payload\":1}\n]", status: 400, code: "malformed_body", fields: map[string]string{"line": "3", "item": "1"}},
		{name: "array invalid event on line 3", method: post, path: entries, body: "[\n{\"id\":\"m1\",\"payload\":1},\n{\"id\":\"m2\"}\n]", status: 400, code: "malformed_body", fields: map[string]string{"line": "3", "item": "1"}},
		{name: "array after leading blank lines", method: post, path: entries, body: "\n\n[\n{\"id\":\"m1\",\"payload\":}\n]", status: 400, code: "malformed_body", fields: map[string]string{"line": "4", "item": "0"}},
		{name: "unterminated array", method: post, path: entries, body: `[{"id":"u1","payload":1}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1"}},
		{name: "data after the array", method: post, path: entries, body: `[{"id":"u1","payload":1}] {}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1"}},
		// Empty batches.
		{name: "empty body", method: post, path: entries, body: "", status: 400, code: "empty_batch"},
		{name: "empty array", method: post, path: entries, body: "[]", status: 400, code: "empty_batch"},
		{name: "empty array with space", method: post, path: entries, body: "\n[ \n ]\n", status: 400, code: "empty_batch"},
		{name: "only blank lines", method: post, path: entries, body: "\n\n   \n\t\n", status: 400, code: "empty_batch"},
		{name: "only CRLF blank lines", method: post, path: entries, body: "\r\n\r\n", status: 400, code: "empty_batch"},
		// Size limits.
		{name: "NDJSON body over MaxBodyBytes", method: post, path: entries, body: ndjson(bigNDJSON...), status: 413, code: "body_too_large", fields: map[string]string{"limit": "2048"}},
		{name: "array body over MaxBodyBytes", method: post, path: entries, body: "[" + strings.Join(bigArray, ",") + "]", status: 413, code: "body_too_large", fields: map[string]string{"limit": "2048"}},
		{name: "one NDJSON line over MaxBodyBytes", method: post, path: entries, body: `{"id":"huge","payload":"` + strings.Repeat("y", 3000) + `"}`, status: 413, code: "body_too_large", fields: map[string]string{"limit": "2048"}},
		{name: "more than MaxEvents", env: "small", method: post, path: entries, body: ndjson(`{"payload":1}`, `{"payload":2}`, `{"payload":3}`, `{"payload":4}`, `{"payload":5}`, `{"payload":6}`), status: 413, code: "too_many_events", fields: map[string]string{"line": "6", "item": "5", "limit": "5"}},
		{name: "more than MaxEvents in an array", env: "small", method: post, path: entries, body: `[{"payload":1},{"payload":2},{"payload":3},{"payload":4},{"payload":5},{"payload":6}]`, status: 413, code: "too_many_events", fields: map[string]string{"line": "1", "item": "5", "limit": "5"}},
		{name: "payload over MaxPayloadBytes", env: "small", method: post, path: entries, body: `{"id":"p","payload":"` + strings.Repeat("z", 300) + `"}`, status: 413, code: "payload_too_large", fields: map[string]string{"line": "1", "item": "0", "limit": "256"}},
		{name: "payload over MaxPayloadBytes on line 3", env: "small", method: post, path: entries, body: ndjson(`{"payload":1}`, `{"payload":2}`, `{"payload_base64":"`+base64.StdEncoding.EncodeToString(make([]byte, 257))+`"}`), status: 413, code: "payload_too_large", fields: map[string]string{"line": "3", "item": "2", "limit": "256"}},
		// Logs.
		{name: "GET unknown log", method: get, path: "/v1/logs/nope", status: 404, code: "log_not_found"},
		{name: "GET entry of unknown log", method: get, path: "/v1/logs/nope/entries/0", status: 404, code: "log_not_found"},
		{name: "GET checkpoint of unknown log", method: get, path: "/v1/logs/nope/checkpoint", status: 404, code: "log_not_found"},
		{name: "GET proof of unknown log", method: get, path: "/v1/logs/nope/proof/inclusion?index=0&size=1", status: 404, code: "log_not_found"},
		{name: "GET tile of unknown log", method: get, path: "/v1/logs/nope/tile/0/000.p/1", status: 404, code: "log_not_found"},
		{name: "POST unknown log without CreateLogs", env: "closed", method: post, path: "/v1/logs/nope/entries", body: `{"payload":1}`, status: 404, code: "log_not_found"},
		{name: "POST invalid log name", method: post, path: "/v1/logs/-bad/entries", body: `{"payload":1}`, status: 400, code: "invalid"},
		{name: "POST log name with a space", method: post, path: "/v1/logs/a%20b/entries", body: `{"payload":1}`, status: 400, code: "invalid"},
		{name: "POST log name too long", method: post, path: "/v1/logs/" + strings.Repeat("a", 129) + "/entries", body: `{"payload":1}`, status: 400, code: "invalid"},
		{name: "POST malformed body to a new log", method: post, path: "/v1/logs/brand-new-1/entries", body: `{oops`, status: 400, code: "malformed_body"},
		{name: "POST invalid event to a new log", method: post, path: "/v1/logs/brand-new-3/entries", body: `{"id":"x"}`, status: 400, code: "malformed_body"},
		{name: "POST self-conflicting batch to a new log", method: post, path: "/v1/logs/brand-new-4/entries", body: ndjson(`{"id":"dup","payload":1}`, `{"id":"dup","payload":2}`), status: 409, code: "id_conflict", fields: map[string]string{"id": `"dup"`, "item": "1"}},
		{name: "POST over-large body to a new log", method: post, path: "/v1/logs/brand-new-5/entries", body: ndjson(bigNDJSON...), status: 413, code: "body_too_large"},
		{name: "POST empty body to a new log", method: post, path: "/v1/logs/brand-new-2/entries", body: ``, status: 400, code: "empty_batch"},
		// Ranges.
		{name: "index beyond the tree", method: get, path: entries + "/3", status: 400, code: "out_of_range"},
		{name: "max index", method: get, path: entries + "/18446744073709551615", status: 400, code: "out_of_range"},
		{name: "inclusion index beyond size", method: get, path: "/v1/logs/orders/proof/inclusion?index=3&size=3", status: 400, code: "out_of_range"},
		{name: "inclusion index beyond checkpoint", method: get, path: "/v1/logs/orders/proof/inclusion?index=3", status: 400, code: "out_of_range"},
		{name: "inclusion size beyond the tree", method: get, path: "/v1/logs/orders/proof/inclusion?index=0&size=4", status: 400, code: "out_of_range"},
		{name: "inclusion size zero", method: get, path: "/v1/logs/orders/proof/inclusion?index=0&size=0", status: 400, code: "out_of_range"},
		{name: "consistency to beyond the tree", method: get, path: "/v1/logs/orders/proof/consistency?from=1&to=4", status: 400, code: "out_of_range"},
		{name: "consistency from > to", method: get, path: "/v1/logs/orders/proof/consistency?from=3&to=2", status: 400, code: "out_of_range"},
		// Non-numeric and missing parameters.
		{name: "non-numeric index", method: get, path: entries + "/abc", status: 400, code: "invalid_parameter"},
		{name: "negative index", method: get, path: entries + "/-1", status: 400, code: "invalid_parameter"},
		{name: "fractional index", method: get, path: entries + "/1.0", status: 400, code: "invalid_parameter"},
		{name: "index overflows", method: get, path: entries + "/18446744073709551616", status: 400, code: "invalid_parameter"},
		{name: "non-numeric inclusion index", method: get, path: "/v1/logs/orders/proof/inclusion?index=x", status: 400, code: "invalid_parameter"},
		{name: "non-numeric inclusion size", method: get, path: "/v1/logs/orders/proof/inclusion?index=0&size=x", status: 400, code: "invalid_parameter"},
		{name: "negative inclusion size", method: get, path: "/v1/logs/orders/proof/inclusion?index=0&size=-1", status: 400, code: "invalid_parameter"},
		{name: "empty inclusion size", method: get, path: "/v1/logs/orders/proof/inclusion?index=0&size=", status: 400, code: "invalid_parameter"},
		{name: "non-numeric from", method: get, path: "/v1/logs/orders/proof/consistency?from=a&to=2", status: 400, code: "invalid_parameter"},
		{name: "non-numeric to", method: get, path: "/v1/logs/orders/proof/consistency?from=1&to=b", status: 400, code: "invalid_parameter"},
		{name: "missing from", method: get, path: "/v1/logs/orders/proof/consistency?to=2", status: 400, code: "invalid_parameter"},
		{name: "missing to", method: get, path: "/v1/logs/orders/proof/consistency?from=1", status: 400, code: "invalid_parameter"},
		{name: "inclusion without index, id or hash", method: get, path: "/v1/logs/orders/proof/inclusion?size=3", status: 400, code: "invalid_parameter"},
		{name: "inclusion with index and id", method: get, path: "/v1/logs/orders/proof/inclusion?index=0&id=a", status: 400, code: "invalid_parameter"},
		{name: "inclusion with a malformed hash", method: get, path: "/v1/logs/orders/proof/inclusion?hash=not-base64", status: 400, code: "invalid_parameter"},
		{name: "inclusion with a short hash", method: get, path: "/v1/logs/orders/proof/inclusion?hash=AAAA", status: 400, code: "invalid_parameter"},
		{name: "inclusion of an unknown hash", method: get, path: "/v1/logs/orders/proof/inclusion?hash=" + url.QueryEscape(b64(unknownHash[:])), status: 404, code: "entry_not_found"},
		{name: "inclusion of an unknown id", method: get, path: "/v1/logs/orders/proof/inclusion?id=zzz", status: 404, code: "entry_not_found"},
		{name: "entries without id", method: get, path: entries, status: 400, code: "invalid_parameter"},
		{name: "entry with unknown id", method: get, path: entries + "?id=zzz", status: 404, code: "entry_not_found"},
		{name: "non-numeric checkpoints from", method: get, path: "/v1/logs/orders/checkpoints?from=x", status: 400, code: "invalid_parameter"},
		{name: "checkpoints limit 0", method: get, path: "/v1/logs/orders/checkpoints?limit=0", status: 400, code: "invalid_parameter"},
		{name: "checkpoints limit too big", method: get, path: "/v1/logs/orders/checkpoints?limit=1001", status: 400, code: "invalid_parameter"},
		{name: "wait for something else", method: post, path: entries + "?wait=soon", body: `{"payload":1}`, status: 400, code: "invalid_parameter"},
		// A log without a checkpoint.
		// An empty log's checkpoint has size 0: no entry is in it.
		{name: "inclusion in an empty log", method: get, path: "/v1/logs/empty/proof/inclusion?index=0", status: 400, code: "out_of_range"},
		// Tiles.
		{name: "tile path too short", method: get, path: "/v1/logs/orders/tile/0", status: 404, code: "bad_tile_path"},
		{name: "tile index not 3 digits", method: get, path: "/v1/logs/orders/tile/0/0", status: 404, code: "bad_tile_path"},
		{name: "tile level too high", method: get, path: "/v1/logs/orders/tile/8/000", status: 404, code: "bad_tile_path"},
		{name: "tile level with leading zero", method: get, path: "/v1/logs/orders/tile/00/000.p/1", status: 404, code: "bad_tile_path"},
		{name: "tile width 0", method: get, path: "/v1/logs/orders/tile/0/000.p/0", status: 404, code: "bad_tile_path"},
		{name: "tile width 256", method: get, path: "/v1/logs/orders/tile/0/000.p/256", status: 404, code: "bad_tile_path"},
		{name: "tile width with leading zero", method: get, path: "/v1/logs/orders/tile/0/000.p/03", status: 404, code: "bad_tile_path"},
		{name: "entry bundle beyond the tree", method: get, path: "/v1/logs/orders/tile/entries/000", status: 404, code: "tile_not_found"},
		{name: "tile wider than the tree", method: get, path: "/v1/logs/orders/tile/0/000.p/4", status: 404, code: "entry_not_found"},
		{name: "full tile beyond the tree", method: get, path: "/v1/logs/orders/tile/0/000", status: 404, code: "entry_not_found"},
		// Invalid events.
		{name: "unknown field", method: post, path: entries, body: `{"id":"u","payload":1,"extra":2}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "unknown field in an array", method: post, path: entries, body: `[{"id":"u","payload":1,"extra":2}]`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "payload and payload_base64", method: post, path: entries, body: `{"id":"u","payload":1,"payload_base64":"AA=="}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "missing payload", method: post, path: entries, body: `{"id":"u","key":"k"}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "bad payload_base64", method: post, path: entries, body: `{"id":"u","payload_base64":"***"}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "bad key_base64", method: post, path: entries, body: `{"id":"u","key_base64":"A","payload":1}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "key and key_base64", method: post, path: entries, body: `{"id":"u","key":"k","key_base64":"AA==","payload":1}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "bad time", method: post, path: entries, body: `{"id":"u","time":"yesterday","payload":1}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "date without time", method: post, path: entries, body: `{"id":"u","time":"2024-05-01","payload":1}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "time outside Unix nanoseconds", method: post, path: entries, body: `{"id":"u","time":"1500-01-01T00:00:00Z","payload":1}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "time not a string", method: post, path: entries, body: `{"id":"u","time":1714557600,"payload":1}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "id too long", method: post, path: entries, body: `{"id":"` + strings.Repeat("i", 1025) + `","payload":1}`, status: 400, code: "malformed_body", fields: map[string]string{"line": "1", "item": "0"}},
		{name: "invalid event after a valid one", method: post, path: entries, body: ndjson(`{"id":"v1","payload":1}`, `{"id":"v2","payload":2,"payload_base64":"AA=="}`), status: 400, code: "malformed_body", fields: map[string]string{"line": "2", "item": "1"}},
		// Id conflicts.
		{name: "id with different content", method: post, path: entries, body: `{"id":"a","time":"2024-01-01T00:00:00Z","payload":{"n":100}}`, status: 409, code: "id_conflict", fields: map[string]string{"id": `"a"`, "index": "0", "item": "0"}},
		{name: "id with a different time", method: post, path: entries, body: `{"id":"b","time":"2024-01-01T00:00:09Z","payload":{"n":2}}`, status: 409, code: "id_conflict", fields: map[string]string{"id": `"b"`, "index": "1", "item": "0"}},
		{name: "id conflict refuses the whole batch", method: post, path: entries, body: ndjson(`{"id":"fresh-1","payload":1}`, `{"id":"c","payload":"other"}`), status: 409, code: "id_conflict", fields: map[string]string{"id": `"c"`, "index": "2", "item": "1"}},
		{name: "id conflict in an array", method: post, path: entries, body: `[{"id":"fresh-2","payload":1},{"id":"fresh-3","payload":1},{"id":"a","payload":"other"}]`, status: 409, code: "id_conflict", fields: map[string]string{"id": `"a"`, "index": "0", "item": "2"}},
		{name: "id repeated in one batch with different content", method: post, path: entries, body: ndjson(`{"id":"dup","payload":1}`, `{"id":"dup","payload":2}`), status: 409, code: "id_conflict", fields: map[string]string{"id": `"dup"`, "item": "1"}},
		// Tokens.
		{name: "write without a token", env: "write", method: post, path: entries, body: `{"payload":1}`, status: 401, code: "unauthorized"},
		{name: "write with a wrong token", env: "write", method: post, path: entries, body: `{"payload":1}`, headers: []string{"Authorization: Bearer nope"}, status: 401, code: "unauthorized"},
		{name: "write with a token prefix", env: "write", method: post, path: entries, body: `{"payload":1}`, headers: []string{"Authorization: Bearer w-secre"}, status: 401, code: "unauthorized"},
		{name: "write with basic auth", env: "write", method: post, path: entries, body: `{"payload":1}`, headers: []string{"Authorization: Basic dzpzZWNyZXQ="}, status: 401, code: "unauthorized"},
		{name: "write to an unknown log without a token", env: "write", method: post, path: "/v1/logs/nope/entries", body: `{"payload":1}`, status: 401, code: "unauthorized"},
		{name: "read without a token", env: "read", method: get, path: "/v1/logs", status: 401, code: "unauthorized"},
		{name: "read entry without a token", env: "read", method: get, path: entries + "/0", status: 401, code: "unauthorized"},
		{name: "read checkpoint with a wrong token", env: "read", method: get, path: "/v1/logs/orders/checkpoint", headers: []string{"Authorization: Bearer nope"}, status: 401, code: "unauthorized"},
		{name: "read verifier without a token", env: "read", method: get, path: "/v1/verifier", status: 401, code: "unauthorized"},
		{name: "read proof without a token", env: "read", method: get, path: "/v1/logs/orders/proof/inclusion?index=0", status: 401, code: "unauthorized"},
		{name: "read tile without a token", env: "read", method: get, path: "/v1/logs/orders/tile/0/000.p/1", status: 401, code: "unauthorized"},
		{name: "write with the read token", env: "read", method: post, path: entries, body: `{"payload":1}`, headers: []string{"Authorization: Bearer r-secret"}, status: 401, code: "unauthorized"},
		// Methods and routes.
		{name: "DELETE entries", method: http.MethodDelete, path: entries, status: 405, code: "method_not_allowed"},
		{name: "PUT entry", method: http.MethodPut, path: entries + "/0", body: `{"payload":1}`, status: 405, code: "method_not_allowed"},
		{name: "POST checkpoint", method: post, path: "/v1/logs/orders/checkpoint", body: `{"payload":1}`, status: 405, code: "method_not_allowed"},
		{name: "POST logs", method: post, path: "/v1/logs", body: `{"payload":1}`, status: 405, code: "method_not_allowed"},
		{name: "POST healthz", method: post, path: "/healthz", status: 405, code: "method_not_allowed"},
		{name: "unknown route", method: get, path: "/v2/logs", status: 404, code: "not_found"},
		{name: "root", method: get, path: "/", status: 404, code: "not_found"},
		{name: "unknown log sub-resource", method: get, path: "/v1/logs/orders/nope", status: 404, code: "not_found"},
		{name: "entry sub-path", method: get, path: entries + "/0/extra", status: 404, code: "not_found"},
		{name: "unknown route with a token required", env: "read", method: get, path: "/v2/logs", status: 404, code: "not_found"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			if row.env == "" {
				row.env = "open"
			}
			env := envs[row.env].withT(t)
			before := env.logsSnapshot()
			var body *strings.Reader
			if row.body != "" || row.method == post {
				body = strings.NewReader(row.body)
			}
			var r response
			if body != nil {
				r = env.do(row.method, row.path, body, row.headers...)
			} else {
				r = env.do(row.method, row.path, nil, row.headers...)
			}
			if r.status != row.status {
				t.Errorf("status %d, want %d; body %s", r.status, row.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatalf("body %q is not a JSON object: %v", r.body, err)
			}
			var code, msg string
			_ = json.Unmarshal(got["code"], &code)
			_ = json.Unmarshal(got["error"], &msg)
			if code != row.code {
				t.Errorf("code %q, want %q; body %s", code, row.code, r.body)
			}
			if msg == "" {
				t.Errorf("no error message; body %s", r.body)
			}
			for k, want := range row.fields {
				if string(got[k]) != want {
					t.Errorf("%s = %s, want %s; body %s", k, got[k], want, r.body)
				}
			}
			if row.status == http.StatusUnauthorized {
				if h := r.header.Get("WWW-Authenticate"); h != `Bearer realm="auditd"` {
					t.Errorf("WWW-Authenticate %q", h)
				}
			}
			if after := env.logsSnapshot(); after != before {
				t.Errorf("the ledger changed:\nbefore %s after  %s", before, after)
			}
		})
	}
}

// A checkpoint that does not come in time: 503, but the entries are durable
// and listed.
func TestPostWaitCheckpointTimeout(t *testing.T) {
	t.Parallel()
	// The first append is signed at once; later ones wait an hour.
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true, WaitTimeout: 50 * time.Millisecond}}, cpInterval: time.Hour})
	// The first entry is posted without waiting, then waited for on the
	// ledger itself: its checkpoint may take longer than the 50ms the
	// server waits on a loaded machine.
	res, _ := env.post("slow", "", ndjson(`{"id":"e0","time":"2024-01-01T00:00:00.5Z","payload":{"i":0}}`))
	first := res.Entries
	l, err := env.store.Log("slow")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitCheckpoint(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	body := ndjson(`{"id":"late","time":"2024-01-01T00:00:00Z","payload":1}`)
	r := env.do(http.MethodPost, "/v1/logs/slow/entries?wait=checkpoint", strings.NewReader(body))
	if r.status != http.StatusServiceUnavailable || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %v, want 503 JSON", r)
	}
	h := leafHashOf(t, "slow", "late", nil, mustTime(t, "2024-01-01T00:00:00Z"), []byte("1"))
	var got map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if string(got["code"]) != `"checkpoint_timeout"` || string(got["size"]) != "2" ||
		string(got["entries"]) != fmt.Sprintf(`[{"index":1,"id":"late","leaf_hash":"%s","duplicate":false}]`, h) {
		t.Errorf("body %s", r.body)
	}
	var e entryJSON
	env.getJSON("/v1/logs/slow/entries/1", &e)
	if e.ID != "late" || e.LeafHash != h {
		t.Errorf("entry 1 is %+v, want the late event", e)
	}
	// The latest checkpoint still covers only the first entry.
	var cp struct{ Size uint64 }
	env.getJSON("/v1/logs/slow/proof/inclusion?index=0", &cp)
	if cp.Size != 1 || len(first) != 1 {
		t.Errorf("checkpoint size %d, want 1", cp.Size)
	}
}

// Concurrent producers each get their own entries back with proofs that
// verify against the checkpoint they were given.
func TestConcurrentPosts(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	const producers, batches, perBatch = 8, 5, 7
	type result struct {
		res appendResult
		err error
	}
	results := make(chan result, producers*batches)
	for p := 0; p < producers; p++ {
		go func() {
			for b := 0; b < batches; b++ {
				var lines []string
				for i := 0; i < perBatch; i++ {
					lines = append(lines, fmt.Sprintf(`{"id":"p%d-b%d-%d","payload":{"p":%d}}`, p, b, i, p))
				}
				res, err := http.Post(env.http.URL+"/v1/logs/shared/entries?wait=checkpoint", "application/x-ndjson", strings.NewReader(ndjson(lines...)))
				if err != nil {
					results <- result{err: err}
					continue
				}
				var out appendResult
				err = json.NewDecoder(res.Body).Decode(&out)
				res.Body.Close()
				if err == nil && res.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", res.StatusCode)
				}
				results <- result{res: out, err: err}
			}
		}()
	}
	seen := map[uint64]string{}
	for i := 0; i < producers*batches; i++ {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		cp := openCheckpoint(t, env, "shared", r.res.Checkpoint)
		if len(r.res.Entries) != perBatch {
			t.Fatalf("%d entries", len(r.res.Entries))
		}
		for _, e := range r.res.Entries {
			if prev, dup := seen[e.Index]; dup || e.Duplicate {
				t.Fatalf("index %d given to %s and %s", e.Index, prev, e.ID)
			}
			seen[e.Index] = e.ID
			verifyInclusion(t, e.Index, cp.Size, e.LeafHash, e.InclusionProof, cp.Root)
		}
	}
	var logs []struct{ Size uint64 }
	env.getJSON("/v1/logs", &logs)
	if len(logs) != 1 || logs[0].Size != producers*batches*perBatch || len(seen) != producers*batches*perBatch {
		t.Errorf("logs %+v, %d distinct indexes", logs, len(seen))
	}
}
