package ledger

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/auditd/auditd/merkle"
)

const fuzzLogName = "fuzz.0"

// fuzzStoredSeeds are stored entries appendStored writes, plus a pruned one.
func fuzzStoredSeeds(f *testing.F) [][]byte {
	leaves := []merkle.Leaf{
		{Log: fuzzLogName, ID: "1"},
		{Log: fuzzLogName, ID: "evt-2", HasKey: true, Key: []byte("customer-42"), Time: 1704164645123456789},
		{Log: fuzzLogName, ID: "evt-3", HasKey: true, Time: -1, TimeAssigned: true},
		{Log: fuzzLogName, ID: "evt-4", Source: &merkle.Source{Topic: "payments", Partition: -1, Offset: -1}},
		{Log: fuzzLogName, ID: "evt-5", HasKey: true, Key: []byte{0, 0xff}, Source: &merkle.Source{Topic: "t", Partition: 1 << 30, Offset: 1 << 62}},
		{Log: fuzzLogName, ID: "evt-6", Source: &merkle.Source{Topic: "t", Offset: 9}, Headers: []merkle.Header{{Key: "id", Value: []byte("x")}, {Key: "id", Value: []byte{}}}, Marks: merkle.MarkNotJSON | merkle.MarkEmpty},
		// Ids that pack (packid.go).
		{Log: fuzzLogName, ID: "0f8e2c1a-7b3d-4e5f-9a6b-1c2d3e4f5a6b", Time: 7},
		{Log: fuzzLogName, ID: "0F8E2C1A-7B3D-4E5F-9A6B-1C2D3E4F5A6B", HasKey: true, Key: []byte("k"), Time: 8},
		{Log: fuzzLogName, ID: "0123456789abcdef0123456789abcdef", Source: &merkle.Source{Topic: "t", Offset: 1}},
		{Log: fuzzLogName, ID: "ABCDEF", Marks: merkle.MarkEmpty},
	}
	var out [][]byte
	for i, l := range leaves {
		out = append(out, appendStored(nil, &l, []byte(`{"n":1}`), i%2 == 0, false))
	}
	omitted := leaves[1]
	omitted.PayloadSHA256 = merkle.Hash(bytes.Repeat([]byte{0xab}, merkle.HashSize))
	out = append(out, appendStored(nil, &omitted, nil, true, true))
	return out
}

