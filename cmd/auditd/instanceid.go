package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/durable"
)

// instanceIDFile, in the data directory, holds the directory's identity:
// random, made by the first serve on the directory, read by every later
// one. Only serve makes it; fsck, verify and the other commands that read
// a data directory leave it as it is.
const instanceIDFile = "instance-id"

// maxInstanceID bounds an identity's length; it is sent in a header.
const maxInstanceID = 64

// openInstance returns the identity serve announces (Auditd-Instance and
// Auditd-Instance-Run on every API response, see api.WithInstance) and its
// peer cross-check tells itself by: the data directory's, made and
// written durably if the directory has none yet, and a random one for this
// run. Called with the ledger open, whose lock on dir keeps two serves
// from making two identities for one directory.
func openInstance(dir string, logger *slog.Logger) (checkers.Instance, error) {
	id, err := readInstanceID(dir)
	created := false
	if errors.Is(err, fs.ErrNotExist) {
		id, created = randomID(16), true
		err = durable.WriteFile(filepath.Join(dir, instanceIDFile), []byte(id+"\n"), 0o600)
	}
	if err != nil {
		return checkers.Instance{}, err
	}
	in := checkers.Instance{ID: id, Run: randomID(8)}
	logger.Info("instance identity", "instance", in.ID, "run", in.Run, "created", created,
		"file", filepath.Join(dir, instanceIDFile))
	return in, nil
}

// readInstanceID returns dir's identity; an error wrapping fs.ErrNotExist
// if it has none yet.
func readInstanceID(dir string) (string, error) {
	path := filepath.Join(dir, instanceIDFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("instance identity: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if !validInstanceID(id) {
		return "", fmt.Errorf("instance identity: %s holds no identity (1 to %d letters, digits, '.', '_' or '-'): correct it, or remove it to make a new one",
			path, maxInstanceID)
	}
	return id, nil
}

func validInstanceID(id string) bool {
	if id == "" || len(id) > maxInstanceID {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// randomID is n random bytes in hex.
func randomID(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// openIdentity opens the data directory's identity (openInstance) for
// serve, once the ledger is open, and hands it to the peer cross-check
// with serve's logger; serve names its API's answers with the returned
// identity (api.WithInstance).
func (d *instance) openIdentity() (checkers.Instance, error) {
	in, err := openInstance(d.cfg.DataDir, d.log)
	if err != nil {
		return checkers.Instance{}, err
	}
	d.cfg.Checks.Peers.self, d.cfg.Checks.Peers.logger = in, d.log
	return in, nil
}
