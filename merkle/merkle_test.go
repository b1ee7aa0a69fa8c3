package merkle_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/merkle"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLeafHashKnownValues(t *testing.T) {
	t.Parallel()
	// RFC 6962: the hash of the empty leaf is SHA-256(0x00), the empty tree
	// hashes to SHA-256 of nothing.
	emptyLeaf := mustHex(t, "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")
	if h := merkle.LeafHash(nil); !bytes.Equal(h[:], emptyLeaf) {
		t.Errorf("LeafHash(nil) = %x, want %x", h, emptyLeaf)
	}
	emptyRoot := mustHex(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
	if h := merkle.EmptyRoot(); !bytes.Equal(h[:], emptyRoot) {
		t.Errorf("EmptyRoot() = %x, want %x", h, emptyRoot)
	}
	for _, data := range [][]byte{{}, []byte("a"), []byte("hello, world"), bytes.Repeat([]byte{0xff}, 1000)} {
		want := sha256.Sum256(append([]byte{0}, data...))
		if got := merkle.LeafHash(data); got != merkle.Hash(want) {
			t.Errorf("LeafHash(%q) = %x, want %x", data, got, want)
		}
		if got, want := merkle.LeafHash(data), tlog.RecordHash(data); got != merkle.Hash(want) {
			t.Errorf("LeafHash(%q) = %x, tlog.RecordHash %x", data, got, want)
		}
	}
}

func TestNodeHashKnownValues(t *testing.T) {
	t.Parallel()
	l := merkle.LeafHash([]byte("left"))
	r := merkle.LeafHash([]byte("right"))
	var in []byte
	in = append(in, 1)
	in = append(in, l[:]...)
	in = append(in, r[:]...)
	want := sha256.Sum256(in)
	if got := merkle.NodeHash(l, r); got != merkle.Hash(want) {
		t.Errorf("NodeHash = %x, want %x", got, want)
	}
	if got, want := merkle.NodeHash(l, r), tlog.NodeHash(tlog.Hash(l), tlog.Hash(r)); got != merkle.Hash(want) {
		t.Errorf("NodeHash = %x, tlog.NodeHash %x", got, want)
	}
	if merkle.NodeHash(l, r) == merkle.NodeHash(r, l) {
		t.Error("NodeHash is symmetric")
	}
	// The two-leaf tree over the empty leaf twice, by hand:
	// SHA-256(0x01 || SHA-256(0x00) || SHA-256(0x00)).
	e := mustHex(t, "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")
	want = sha256.Sum256(append(append([]byte{1}, e...), e...))
	if got := merkle.NodeHash(merkle.LeafHash(nil), merkle.LeafHash(nil)); got != merkle.Hash(want) {
		t.Errorf("NodeHash(empty, empty) = %x, want %x", got, want)
	}
}

func TestHashText(t *testing.T) {
	t.Parallel()
	var h merkle.Hash
	for i := range h {
		h[i] = byte(i * 7)
	}
	s := h.String()
	if want := base64.StdEncoding.EncodeToString(h[:]); s != want {
		t.Fatalf("String() = %q, want %q", s, want)
	}
	txt, err := h.MarshalText()
	if err != nil || string(txt) != s {
		t.Fatalf("MarshalText() = %q, %v; want %q", txt, err, s)
	}
	var back merkle.Hash
	if err := back.UnmarshalText(txt); err != nil || back != h {
		t.Fatalf("UnmarshalText(%q) = %x, %v; want %x", txt, back, err, h)
	}
	p, err := merkle.ParseHash(s)
	if err != nil || p != h {
		t.Fatalf("ParseHash(%q) = %x, %v", s, p, err)
	}
	// Agrees with tlog's text form.
	if th, err := tlog.ParseHash(s); err != nil || th != tlog.Hash(h) {
		t.Fatalf("tlog.ParseHash(%q) = %x, %v", s, th, err)
	}
}

