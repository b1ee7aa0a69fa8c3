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

// hexCase classifies c: 0 not a hex digit, 1 a decimal digit, 2 a-f, 3 A-F.
func hexCase(c byte) int {
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

func isUUIDDash(i int) bool { return i == 8 || i == 13 || i == 18 || i == 23 }

// packForm returns how id packs: its form and its length in bytes.
func packForm(id string) (form, n int, ok bool) {
	uuid := len(id) == 36
	for i := 8; uuid && i <= 23; i += 5 {
		uuid = id[i] == '-'
	}
	if !uuid && (len(id) == 0 || len(id)%2 != 0) {
		return 0, 0, false
	}
	lower, upper := false, false
	for i := 0; i < len(id); i++ {
		if uuid && isUUIDDash(i) {
			continue
		}
		switch hexCase(id[i]) {
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

// appendPackedID appends the packed form of id, which packForm accepted.
func appendPackedID(b []byte, id string, form, n int) []byte {
	b = binary.AppendUvarint(b, uint64(n)<<2|uint64(form))
	var hi byte
	odd := false
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
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
			b = append(b, hi<<4|v)
		} else {
			hi = v
		}
		odd = !odd
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
