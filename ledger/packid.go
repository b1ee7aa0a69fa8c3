package ledger

import "encoding/binary"

// Packed ids (storage layout 2, flag bit 7 of a stored entry). An id that
// is hex digits of one case, or a UUID in its canonical 8-4-4-4-12 form of
// one case, is stored as its bytes behind a uvarint header n<<2 | form:
//
//	form 0  lowercase hex, 2n digits      form 2  lowercase UUID, n = 16
//	form 1  uppercase hex, 2n digits      form 3  uppercase UUID, n = 16
//
// A 36-character UUID then takes 17 bytes instead of 37, a 32-digit derived
// id (DeriveID) 17 instead of 33. An id of digits alone is lowercase. Any
// other id is stored as it is (flag bit 7 clear).
const (
	idLowerHex = iota
	idUpperHex
	idLowerUUID
	idUpperUUID
)

const (
	lowerDigits = "0123456789abcdef"
	upperDigits = "0123456789ABCDEF"
)

// hexTab classifies each byte: a hex digit has its value in the low four
// bits and hexDigit set, a letter also hexLower or hexUpper; any other byte
// is 0. Packing reads it instead of branching on each character (a random
// mix of digits and letters mispredicts half the branches).
var hexTab = func() (t [256]byte) {
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c-'0') | hexDigit
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a'+10) | hexDigit | hexLower
		t[c-'a'+'A'] = byte(c-'a'+10) | hexDigit | hexUpper
	}
	return t
}()

const (
	hexDigit = 0x10
	hexLower = 0x20
	hexUpper = 0x40
)

// uuidGroups are the hex groups of a canonical UUID, between its dashes.
var uuidGroups = [5][2]int{{0, 8}, {9, 13}, {14, 18}, {19, 23}, {24, 36}}

// hexClasses folds the classes of s's bytes: all, what every byte has;
// some, what any byte has.
func hexClasses(s string, all, some byte) (byte, byte) {
	for i := 0; i < len(s); i++ {
		c := hexTab[s[i]]
		all &= c
		some |= c
	}
	return all, some
}

// packForm returns how id packs: its form and its length in bytes.
func packForm(id string) (form, n int, ok bool) {
	uuid := len(id) == 36 && id[8] == '-' && id[13] == '-' && id[18] == '-' && id[23] == '-'
	all, some := byte(hexDigit), byte(0)
	switch {
	case uuid:
		for _, g := range uuidGroups {
			all, some = hexClasses(id[g[0]:g[1]], all, some)
		}
	case len(id) == 0 || len(id)%2 != 0:
		return 0, 0, false
	default:
		all, some = hexClasses(id, all, some)
	}
	switch {
	case all&hexDigit == 0 || some&(hexLower|hexUpper) == hexLower|hexUpper:
		return 0, 0, false
	case uuid && some&hexUpper != 0:
		return idUpperUUID, 16, true
	case uuid:
		return idLowerUUID, 16, true
	case some&hexUpper != 0:
		return idUpperHex, len(id) / 2, true
	}
	return idLowerHex, len(id) / 2, true
}

// appendPackedID appends the packed form of id, which packForm accepted.
func appendPackedID(b []byte, id string, form, n int) []byte {
	b = binary.AppendUvarint(b, uint64(n)<<2|uint64(form))
	if form < idLowerUUID {
		return appendHexBytes(b, id)
	}
	for _, g := range uuidGroups {
		b = appendHexBytes(b, id[g[0]:g[1]])
	}
	return b
}

// appendHexBytes appends the bytes that the even number of hex digits s
// spell.
func appendHexBytes(b []byte, s string) []byte {
	for i := 0; i+1 < len(s); i += 2 {
		b = append(b, hexTab[s[i]]<<4|hexTab[s[i+1]]&15)
	}
	return b
}

// unpackID decodes a packed id at the start of b, appending its text to
// dst. It returns the text and the rest of b.
func unpackID(dst, b []byte) (id, rest []byte, ok bool) {
	h, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, nil, false
	}
	form, n := int(h&3), h>>2
	if n == 0 || uint64(len(b)-k) < n || (form >= idLowerUUID && n != 16) {
		return nil, nil, false
	}
	raw := b[k : k+int(n)]
	digits := lowerDigits
	if form == idUpperHex || form == idUpperUUID {
		digits = upperDigits
	}
	start := len(dst)
	for i, c := range raw {
		if form >= idLowerUUID && (i == 4 || i == 6 || i == 8 || i == 10) {
			dst = append(dst, '-')
		}
		dst = append(dst, digits[c>>4], digits[c&15])
	}
	return dst[start:], b[k+int(n):], true
}