func TestParseHashErrors(t *testing.T) {
	t.Parallel()
	var h merkle.Hash
	h[0], h[31] = 0xfb, 0xff // base64 with + and / in standard, - and _ in URL encoding
	std := base64.StdEncoding.EncodeToString(h[:])
	for _, s := range []string{
		"",
		"not base64!",
		base64.StdEncoding.EncodeToString(make([]byte, 31)),
		base64.StdEncoding.EncodeToString(make([]byte, 33)),
		base64.StdEncoding.EncodeToString(make([]byte, 64)),
		base64.URLEncoding.EncodeToString(h[:]),
		base64.RawStdEncoding.EncodeToString(h[:]),
		std[:len(std)-1],
		std + "=",
		std + "AAAA",
	} {
		if _, err := merkle.ParseHash(s); err == nil {
			t.Errorf("ParseHash(%q) succeeded", s)
		}
		before := merkle.Hash{1, 2, 3}
		v := before
		if err := v.UnmarshalText([]byte(s)); err == nil {
			t.Errorf("UnmarshalText(%q) succeeded", s)
		} else if v != before {
			t.Errorf("UnmarshalText(%q) changed the hash on error", s)
		}
	}
}

// testLeaves are valid leaves covering every optional field.
func testLeaves() map[string]merkle.Leaf {
	payload := sha256.Sum256([]byte(`{"amount":5}`))
	return map[string]merkle.Leaf{
		"minimal":       {Log: "a", ID: "1"},
		"no key":        {Log: "orders-http", ID: "evt-1", Time: 1704164645000000000, PayloadSHA256: payload},
		"key":           {Log: "orders-http", ID: "evt-2", HasKey: true, Key: []byte("customer-42"), Time: 1704164645123456789, PayloadSHA256: payload},
		"empty key":     {Log: "orders-http", ID: "evt-3", HasKey: true, Key: []byte{}, Time: 1, PayloadSHA256: payload},
		"nil empty key": {Log: "orders-http", ID: "evt-3", HasKey: true, Time: 1, PayloadSHA256: payload},
		"binary key":    {Log: "l", ID: "k", HasKey: true, Key: []byte{0, 0xff, 0xfe, '\n'}},
		"source":        {Log: "payments.0", ID: "x", Source: &merkle.Source{Topic: "payments", Partition: 3, Offset: 1 << 40}, PayloadSHA256: payload},
		"time assigned": {Log: "payments.0", ID: "y", Time: 1704164645999999999, TimeAssigned: true},
		"everything": {Log: "payments.0", ID: "z", HasKey: true, Key: []byte("k"), Time: -1, TimeAssigned: true,
			Source: &merkle.Source{Topic: "", Partition: -1, Offset: -1}, PayloadSHA256: payload},
		"max sizes": {Log: strings.Repeat("l", merkle.MaxLogName), ID: strings.Repeat("i", merkle.MaxID), HasKey: true,
			Key: bytes.Repeat([]byte{'k'}, merkle.MaxKey), Source: &merkle.Source{Topic: strings.Repeat("t", merkle.MaxTopic), Partition: 1<<31 - 1, Offset: 1<<63 - 1}},
		"unicode": {Log: "ĺog", ID: "идентификатор", Time: -1 << 63},
	}
}

func sameLeaf(a, b *merkle.Leaf) bool {
	if a.Log != b.Log || a.ID != b.ID || a.HasKey != b.HasKey || !bytes.Equal(a.Key, b.Key) ||
		a.Time != b.Time || a.TimeAssigned != b.TimeAssigned || a.PayloadSHA256 != b.PayloadSHA256 {
		return false
	}
	if (a.Source == nil) != (b.Source == nil) {
		return false
	}
	return a.Source == nil || *a.Source == *b.Source
}

func TestLeafRoundTrip(t *testing.T) {
	t.Parallel()
	for name, l := range testLeaves() {
		t.Run(name, func(t *testing.T) {
			b, err := l.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != l.Size() {
				t.Errorf("encoding has %d bytes, Size() = %d", len(b), l.Size())
			}
			if b[0] != merkle.LeafVersion {
				t.Errorf("version byte %d", b[0])
			}
			prefix := []byte("prefix")
			b2, err := l.Append(append([]byte{}, prefix...))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b2, prefix) || !bytes.Equal(b2[len(prefix):], b) {
				t.Errorf("Append to a prefix = %x, want prefix then %x", b2, b)
			}
			var got merkle.Leaf
			if err := got.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			if !sameLeaf(&got, &l) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, l)
			}
			if l.HasKey && got.Key == nil {
				t.Errorf("empty key decoded as nil")
			}
			if !l.HasKey && got.Key != nil {
				t.Errorf("absent key decoded as %q", got.Key)
			}
			again, err := got.MarshalBinary()
			if err != nil || !bytes.Equal(again, b) {
				t.Errorf("re-encoding = %x, %v; want %x", again, err, b)
			}
			h, err := l.Hash()
			if err != nil {
				t.Fatal(err)
			}
			if want := sha256.Sum256(append([]byte{0}, b...)); h != merkle.Hash(want) {
				t.Errorf("Hash() = %x, want SHA-256(0x00 || leaf) = %x", h, want)
			}
			// The decoded leaf must not alias the input.
			for i := range b {
				b[i] ^= 0xff
			}
			if !sameLeaf(&got, &l) {
				t.Errorf("decoded leaf aliases its input")
			}
		})
	}
}

