package ledger

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// modelPackForm and modelAppendPackedID are the packing as first written,
// a branch a character: the model the table-driven packing must match.
func modelPackForm(id string) (form, n int, ok bool) {
	class := func(c byte) int {
		switch {
		case c >= '0' && c <= '9':
			return 1
		case c >= 'a' && c <= 'f':
			return 2
		case c >= 'A' && c <= 'F':
			return 3
		}
		return 0
	}
	dash := func(i int) bool { return i == 8 || i == 13 || i == 18 || i == 23 }
	uuid := len(id) == 36
	for i := 8; uuid && i <= 23; i += 5 {
		uuid = id[i] == '-'
	}
	if !uuid && (len(id) == 0 || len(id)%2 != 0) {
		return 0, 0, false
	}
	lower, upper := false, false
	for i := 0; i < len(id); i++ {
		if uuid && dash(i) {
			continue
		}
		switch class(id[i]) {
		case 0:
			return 0, 0, false
		case 2:
			lower = true
		case 3:
			upper = true
		}
	}
	switch {
	case lower && upper:
		return 0, 0, false
	case uuid && upper:
		return idUpperUUID, 16, true
	case uuid:
		return idLowerUUID, 16, true
	case upper:
		return idUpperHex, len(id) / 2, true
	}
	return idLowerHex, len(id) / 2, true
}

func modelAppendPackedID(id string, form int) []byte {
	var out []byte
	var hi byte
	odd := false
	for i := 0; i < len(id); i++ {
		if form >= idLowerUUID && id[i] == '-' {
			continue
		}
		var v byte
		switch c := id[i]; {
		case c <= '9':
			v = c - '0'
		case c >= 'a':
			v = c - 'a' + 10
		default:
			v = c - 'A' + 10
		}
		if odd {
			out = append(out, hi<<4|v)
		} else {
			hi = v
		}
		odd = !odd
	}
	return out
}

func checkPackMatchesModel(t *testing.T, id string) {
	t.Helper()
	form, n, ok := packForm(id)
	mform, mn, mok := modelPackForm(id)
	if form != mform || n != mn || ok != mok {
		t.Fatalf("packForm(%q) = %d, %d, %v; the model says %d, %d, %v", id, form, n, ok, mform, mn, mok)
	}
	if !ok {
		return
	}
	got := appendPackedID(nil, id, form, n)
	header := binary.AppendUvarint(nil, uint64(n)<<2|uint64(form))
	want := append(header, modelAppendPackedID(id, form)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("appendPackedID(%q) = %x, the model says %x", id, got, want)
	}
	if len(got)-len(header) != n {
		t.Fatalf("appendPackedID(%q) wrote %d bytes, packForm said %d", id, len(got)-len(header), n)
	}
}

// TestPackIDMatchesModel changes every byte of ids of each form to every
// value, and tries random ids, against the model.
func TestPackIDMatchesModel(t *testing.T) {
	t.Parallel()
	for _, base := range []string{
		"0f8e2c1a-7b3d-4e5f-9a6b-1c2d3e4f5a6b",
		"0F8E2C1A-7B3D-4E5F-9A6B-1C2D3E4F5A6B",
		"01234567-8901-2345-6789-012345678901",
		"0123456789abcdef0123456789abcdef",
		"0123456789ABCDEF0123456789ABCDEF",
		"0123456789abcdef0123456789abcdef0123",
		"42",
		"ev-000001",
	} {
		for i := 0; i < len(base); i++ {
			for c := 0; c < 256; c++ {
				b := []byte(base)
				b[i] = byte(c)
				checkPackMatchesModel(t, string(b))
			}
		}
	}
	const alphabet = "0123456789abcdefABCDEF-g"
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if len(b) == 36 && r.IntN(2) == 0 {
			b[8], b[13], b[18], b[23] = '-', '-', '-', '-'
		}
		checkPackMatchesModel(t, string(b))
	}
}

func FuzzPackID(f *testing.F) {
	f.Add("0f8e2c1a-7b3d-4e5f-9a6b-1c2d3e4f5a6b")
	f.Add("0123456789ABCDEF")
	f.Fuzz(func(t *testing.T, id string) { checkPackMatchesModel(t, id) })
}

func BenchmarkPackUUID(b *testing.B) {
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = uuidLike(uint64(i))
	}
	buf := make([]byte, 0, 32)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i&1023]
		form, n, ok := packForm(id)
		if !ok {
			b.Fatal(id)
		}
		buf = appendPackedID(buf[:0], id, form, n)
	}
}
