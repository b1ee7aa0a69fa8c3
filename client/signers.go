package client

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// keyMismatch explains a signed note that v could not open when no
// signature line of the note is v's key: it names the key given and the
// keys that did sign ("auditd.local (key hash 6874f62d)"), so that a
// wrong --verifier-key reads as one. "" when a line is v's (the signature
// itself is bad) or the text is not a signed note.
func keyMismatch(signed []byte, v note.Verifier) string {
	text := string(signed)
	i := strings.Index(text, "\n\n")
	if i < 0 {
		return ""
	}
	var by []string
	for _, line := range strings.Split(text[i+2:], "\n") {
		name, sig, ok := strings.Cut(strings.TrimPrefix(line, "\u2014 "), " ")
		if !ok || !strings.HasPrefix(line, "\u2014 ") {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(b) < 4 {
			continue
		}
		hash := binary.BigEndian.Uint32(b)
		if name == v.Name() && hash == v.KeyHash() {
			return ""
		}
		by = append(by, fmt.Sprintf("%s (key hash %08x)", name, hash))
	}
	if len(by) == 0 {
		return ""
	}
	return fmt.Sprintf("the key given is %s (key hash %08x), the checkpoint is signed by %s", v.Name(), v.KeyHash(), strings.Join(by, ", "))
}
