package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/buildinfo"
	"github.com/auditd/auditd/internal/durable"
	"github.com/auditd/auditd/merkle"
)

// A backup is a gzip-compressed tar archive, streamed by GET /-/backup:
//
//	manifest.json          backupManifest: the format, the verifier key, each log's checkpoint size
//	checkpoints/<log>      each log's checkpoint file, as read before the database was copied
//	auditd.key.pub         the signing key's verifier key (never the private key)
//	db/<file>              the database (Pebble's files), a consistent copy
//	END                    the last entry: an archive without it was cut short
//
// restore.go reads it back.
const backupFormat = "auditd-backup/1"

// backupManifest is a backup's manifest.json.
type backupManifest struct {
	Format      string    `json:"format"`
	CreatedAt   time.Time `json:"created_at"`
	Version     string    `json:"auditd_version"`
	VerifierKey string    `json:"verifier_key"`
	// Logs are the logs with a checkpoint file, with its size: the backup
	// holds at least these entries of each.
	Logs []backupLog `json:"logs"`
}

type backupLog struct {
	Name           string `json:"name"`
	CheckpointSize uint64 `json:"checkpoint_size"`
}

// backupMu runs one backup at a time.
var backupMu sync.Mutex

// backupEnd is the name of an archive's last entry.
const backupEnd = "END"