func TestLeafEncodingLayout(t *testing.T) {
	t.Parallel()
	l := merkle.Leaf{Log: "ab", ID: "c", HasKey: true, Key: []byte("k"), Time: 0x0102030405060708, TimeAssigned: true,
		Source: &merkle.Source{Topic: "t", Partition: 0x0a0b0c0d, Offset: 0x1112131415161718}}
	for i := range l.PayloadSHA256 {
		l.PayloadSHA256[i] = 0xee
	}
	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := "01" + // version
		"02" + "6162" + // log
		"0001" + "63" + // id
		"07" + // flags: key, time assigned, source
		"0001" + "6b" + // key
		"0102030405060708" + // time
		"0001" + "74" + "0a0b0c0d" + "1112131415161718" + // source
		strings.Repeat("ee", 32)
	if got := hex.EncodeToString(b); got != want {
		t.Errorf("encoding\n got %s\nwant %s", got, want)
	}
}

func TestLeafValidate(t *testing.T) {
	t.Parallel()
	bad := map[string]merkle.Leaf{
		"empty log":       {ID: "1"},
		"long log":        {Log: strings.Repeat("l", merkle.MaxLogName+1), ID: "1"},
		"empty id":        {Log: "a"},
		"long id":         {Log: "a", ID: strings.Repeat("i", merkle.MaxID+1)},
		"non-UTF-8 log":   {Log: "a\xff", ID: "1"},
		"non-UTF-8 id":    {Log: "a", ID: "\xc3\x28"},
		"long key":        {Log: "a", ID: "1", HasKey: true, Key: make([]byte, merkle.MaxKey+1)},
		"key without bit": {Log: "a", ID: "1", Key: []byte("k")},
		"long topic":      {Log: "a", ID: "1", Source: &merkle.Source{Topic: strings.Repeat("t", merkle.MaxTopic+1)}},
	}
	for name, l := range bad {
		t.Run(name, func(t *testing.T) {
			if err := l.Validate(); !errors.Is(err, merkle.ErrLeaf) {
				t.Errorf("Validate() = %v, want ErrLeaf", err)
			}
			prefix := []byte("keep")
			b, err := l.Append(prefix)
			if !errors.Is(err, merkle.ErrLeaf) {
				t.Errorf("Append error = %v, want ErrLeaf", err)
			}
			if !bytes.Equal(b, prefix) {
				t.Errorf("Append on error returned %q, want the input unchanged", b)
			}
			if _, err := l.MarshalBinary(); !errors.Is(err, merkle.ErrLeaf) {
				t.Errorf("MarshalBinary error = %v, want ErrLeaf", err)
			}
			if _, err := l.Hash(); !errors.Is(err, merkle.ErrLeaf) {
				t.Errorf("Hash error = %v, want ErrLeaf", err)
			}
		})
	}
	for name, l := range testLeaves() {
		if err := l.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
}

// rawLeaf builds a leaf encoding field by field, bypassing Validate.
func rawLeaf(version byte, log, id string, flags byte, key string, tm uint64, topic string, part uint32, off uint64) []byte {
	b := []byte{version, byte(len(log))}
	b = append(b, log...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(id)))
	b = append(b, id...)
	b = append(b, flags)
	if flags&1 != 0 {
		b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
		b = append(b, key...)
	}
	b = binary.BigEndian.AppendUint64(b, tm)
	if flags&4 != 0 {
		b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
		b = append(b, topic...)
		b = binary.BigEndian.AppendUint32(b, part)
		b = binary.BigEndian.AppendUint64(b, off)
	}
	return append(b, make([]byte, 32)...)
}