// FuzzDecodeStored feeds arbitrary bytes to decodeStored: it must not
// panic, and whatever it accepts must be a consistent record that encodes
// back to a value decoding to the same record.
func FuzzDecodeStored(f *testing.F) {
	for _, s := range fuzzStoredSeeds(f) {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Add([]byte{0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add([]byte{sSource, 1, 'x', 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := append([]byte(nil), data...)
		rec, err := decodeStored(fuzzLogName, 7, data)
		if !bytes.Equal(data, orig) {
			t.Fatal("decodeStored modified its input")
		}
		if err != nil {
			return
		}
		if rec.Index != 7 || rec.Leaf.Log != fuzzLogName {
			t.Fatalf("record index %d log %q", rec.Index, rec.Leaf.Log)
		}
		// The record does not alias the input.
		for i := range data {
			data[i] ^= 0x55
		}
		checkStoredRecord(t, rec)
		if rec.PayloadPruned {
			return // appendStored does not write pruned entries
		}
		again, err := decodeStored(fuzzLogName, 7, appendStored(nil, &rec.Leaf, rec.Payload, rec.PayloadJSON, false))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !sameRecord(again, rec) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", again, rec)
		}
	})
}

// FuzzStoredRoundTrip builds a leaf from fuzzed fields: every valid leaf
// and payload must come back from appendStored then decodeStored unchanged.
func FuzzStoredRoundTrip(f *testing.F) {
	f.Add("1", byte(0), []byte(nil), int64(0), "", int32(0), int64(0), []byte(nil))
	f.Add("evt-2", byte(sKey|sPayloadJSON), []byte("k"), int64(1704164645123456789), "", int32(0), int64(0), []byte(`{"a":1}`))
	f.Add("evt-3", byte(sKey|sTimeAssigned|sSource), []byte{}, int64(-1), "payments", int32(-5), int64(-1), []byte{0, 1, 2})
	f.Add("evt-4", byte(sSource), []byte(nil), int64(1<<62), "", int32(1<<31-1), int64(1<<63-1), bytes.Repeat([]byte{9}, 300))
	f.Add("0f8e2c1a-7b3d-4e5f-9a6b-1c2d3e4f5a6b", byte(0), []byte(nil), int64(5), "", int32(0), int64(0), []byte("p"))
	f.Add("0123456789ABCDEF", byte(sKey), []byte("k"), int64(5), "", int32(0), int64(0), []byte("p"))
	f.Fuzz(func(t *testing.T, id string, flags byte, key []byte, tm int64, topic string, part int32, off int64, payload []byte) {
		l := merkle.Leaf{Log: fuzzLogName, ID: id, Time: tm, TimeAssigned: flags&sTimeAssigned != 0, PayloadSHA256: sha256.Sum256(payload)}
		if flags&sKey != 0 {
			l.HasKey, l.Key = true, key
		}
		if flags&sSource != 0 {
			l.Source = &merkle.Source{Topic: topic, Partition: part, Offset: off}
		}
		if l.Validate() != nil {
			return
		}
		stored := appendStored(nil, &l, payload, flags&sPayloadJSON != 0, false)
		rec, err := decodeStored(fuzzLogName, 3, stored)
		if err != nil {
			t.Fatalf("decodeStored(appendStored(%+v)): %v", l, err)
		}
		want, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.LeafBytes, want) {
			t.Fatalf("leaf bytes\n got %x\nwant %x", rec.LeafBytes, want)
		}
		if rec.LeafHash != merkle.LeafHash(want) {
			t.Fatalf("leaf hash %s, want %s", rec.LeafHash, merkle.LeafHash(want))
		}
		if !bytes.Equal(rec.Payload, payload) || rec.PayloadJSON != (flags&sPayloadJSON != 0) || rec.PayloadPruned {
			t.Fatalf("payload %x json %v pruned %v, want %x json %v", rec.Payload, rec.PayloadJSON, rec.PayloadPruned, payload, flags&sPayloadJSON != 0)
		}
		if !sameContent(&rec.Leaf, &l) || rec.Leaf.Time != l.Time || rec.Leaf.Log != l.Log {
			t.Fatalf("leaf\n got %+v\nwant %+v", rec.Leaf, l)
		}
		checkStoredRecord(t, rec)
	})
}

// checkStoredRecord checks a decoded record's derived fields against its
// leaf.
func checkStoredRecord(t *testing.T, rec *Record) {
	t.Helper()
	if err := rec.Leaf.Validate(); err != nil {
		t.Fatalf("decoded leaf does not validate: %v", err)
	}
	lb, err := rec.Leaf.MarshalBinary()
	if err != nil || !bytes.Equal(lb, rec.LeafBytes) {
		t.Fatalf("LeafBytes %x, leaf encodes to %x (%v)", rec.LeafBytes, lb, err)
	}
	if rec.LeafHash != merkle.LeafHash(lb) {
		t.Fatalf("LeafHash %s, want %s", rec.LeafHash, merkle.LeafHash(lb))
	}
	var back merkle.Leaf
	if err := back.UnmarshalBinary(rec.LeafBytes); err != nil {
		t.Fatalf("LeafBytes do not decode: %v", err)
	}
	if !rec.PayloadPruned && rec.Leaf.PayloadSHA256 != sha256.Sum256(rec.Payload) {
		t.Fatal("payload hash does not match the payload")
	}
	if rec.PayloadPruned && rec.Payload != nil {
		t.Fatalf("pruned record has payload %x", rec.Payload)
	}
}

func sameRecord(a, b *Record) bool {
	return a.Index == b.Index && a.Leaf.Log == b.Leaf.Log && a.Leaf.Time == b.Leaf.Time && sameContent(&a.Leaf, &b.Leaf) &&
		bytes.Equal(a.LeafBytes, b.LeafBytes) && a.LeafHash == b.LeafHash && bytes.Equal(a.Payload, b.Payload) &&
		a.PayloadJSON == b.PayloadJSON && a.PayloadPruned == b.PayloadPruned
}

// FuzzDecodeTile feeds arbitrary bytes to decodeTile: it must not panic,
// and whatever it accepts is w base hashes (w <= 256) followed by the w/16
// level-4 hashes over them, exactly the bytes it was given.
func FuzzDecodeTile(f *testing.F) {
	for _, w := range []int{0, 1, 15, 16, 17, 31, 32, 255, 256} {
		t := tileBuf{}
		for i := 0; i < w; i++ {
			t.base = append(t.base, merkle.LeafHash([]byte{byte(i)}))
		}
		for i := 0; i < w/midStride; i++ {
			t.mid = append(t.mid, subtreeHash(t.base[i*midStride:(i+1)*midStride]))
		}
		f.Add(t.value())
	}
	f.Add(make([]byte, 33*merkle.HashSize))
	f.Add(make([]byte, 273*merkle.HashSize))
	f.Add(make([]byte, 31))
	f.Fuzz(func(t *testing.T, v []byte) {
		base, mid, err := decodeTile(v)
		if err != nil {
			return
		}
		w := len(base)
		if w > tileWidth || len(mid) != w/midStride || (w+len(mid))*merkle.HashSize != len(v) {
			t.Fatalf("tile of %d bytes decoded to %d base and %d mid hashes", len(v), w, len(mid))
		}
		tb := tileBuf{base: base, mid: mid}
		if !bytes.Equal(tb.value(), v) {
			t.Fatal("decoded tile does not encode back to its bytes")
		}
	})
}

// TestDecodeTileWidths checks decodeTile on every width a tile can have,
// and rejects every other count of hashes up to a full tile and beyond.
func TestDecodeTileWidths(t *testing.T) {
	t.Parallel()
	valid := map[int]int{} // hashes -> width
	for w := 0; w <= tileWidth; w++ {
		valid[w+w/midStride] = w
	}
	for n := 0; n <= tileWidth+tileWidth/midStride+20; n++ {
		v := make([]byte, n*merkle.HashSize)
		for i := range v {
			v[i] = byte(i / merkle.HashSize)
		}
		base, mid, err := decodeTile(v)
		w, ok := valid[n]
		if !ok {
			if err == nil {
				t.Errorf("tile of %d hashes accepted as %d + %d", n, len(base), len(mid))
			}
			continue
		}
		if err != nil || len(base) != w || len(mid) != w/midStride {
			t.Errorf("tile of %d hashes = %d + %d, %v; want %d + %d", n, len(base), len(mid), err, w, w/midStride)
		}
		for i := range base {
			if base[i][0] != byte(i) {
				t.Errorf("tile of %d hashes: base %d out of place", n, i)
				break
			}
		}
	}
	if _, _, err := decodeTile(make([]byte, 33)); err == nil {
		t.Error("tile of 33 bytes accepted")
	}
}
