package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/auditd/auditd/internal/durable"
)

const restoreUsage = `Usage: auditd restore --from FILE --data-dir DIR [flags]

Restores a backup taken by auditd backup into DIR, which must be empty or
not exist, then runs auditd fsck on it with the checkpoint guard copies of
this host (the default guard dir, or --checkpoint-guard-dir): a backup that
is behind a checkpoint this key signed here later (the daemon went on after
the backup) is refused and DIR left empty, because serving it would fork
the logs. --allow-behind-guard restores it anyway, for an investigation:
serve then refuses those logs, or serves them read-only with
--rollback-read-only. A restore cannot see checkpoints signed on other
hosts or cosigned by witnesses: a witness refuses the restored log's next
checkpoint if it saw a later one (docs/operations.md, "Backup and restore").

The backup holds no private key: put the signing key at DIR/auditd.key
(mode 0600), or give serve --key-file, before starting serve on DIR.

Exit status: 0 restored and fsck clean, 1 refused or failed (DIR left
empty), 2 bad command line.

`

// runRestore is auditd restore.
func runRestore(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the backup file auditd backup wrote (required)")
	dir := fs.String("data-dir", "", "the data directory to restore into (required; empty or missing)")
	guard := fs.String("checkpoint-guard-dir", "", "the guard dir serve will run with, if not the default; "+guardFlagUsage)
	allowBehind := fs.Bool("allow-behind-guard", false, "restore even a backup behind this host's guard copies (serve will refuse those logs)")
	fs.Usage = func() {
		fmt.Fprint(stderr, restoreUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "auditd restore: "+format+"\n", a...)
		return code
	}
	switch {
	case fs.NArg() > 0:
		return fail(2, "unexpected argument %q", fs.Arg(0))
	case *from == "":
		return fail(2, "--from FILE is required")
	case *dir == "":
		return fail(2, "--data-dir DIR is required")
	}
	created := false
	switch ents, err := os.ReadDir(*dir); {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(*dir, 0o700); err != nil {
			return fail(1, "%v", err)
		}
		created = true
	case err != nil:
		return fail(1, "%v", err)
	case len(ents) > 0:
		return fail(2, "%s is not empty (%d entries): restore into an empty or new directory, never over a data dir", *dir, len(ents))
	}
	// undo leaves DIR as it was found: empty, or not there.
	undo := func() {
		ents, _ := os.ReadDir(*dir)
		for _, e := range ents {
			os.RemoveAll(filepath.Join(*dir, e.Name()))
		}
		if created {
			os.Remove(*dir)
		}
	}
	f, err := os.Open(*from)
	if err != nil {
		undo()
		return fail(1, "%v", err)
	}
	defer f.Close()
	var sum backupSummary
	var bytesOut int64
	err = readBackupArchive(f, func(h *tar.Header, body io.Reader) error {
		n, err := restoreFile(*dir, h.Name, body)
		bytesOut += n
		return err
	}, &sum)
	if err == nil {
		err = durable.SyncDir(*dir)
	}
	if err != nil {
		undo()
		return fail(1, "%s: %v; nothing restored", *from, err)
	}

	// fsck, as serve would open it, against this host's guard copies.
	fargs := []string{"--data-dir", *dir, "--verifier-key", sum.verifier, "--quiet", "--json"}
	if *guard != "" {
		fargs = append(fargs, "--checkpoint-guard-dir", *guard)
	}
	var fout, ferr bytes.Buffer
	code := runFsck(fargs, &fout, &ferr)
	var rep struct {
		Findings []struct {
			Check  string `json:"check"`
			Log    string `json:"log"`
			Kind   string `json:"kind"`
			Detail string `json:"detail"`
		} `json:"findings"`
		Entries uint64 `json:"entries"`
		Error   string `json:"error"`
	}
	_ = json.Unmarshal(fout.Bytes(), &rep)
	behind := 0
	for _, fd := range rep.Findings {
		if fd.Kind == "rollback" {
			behind++
		}
	}
	switch {
	case code == fsckClean:
	case code == fsckFindings && behind == len(rep.Findings) && *allowBehind:
		for _, fd := range rep.Findings {
			fmt.Fprintf(stderr, "warning: log %s: %s\n", fd.Log, fd.Detail)
		}
		fmt.Fprintf(stderr, "warning: restored although %d log(s) are behind this host's guard copies (--allow-behind-guard): serve refuses them, or serves them read-only with --rollback-read-only\n", behind)
	default:
		for _, fd := range rep.Findings {
			if fd.Log != "" {
				fmt.Fprintf(stderr, "fsck: log %s: %s: %s\n", fd.Log, fd.Kind, fd.Detail)
			} else {
				fmt.Fprintf(stderr, "fsck: %s: %s\n", fd.Kind, fd.Detail)
			}
		}
		if rep.Error != "" || code == fsckError {
			fmt.Fprintf(stderr, "fsck: %s%s\n", rep.Error, strings.TrimSpace(ferr.String()))
		}
		undo()
		if behind > 0 && behind == len(rep.Findings) {
			return fail(1, "refused: the backup is behind checkpoints this key signed later on this host (its guard copies): serving it would fork the logs; %s left empty (--allow-behind-guard restores it anyway, for an investigation)", *dir)
		}
		return fail(1, "refused: fsck of the restored data is not clean; %s left empty", *dir)
	}
	fmt.Fprintf(stdout, "restored %s into %s: %s, %d entries (fsck clean), %s of database; taken %s by auditd %s\n",
		*from, *dir, sum.logsLine(), rep.Entries, byteSize(bytesOut), sum.manifest.CreatedAt.Format("2006-01-02 15:04:05 UTC"), sum.manifest.Version)
	fmt.Fprintf(stdout, "verifier key: %s\n", sum.verifier)
	fmt.Fprintf(stdout, "next: put the signing key of that verifier key at %s (mode 0600), or give serve --key-file; the backup holds no private key\n", filepath.Join(*dir, "auditd.key"))
	return 0
}

// restoreFile writes one archive entry (a name backupName accepts) under
// dir, synced, and returns its size.
func restoreFile(dir, name string, body io.Reader) (int64, error) {
	var path string
	mode := os.FileMode(0o600)
	switch sub, base, _ := strings.Cut(name, "/"); {
	case name == "auditd.key.pub":
		path, mode = filepath.Join(dir, name), 0o644
	case sub == "checkpoints":
		if err := os.MkdirAll(filepath.Join(dir, "checkpoints"), 0o700); err != nil {
			return 0, err
		}
		path = filepath.Join(dir, "checkpoints", base)
	default: // db/<file>: the database is the data dir itself
		path = filepath.Join(dir, base)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && mode != 0o600 {
		err = os.Chmod(path, mode) // whatever the umask
	}
	return n, err
}