func TestLeafUnmarshalRejects(t *testing.T) {
	t.Parallel()
	good := rawLeaf(1, "log", "id", 7, "key", 5, "topic", 1, 2)
	var l merkle.Leaf
	if err := l.UnmarshalBinary(good); err != nil {
		t.Fatalf("rawLeaf encoding does not decode: %v", err)
	}
	cases := map[string][]byte{
		"empty":         {},
		"version 0":     rawLeaf(0, "log", "id", 0, "", 0, "", 0, 0),
		"version 2":     rawLeaf(2, "log", "id", 0, "", 0, "", 0, 0),
		"version 0xff":  rawLeaf(0xff, "log", "id", 0, "", 0, "", 0, 0),
		"trailing byte": append(append([]byte{}, good...), 0),
		"trailing leaf": append(append([]byte{}, good...), good...),
		"empty log":     rawLeaf(1, "", "id", 0, "", 0, "", 0, 0),
		"empty id":      rawLeaf(1, "log", "", 0, "", 0, "", 0, 0),
		"id too long":   rawLeaf(1, "log", strings.Repeat("i", merkle.MaxID+1), 0, "", 0, "", 0, 0),
		"bad UTF-8 log": rawLeaf(1, "\xff", "id", 0, "", 0, "", 0, 0),
		"bad UTF-8 id":  rawLeaf(1, "log", "\xff", 0, "", 0, "", 0, 0),
	}
	for bit := 3; bit < 8; bit++ {
		cases[fmt.Sprintf("flag bit %d", bit)] = rawLeaf(1, "log", "id", 1<<bit, "", 0, "", 0, 0)
		cases[fmt.Sprintf("flag bit %d with known bits", bit)] = rawLeaf(1, "log", "id", 7|1<<bit, "k", 0, "t", 0, 0)
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			l := merkle.Leaf{Log: "unchanged"}
			if err := l.UnmarshalBinary(b); !errors.Is(err, merkle.ErrLeaf) {
				t.Errorf("UnmarshalBinary(%x) = %v, want ErrLeaf", b, err)
			}
			if l.Log != "unchanged" {
				t.Errorf("UnmarshalBinary changed the leaf on error: %+v", l)
			}
		})
	}
}

func TestLeafUnmarshalTruncated(t *testing.T) {
	t.Parallel()
	for name, l := range testLeaves() {
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 4096 {
			b = b[:4096] // every prefix of the long one is tested below up to here
		}
		for n := 0; n < len(b); n++ {
			var got merkle.Leaf
			if err := got.UnmarshalBinary(b[:n]); !errors.Is(err, merkle.ErrLeaf) {
				t.Errorf("%s: UnmarshalBinary of the first %d of %d bytes = %v, want ErrLeaf", name, n, len(b), err)
			}
		}
	}
	// And every prefix of the longest leaf, cheaply: it is rejected.
	l := testLeaves()["max sizes"]
	b, _ := l.MarshalBinary()
	for n := 0; n < len(b); n += 97 {
		var got merkle.Leaf
		if err := got.UnmarshalBinary(b[:n]); err == nil {
			t.Errorf("max sizes: prefix of %d bytes accepted", n)
		}
	}
}

func TestLeafHashLarge(t *testing.T) {
	t.Parallel()
	// Larger than Hash's stack buffer.
	l := merkle.Leaf{Log: "a", ID: strings.Repeat("i", 1000), HasKey: true, Key: make([]byte, 5000)}
	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Hash()
	if err != nil || h != merkle.LeafHash(b) {
		t.Fatalf("Hash() = %x, %v; want %x", h, err, merkle.LeafHash(b))
	}
}

// testKey returns a fresh Ed25519 note key.
func testKey(t testing.TB, name string) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

func TestCheckpointText(t *testing.T) {
	t.Parallel()
	var root merkle.Hash
	for i := range root {
		root[i] = byte(i)
	}
	c := merkle.Checkpoint{Origin: "auditd.example/payments.0", Size: 12345, Root: root}
	want := "auditd.example/payments.0\n12345\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"
	if got := string(c.Text()); got != want {
		t.Errorf("Text() = %q, want %q", got, want)
	}
	got, err := merkle.ParseCheckpoint([]byte(want))
	if err != nil || got != c {
		t.Errorf("ParseCheckpoint = %+v, %v; want %+v", got, err, c)
	}
	ext := want + "extension line\nanother\n"
	got, err = merkle.ParseCheckpoint([]byte(ext))
	if err != nil || got != c {
		t.Errorf("ParseCheckpoint with extension lines = %+v, %v; want %+v", got, err, c)
	}
}

