package main

import (
	"errors"
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