// writeBackup takes a consistent snapshot of the running ledger and writes
// it to w as a backup archive. The snapshot's database files live in a
// temporary directory inside the data dir (hard links, no copy, on most
// file systems) until the archive is written.
func (d *instance) writeBackup(ctx context.Context, w io.Writer) error {
	// One backup at a time; a crash during one leaves its temporary
	// directory (hard links: the space of tables compacted away since),
	// removed by the next.
	backupMu.Lock()
	defer backupMu.Unlock()
	if old, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, ".backup-*")); len(old) > 0 {
		for _, o := range old {
			os.RemoveAll(o)
		}
		d.log.Info("backup: removed what an interrupted backup left", "dirs", old)
	}
	tmp, err := os.MkdirTemp(d.cfg.DataDir, ".backup-")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	snap, err := d.store.Snapshot(filepath.Join(tmp, "db"))
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	man := backupManifest{Format: backupFormat, CreatedAt: start.UTC(), Version: buildinfo.Read().Version, VerifierKey: d.key.vkey, Logs: []backupLog{}}
	for _, name := range snap.Logs() {
		cp, err := merkle.OpenCheckpoint(snap.Checkpoints[name], d.key.verifier, "")
		if err != nil {
			return fmt.Errorf("backup: checkpoint file of log %s: %w", name, err)
		}
		man.Logs = append(man.Logs, backupLog{Name: name, CheckpointSize: cp.Size})
	}
	d.log.Info("backup: snapshot taken, sending it", "logs", len(man.Logs), "took", time.Since(start).Round(time.Millisecond))
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	add := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(b)), ModTime: start, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	mb, _ := json.MarshalIndent(man, "", "  ")
	if err := add("manifest.json", 0o644, append(mb, '\n')); err != nil {
		return err
	}
	for _, name := range snap.Logs() {
		if err := add("checkpoints/"+name, 0o600, snap.Checkpoints[name]); err != nil {
			return err
		}
	}
	if err := add("auditd.key.pub", 0o644, []byte(d.key.vkey+"\n")); err != nil {
		return err
	}
	err = filepath.WalkDir(snap.Dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(snap.Dir, path)
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: "db/" + filepath.ToSlash(rel), Mode: 0o600, Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := add(backupEnd, 0o644, nil); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

const backupUsage = `Usage: auditd backup --server URL --out FILE [--token TOKEN]

Takes a consistent backup of a running daemon's ledger, while it serves:
the database, each log's latest checkpoint file and the signing key's
verifier key (never the private key: keep it apart). Needs the write token
(--token, AUDITD_WRITE_TOKEN or --token-file). The archive (tar, gzip) is
written to FILE.partial with its progress on stderr, checked to its end,
then renamed to FILE; an interrupted or damaged transfer leaves no FILE.
Restore it with auditd restore.

Exit status: 0 written, 1 failed, 2 bad command line.

`

// runBackup is auditd backup.
func runBackup(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "http://127.0.0.1:8080", "the auditd server: a URL, or host:port for http://host:port")
	out := fs.String("out", "", "the backup file to write (required; must not exist)")
	token := fs.String("token", os.Getenv("AUDITD_WRITE_TOKEN"), "the server's write token (default AUDITD_WRITE_TOKEN)")
	tokenFile := fs.String("token-file", "", "file holding the write token")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	var tlsf clientTLSFlags
	bindClientTLSFlags(fs, &tlsf) // tls.go
	fs.Usage = func() {
		fmt.Fprint(stderr, backupUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "auditd backup: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q", fs.Arg(0))
	}
	if *out == "" {
		return fail(2, "--out FILE is required")
	}
	if _, err := os.Lstat(*out); err == nil {
		return fail(2, "%s exists: give a new file name", *out)
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fail(2, "token file: %v", err)
		}
		*token = strings.TrimSpace(string(b))
	}
	base, err := serverURL(*server, tlsf) // serverurl.go
	if err != nil {
		return fail(2, "%v", err)
	}
	hc, err := tlsf.httpClient()
	if err != nil {
		return fail(2, "%v", err)
	}
	ctx, stop := signalContext()
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/backup", nil)
	if err != nil {
		return fail(2, "%v", err)
	}
	if *token != "" {
		req.Header.Set("Authorization", "Bearer "+*token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fail(1, "%v", explainTLS(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return fail(1, "%s: the server wants its write token: --token, --token-file or AUDITD_WRITE_TOKEN", resp.Status)
	case resp.StatusCode == http.StatusNotFound:
		return fail(1, "%s: this server does not serve backups (an auditd older than this command?)", resp.Status)
	case resp.StatusCode != http.StatusOK:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fail(1, "%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	partial := *out + ".partial"
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer os.Remove(partial) // gone once renamed
	var n atomic.Int64
	done := make(chan struct{})
	if !*quiet {
		go backupProgress(stderr, &n, done)
	}
	// The archive is read as it is written: it is complete only if it
	// parses to its END entry.
	bw := bufio.NewWriterSize(f, 1<<20)
	sum, err := checkBackupArchive(io.TeeReader(resp.Body, countWriter{bw, &n}))
	close(done)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(1, "the backup is incomplete (%v); %s not written", err, *out)
	}
	if err := os.Rename(partial, *out); err != nil {
		return fail(1, "%v", err)
	}
	_ = durable.SyncDir(filepath.Dir(*out))
	fmt.Fprintf(stdout, "wrote %s: %s, %s, signed by %s\n", *out, byteSize(n.Load()), sum.logsLine(), sum.verifier)
	return 0
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// countWriter counts what it writes.
type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// backupProgress prints the bytes received, each second, until done.
func backupProgress(w io.Writer, n *atomic.Int64, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			fmt.Fprintf(w, "backup: %s received (%s)\n", byteSize(n.Load()), time.Since(start).Round(time.Second))
		}
	}
}

// byteSize is n bytes for people.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// backupSummary is what a complete archive holds.
type backupSummary struct {
	manifest backupManifest
	verifier string
	files    int
}

func (s backupSummary) logsLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d log", len(s.manifest.Logs))
	if len(s.manifest.Logs) != 1 {
		b.WriteString("s")
	}
	for i, l := range s.manifest.Logs {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s at %d", l.Name, l.CheckpointSize)
		if i == len(s.manifest.Logs)-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}

// checkBackupArchive reads a backup archive to its end, checking its
// structure (manifest first, known entries only, END last) and its gzip
// checksum.
func checkBackupArchive(r io.Reader) (backupSummary, error) {
	var sum backupSummary
	err := readBackupArchive(r, func(h *tar.Header, body io.Reader) error {
		sum.files++
		return nil
	}, &sum)
	return sum, err
}

// readBackupArchive reads a backup archive, giving each entry after the
// manifest to fn (its name checked: no absolute path, no "..", only the
// known directories). It fails on an archive that is not complete.
func readBackupArchive(r io.Reader, fn func(h *tar.Header, body io.Reader) error, sum *backupSummary) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("not a backup archive (gzip: %v)", err)
	}
	tr := tar.NewReader(gz)
	first, ended := true, false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		if ended {
			return fmt.Errorf("archive: entry %q after its end", h.Name)
		}
		if first {
			first = false
			if h.Name != "manifest.json" {
				return fmt.Errorf("not a backup archive: it begins with %q, not manifest.json", h.Name)
			}
			b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				return fmt.Errorf("archive: %w", err)
			}
			if err := json.Unmarshal(b, &sum.manifest); err != nil {
				return fmt.Errorf("archive: manifest.json: %w", err)
			}
			if sum.manifest.Format != backupFormat {
				return fmt.Errorf("archive: format %q, this auditd reads %q", sum.manifest.Format, backupFormat)
			}
			if _, err := note.NewVerifier(sum.manifest.VerifierKey); err != nil {
				return fmt.Errorf("archive: manifest.json: verifier key: %w", err)
			}
			sum.verifier = sum.manifest.VerifierKey
			continue
		}
		if h.Name == backupEnd {
			ended = true
			continue
		}
		if h.Typeflag != tar.TypeReg || !backupName(h.Name) {
			return fmt.Errorf("archive: unexpected entry %q", h.Name)
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
	if !ended {
		return errors.New("archive: cut short (no END entry)")
	}
	// The gzip trailer (its CRC and length) is checked at its EOF.
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return nil
}

// backupName says whether name is one a backup holds: auditd.key.pub,
// checkpoints/<log> or db/<file>, nothing that leaves the directory.
func backupName(name string) bool {
	if name == "auditd.key.pub" {
		return true
	}
	dir, base, ok := strings.Cut(name, "/")
	if !ok || base == "" || strings.Contains(base, "/") || base == "." || base == ".." || strings.ContainsAny(base, "\\\x00") {
		return false
	}
	return dir == "checkpoints" || dir == "db"
}