func TestCheckpointSignVerifiesWithNote(t *testing.T) {
	t.Parallel()
	s, v := testKey(t, "auditd.example")
	for _, c := range []merkle.Checkpoint{
		{Origin: "auditd.example/a", Size: 0, Root: merkle.EmptyRoot()},
		{Origin: "auditd.example/payments.0", Size: 1<<64 - 1, Root: merkle.LeafHash([]byte("x"))},
	} {
		signed, err := c.Sign(s)
		if err != nil {
			t.Fatal(err)
		}
		// Independently of OpenCheckpoint.
		n, err := note.Open(signed, note.VerifierList(v))
		if err != nil {
			t.Fatalf("note.Open: %v\n%s", err, signed)
		}
		want := fmt.Sprintf("%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
		if n.Text != want {
			t.Errorf("note text %q, want %q", n.Text, want)
		}
		if len(n.Sigs) != 1 || n.Sigs[0].Name != "auditd.example" || n.Sigs[0].Hash != v.KeyHash() || len(n.UnverifiedSigs) != 0 {
			t.Errorf("signatures %+v, unverified %+v", n.Sigs, n.UnverifiedSigs)
		}
		got, err := merkle.OpenCheckpoint(signed, v, c.Origin)
		if err != nil || got != c {
			t.Errorf("OpenCheckpoint = %+v, %v; want %+v", got, err, c)
		}
		got, err = merkle.OpenCheckpoint(signed, v, "")
		if err != nil || got != c {
			t.Errorf("OpenCheckpoint without origin = %+v, %v; want %+v", got, err, c)
		}
	}
}

func TestCheckpointSignRejectsOrigin(t *testing.T) {
	t.Parallel()
	s, _ := testKey(t, "auditd.example")
	for _, origin := range []string{"", "a\nb", "a\n"} {
		if _, err := (merkle.Checkpoint{Origin: origin, Size: 1}).Sign(s); err == nil {
			t.Errorf("Sign with origin %q succeeded", origin)
		}
	}
}

func TestOpenCheckpointRejects(t *testing.T) {
	t.Parallel()
	s, v := testKey(t, "auditd.example")
	_, otherV := testKey(t, "auditd.example") // same name, different key
	_, strangerV := testKey(t, "other.example")
	const origin = "auditd.example/log"
	root := merkle.LeafHash([]byte("root"))
	good := merkle.Checkpoint{Origin: origin, Size: 42, Root: root}
	signed, err := good.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := merkle.OpenCheckpoint(signed, v, origin); err != nil {
		t.Fatal(err)
	}
	signText := func(text string) []byte {
		b, err := note.Sign(&note.Note{Text: text}, s)
		if err != nil {
			t.Fatalf("note.Sign(%q): %v", text, err)
		}
		return b
	}
	rootB64 := root.String()
	otherRoot := merkle.LeafHash([]byte("other")).String()
	nonCanonical := []byte(rootB64)
	// Flip the low bits of the last significant character before the
	// padding: same bytes, non-canonical encoding.
	nonCanonical[len(nonCanonical)-2] ^= 1
	cases := map[string]struct {
		note   []byte
		v      note.Verifier
		origin string
	}{
		"wrong key same name": {signed, otherV, origin},
		"unknown key":         {signed, strangerV, origin},
		"wrong origin":        {signed, v, "auditd.example/other"},
		"origin prefix":       {signed, v, "auditd.example/lo"},
		"tampered size":       {bytes.Replace(signed, []byte("\n42\n"), []byte("\n43\n"), 1), v, origin},
		"tampered root":       {bytes.Replace(signed, []byte(rootB64), []byte(otherRoot), 1), v, origin},
		"tampered origin":     {bytes.Replace(signed, []byte("/log\n"), []byte("/lag\n"), 1), v, ""},
		"no signature":        {[]byte(string(good.Text()) + "\n"), v, origin},
		"garbage":             {[]byte("hello"), v, ""},
		"empty":               {nil, v, ""},
		"leading zero size":   {signText(origin + "\n042\n" + rootB64 + "\n"), v, origin},
		"plus sign size":      {signText(origin + "\n+42\n" + rootB64 + "\n"), v, origin},
		"negative size":       {signText(origin + "\n-1\n" + rootB64 + "\n"), v, origin},
		"size overflow":       {signText(origin + "\n18446744073709551616\n" + rootB64 + "\n"), v, origin},
		"hex size":            {signText(origin + "\n0x2a\n" + rootB64 + "\n"), v, origin},
		"space in size":       {signText(origin + "\n 42\n" + rootB64 + "\n"), v, origin},
		"non-canonical root":  {signText(origin + "\n42\n" + string(nonCanonical) + "\n"), v, origin},
		"unpadded root":       {signText(origin + "\n42\n" + strings.TrimRight(rootB64, "=") + "\n"), v, origin},
		"URL base64 root":     {signText(origin + "\n42\n" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 32)) + "\n"), v, origin},
		"short root":          {signText(origin + "\n42\n" + base64.StdEncoding.EncodeToString(root[:31]) + "\n"), v, origin},
		"long root":           {signText(origin + "\n42\n" + base64.StdEncoding.EncodeToString(append(root[:], 0)) + "\n"), v, origin},
		"missing root":        {signText(origin + "\n42\n"), v, origin},
		"empty origin":        {signText("\n42\n" + rootB64 + "\n"), v, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := merkle.OpenCheckpoint(tc.note, tc.v, tc.origin)
			if !errors.Is(err, merkle.ErrCheckpoint) {
				t.Errorf("OpenCheckpoint = %+v, %v; want ErrCheckpoint", c, err)
			}
			if c != (merkle.Checkpoint{}) {
				t.Errorf("OpenCheckpoint returned %+v with an error", c)
			}
		})
	}
	// Non-canonical bodies are rejected by the parser alone too.
	for _, body := range []string{
		origin + "\n042\n" + rootB64 + "\n",
		origin + "\n42\n" + string(nonCanonical) + "\n",
	} {
		if _, err := merkle.ParseCheckpoint([]byte(body)); !errors.Is(err, merkle.ErrCheckpoint) {
			t.Errorf("ParseCheckpoint(%q) = %v, want ErrCheckpoint", body, err)
		}
	}
	// Extension lines are allowed and ignored.
	ext := signText(string(good.Text()) + "ext one\next two\n")
	if c, err := merkle.OpenCheckpoint(ext, v, origin); err != nil || c != good {
		t.Errorf("OpenCheckpoint with extension lines = %+v, %v", c, err)
	}
	// A cosignature by another key does not hurt.
	cosigner, _ := testKey(t, "witness.example")
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := note.Sign(n, cosigner)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := merkle.OpenCheckpoint(cosigned, v, origin); err != nil || c != good {
		t.Errorf("OpenCheckpoint of a cosigned note = %+v, %v", c, err)
	}
}

