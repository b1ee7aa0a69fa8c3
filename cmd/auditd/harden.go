package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"

	"github.com/auditd/auditd/internal/keyfile"
)

// authSummary says in the startup log which token guards what.
func authSummary(cfg Config) string {
	switch {
	case cfg.WriteToken != "" && cfg.ReadToken != "":
		return "writes need the write token; reads need the read or write token"
	case cfg.WriteToken != "":
		return "writes need the write token; reads are public"
	case cfg.ReadToken != "":
		return "reads and writes need the read token (no write token set)"
	}
	return "no tokens: reads and writes are open"
}

// ensureDataDir creates the data directory with mode 0700, and narrows an
// existing one that others can read or enter to 0700 (the ledger and the
// signing key are the operator's alone).
func ensureDataDir(dir string, logger *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("data dir %s has mode %04o and cannot be narrowed to 0700: %w", dir, perm, err)
		}
		logger.Warn("narrowed the data dir's mode to 0700", "dir", dir, "was", fmt.Sprintf("%04o", perm))
	}
	return nil
}

// checkKeyMode refuses a private key file that group or others can read
// or write: whoever reads it can sign as this auditd (with the signing
// key, checkpoints of its logs; with the witness key, cosignatures). With
// allow set it warns loudly instead. what names the key ("signing key",
// "witness key").
func checkKeyMode(what, path string, allow bool, logger *slog.Logger) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	perm := fi.Mode().Perm()
	err = keyfile.CheckPrivate(what+" file", path, perm)
	if err == nil {
		return nil
	}
	if !allow {
		return fmt.Errorf("%w (or pass --allow-insecure-key-file to start anyway)", err)
	}
	logger.Error("INSECURE: the "+what+" is readable or writable by others; anyone who reads it can sign as this auditd",
		"file", path, "mode", fmt.Sprintf("%04o", perm))
	return nil
}

// umask sets the process's file mode creation mask and returns the old one.
func umask(m int) int { return syscall.Umask(m) }

// readTokenFiles replaces the tokens with the contents of their files.
func (c *Config) readTokenFiles() error {
	for _, t := range []struct {
		file string
		dst  *string
		what string
	}{{c.WriteTokenFile, &c.WriteToken, "write"}, {c.ReadTokenFile, &c.ReadToken, "read"}} {
		if t.file == "" {
			continue
		}
		b, _, err := keyfile.Read(t.what+" token file", t.file)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return fmt.Errorf("config: %s token file %s is empty", t.what, t.file)
		}
		if strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("config: %s token file %s holds more than one word", t.what, t.file)
		}
		*t.dst = tok
	}
	return nil
}

// explainLock names the lock and its likely holder when the ledger cannot
// be opened because another process holds the data dir.
func explainLock(dir string, err error) error {
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) || strings.Contains(err.Error(), "lock held by current process") {
		return fmt.Errorf("open the ledger in %s: %s/LOCK is held by another process "+
			"(another auditd serve, or an auditd verify --data-dir, on the same data dir?): %w", dir, dir, err)
	}
	return err
}
