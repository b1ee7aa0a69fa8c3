package main

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/auditd/auditd/internal/keyfile"
)

// verifierKeyArg is the verifier key given by a --verifier-key value (the
// key itself, or @FILE naming a file that holds it) or a
// --verifier-key-file; prove and verify accept both forms.
func verifierKeyArg(key, file string) (string, error) {
	if key != "" && file != "" {
		return "", errors.New("give --verifier-key or --verifier-key-file, not both")
	}
	if strings.HasPrefix(key, "@") {
		file = key[1:]
	}
	if file != "" {
		b, _, err := keyfile.Read("verifier key file", file)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	return strings.TrimSpace(key), nil
}

// noteSigners describes who signed a note ("auditd.local (key hash
// 6874f62d)"), for an error that says which key did sign when the one
// given did not; "" when the text is not a signed note.
func noteSigners(signed []byte) string {
	text := string(signed)
	i := strings.Index(text, "\n\n")
	if i < 0 {
		return ""
	}
	var out []string
	for _, line := range strings.Split(text[i+2:], "\n") {
		name, sig, ok := strings.Cut(strings.TrimPrefix(line, "\u2014 "), " ")
		if !ok || !strings.HasPrefix(line, "\u2014 ") {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(b) < 4 {
			continue
		}
		out = append(out, fmt.Sprintf("%s (key hash %08x)", name, binary.BigEndian.Uint32(b)))
	}
	return strings.Join(out, ", ")
}