// tlogTree is a tree built with golang.org/x/mod/sumdb/tlog, the
// independent implementation the proofs are checked against.
type tlogTree struct {
	leaves [][]byte
	stored []tlog.Hash
}

func newTlogTree(t testing.TB, n int) *tlogTree {
	tr := &tlogTree{}
	for i := 0; i < n; i++ {
		data := fmt.Appendf(nil, "leaf %d", i)
		hs, err := tlog.StoredHashes(int64(i), data, tr)
		if err != nil {
			t.Fatal(err)
		}
		tr.leaves = append(tr.leaves, data)
		tr.stored = append(tr.stored, hs...)
	}
	return tr
}

// ReadHashes implements tlog.HashReader.
func (tr *tlogTree) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		if x >= int64(len(tr.stored)) {
			return nil, fmt.Errorf("stored hash %d not found", x)
		}
		out[i] = tr.stored[x]
	}
	return out, nil
}

// reader returns a merkle.HashReader over the tree that fails the test if it
// is asked for a node not entirely below size, as the HashReader contract
// promises it will not be.
func (tr *tlogTree) reader(t testing.TB, size uint64) merkle.HashReader {
	return merkle.HashReaderFunc(func(ids []merkle.NodeID) ([]merkle.Hash, error) {
		out := make([]merkle.Hash, len(ids))
		for i, id := range ids {
			if (id.Index+1)<<id.Level > size {
				t.Errorf("asked for node %d/%d beyond tree size %d", id.Level, id.Index, size)
				return nil, fmt.Errorf("node %d/%d beyond size %d", id.Level, id.Index, size)
			}
			x := tlog.StoredHashIndex(int(id.Level), int64(id.Index))
			if x >= int64(len(tr.stored)) {
				return nil, fmt.Errorf("node %d/%d not stored", id.Level, id.Index)
			}
			out[i] = merkle.Hash(tr.stored[x])
		}
		return out, nil
	})
}

func (tr *tlogTree) root(t testing.TB, size int64) tlog.Hash {
	h, err := tlog.TreeHash(size, tr)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func toTlog(hs []merkle.Hash) []tlog.Hash {
	out := make([]tlog.Hash, len(hs))
	for i, h := range hs {
		out[i] = tlog.Hash(h)
	}
	return out
}

const maxProofLeaves = 64

func TestRootHashAgainstTlog(t *testing.T) {
	t.Parallel()
	tr := newTlogTree(t, maxProofLeaves)
	rng := merkle.NewRange()
	for size := uint64(0); size <= maxProofLeaves; size++ {
		got, err := merkle.RootHash(size, tr.reader(t, size))
		if err != nil {
			t.Fatal(err)
		}
		if want := tr.root(t, int64(size)); got != merkle.Hash(want) {
			t.Errorf("RootHash(%d) = %s, tlog %s", size, got, want)
		}
		if size > 0 {
			rb, err := rng.Root()
			if err != nil {
				t.Fatal(err)
			}
			if rb != got {
				t.Errorf("NewRange root at %d = %s, want %s", size, rb, got)
			}
			ra, err := merkle.RangeAt(size, tr.reader(t, size))
			if err != nil {
				t.Fatal(err)
			}
			if !ra.Equal(rng) {
				t.Errorf("RangeAt(%d) differs from a range built by appending", size)
			}
		}
		if size < maxProofLeaves {
			h := merkle.LeafHash(tr.leaves[size])
			if err := rng.Append(h, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := merkle.RootHash(0, nil); err != nil || got != merkle.EmptyRoot() {
		t.Errorf("RootHash(0) = %s, %v; want the empty root", got, err)
	}
}

func TestProveInclusionAgainstTlog(t *testing.T) {
	t.Parallel()
	tr := newTlogTree(t, maxProofLeaves)
	for size := uint64(1); size <= maxProofLeaves; size++ {
		th := tr.root(t, int64(size))
		r := tr.reader(t, size)
		for index := uint64(0); index < size; index++ {
			p, err := merkle.ProveInclusion(index, size, r)
			if err != nil {
				t.Fatalf("ProveInclusion(%d, %d): %v", index, size, err)
			}
			leaf := tr.leaves[index]
			if err := tlog.CheckRecord(toTlog(p), int64(size), th, int64(index), tlog.RecordHash(leaf)); err != nil {
				t.Errorf("tlog.CheckRecord of ProveInclusion(%d, %d): %v", index, size, err)
			}
			want, err := tlog.ProveRecord(int64(size), int64(index), tr)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(toTlog(p), []tlog.Hash(want)) {
				t.Errorf("ProveInclusion(%d, %d) = %v, tlog.ProveRecord %v", index, size, p, want)
			}
			if err := merkle.VerifyInclusion(index, size, merkle.LeafHash(leaf), p, merkle.Hash(th)); err != nil {
				t.Errorf("VerifyInclusion(%d, %d): %v", index, size, err)
			}
			// Wrong leaf, wrong index, tampered path: all rejected.
			if err := merkle.VerifyInclusion(index, size, merkle.LeafHash([]byte("other")), p, merkle.Hash(th)); err == nil {
				t.Errorf("VerifyInclusion(%d, %d) accepted a wrong leaf", index, size)
			}
			if size > 1 {
				if err := merkle.VerifyInclusion((index+1)%size, size, merkle.LeafHash(leaf), p, merkle.Hash(th)); err == nil {
					t.Errorf("VerifyInclusion(%d, %d) accepted a wrong index", index, size)
				}
				bad := append([]merkle.Hash{}, p...)
				bad[len(bad)-1][0] ^= 1
				if err := merkle.VerifyInclusion(index, size, merkle.LeafHash(leaf), bad, merkle.Hash(th)); err == nil {
					t.Errorf("VerifyInclusion(%d, %d) accepted a tampered path", index, size)
				}
			}
		}
	}
}

func TestProveConsistencyAgainstTlog(t *testing.T) {
	t.Parallel()
	tr := newTlogTree(t, maxProofLeaves)
	roots := make([]tlog.Hash, maxProofLeaves+1)
	for n := range roots {
		roots[n] = tr.root(t, int64(n))
	}
	for to := uint64(0); to <= maxProofLeaves; to++ {
		r := tr.reader(t, to)
		// From the empty tree: the empty proof.
		if p, err := merkle.ProveConsistency(0, to, r); err != nil || len(p) != 0 {
			t.Errorf("ProveConsistency(0, %d) = %v, %v; want an empty proof", to, p, err)
		}
		for from := uint64(1); from <= to; from++ {
			p, err := merkle.ProveConsistency(from, to, r)
			if err != nil {
				t.Fatalf("ProveConsistency(%d, %d): %v", from, to, err)
			}
			if err := tlog.CheckTree(toTlog(p), int64(to), roots[to], int64(from), roots[from]); err != nil {
				t.Errorf("tlog.CheckTree of ProveConsistency(%d, %d): %v", from, to, err)
			}
			want, err := tlog.ProveTree(int64(to), int64(from), tr)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(toTlog(p), []tlog.Hash(want)) {
				t.Errorf("ProveConsistency(%d, %d) = %v, tlog.ProveTree %v", from, to, p, want)
			}
			if err := merkle.VerifyConsistency(from, to, p, merkle.Hash(roots[from]), merkle.Hash(roots[to])); err != nil {
				t.Errorf("VerifyConsistency(%d, %d): %v", from, to, err)
			}
			if from < to {
				if err := merkle.VerifyConsistency(from, to, p, merkle.Hash(roots[from-1]), merkle.Hash(roots[to])); err == nil {
					t.Errorf("VerifyConsistency(%d, %d) accepted a wrong old root", from, to)
				}
				if len(p) > 0 {
					bad := append([]merkle.Hash{}, p...)
					bad[0][31] ^= 0x80
					if err := merkle.VerifyConsistency(from, to, bad, merkle.Hash(roots[from]), merkle.Hash(roots[to])); err == nil {
						t.Errorf("VerifyConsistency(%d, %d) accepted a tampered proof", from, to)
					}
				}
			}
		}
	}
}

func TestProofRange(t *testing.T) {
	t.Parallel()
	never := merkle.HashReaderFunc(func(ids []merkle.NodeID) ([]merkle.Hash, error) {
		t.Errorf("reader called for %v", ids)
		return nil, errors.New("unexpected read")
	})
	for _, c := range [][2]uint64{{0, 0}, {1, 1}, {5, 5}, {6, 5}, {1 << 63, 1}, {^uint64(0), ^uint64(0)}} {
		if _, err := merkle.ProveInclusion(c[0], c[1], never); !errors.Is(err, merkle.ErrRange) {
			t.Errorf("ProveInclusion(%d, %d) = %v, want ErrRange", c[0], c[1], err)
		}
	}
	for _, c := range [][2]uint64{{1, 0}, {6, 5}, {^uint64(0), 1}} {
		if _, err := merkle.ProveConsistency(c[0], c[1], never); !errors.Is(err, merkle.ErrRange) {
			t.Errorf("ProveConsistency(%d, %d) = %v, want ErrRange", c[0], c[1], err)
		}
	}
	// Equal sizes need no hashes.
	for _, n := range []uint64{0, 1, 7, 1 << 40} {
		if p, err := merkle.ProveConsistency(n, n, never); err != nil || len(p) != 0 {
			t.Errorf("ProveConsistency(%d, %d) = %v, %v; want an empty proof", n, n, p, err)
		}
	}
	// One leaf: the empty path.
	if p, err := merkle.ProveInclusion(0, 1, never); err != nil || len(p) != 0 {
		t.Errorf("ProveInclusion(0, 1) = %v, %v; want an empty path", p, err)
	}
}

func TestProofReaderErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	failing := merkle.HashReaderFunc(func(ids []merkle.NodeID) ([]merkle.Hash, error) { return nil, boom })
	if _, err := merkle.ProveInclusion(3, 10, failing); !errors.Is(err, boom) {
		t.Errorf("ProveInclusion with a failing reader = %v, want its error", err)
	}
	if _, err := merkle.ProveConsistency(3, 10, failing); !errors.Is(err, boom) {
		t.Errorf("ProveConsistency with a failing reader = %v, want its error", err)
	}
	if _, err := merkle.RootHash(10, failing); !errors.Is(err, boom) {
		t.Errorf("RootHash with a failing reader = %v, want its error", err)
	}
	short := merkle.HashReaderFunc(func(ids []merkle.NodeID) ([]merkle.Hash, error) {
		return make([]merkle.Hash, len(ids)-1), nil
	})
	if _, err := merkle.ProveInclusion(3, 10, short); err == nil {
		t.Error("ProveInclusion accepted a reader that returned too few hashes")
	}
	if _, err := merkle.ProveConsistency(3, 10, short); err == nil {
		t.Error("ProveConsistency accepted a reader that returned too few hashes")
	}
	if _, err := merkle.RootHash(10, short); err == nil {
		t.Error("RootHash accepted a reader that returned too few hashes")
	}
}
