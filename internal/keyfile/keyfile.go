// Package keyfile reads the small files auditd's keys and tokens live in:
// a regular file of at most MaxSize bytes, so that a path such as
// /dev/zero, a FIFO or a log file given by mistake is refused at once
// instead of being read without bound or waited on forever; and, for a
// private key, a file only its owner can read or change.
package keyfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxSize is the largest key or token file Read accepts. A signed-note key
// is about 100 bytes.
const MaxSize = 64 << 10

// Read returns the contents of the file at path, which must be a regular
// file (a symbolic link to one is followed) of at most MaxSize bytes, and
// its permission bits. what names the file in errors ("key file", "write
// token file"), which name path too.
//
// The file is opened without blocking, so that a FIFO is refused rather
// than waited on, and checked after it is opened, so that what is read is
// what was checked.
func Read(what, path string) ([]byte, fs.FileMode, error) {
	return ReadLimit(what, path, MaxSize)
}

// ReadLimit is Read with a bound of its own, for files that may be larger
// than a key, such as a PEM bundle of CA certificates.
func ReadLimit(what, path string, limit int64) ([]byte, fs.FileMode, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s %s is not a regular file (%s)", what, path, kind(fi.Mode()))
	}
	if fi.Size() > limit {
		return nil, 0, tooLarge(what, path, limit)
	}
	// A file may grow after Stat, and some (in /proc) report size 0.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if int64(len(b)) > limit {
		return nil, 0, tooLarge(what, path, limit)
	}
	return b, fi.Mode().Perm(), nil
}

func tooLarge(what, path string, limit int64) error {
	return fmt.Errorf("%s %s is larger than %d KiB", what, path, limit>>10)
}

// kind names a mode's file type for an error.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}

// ErrInsecure is the error CheckPrivate's errors wrap.
var ErrInsecure = errors.New("group or others can read or change it")

// CheckPrivate refuses the permission bits perm (from Read) of a private
// key file that group or others can read or write, with an error naming
// the file, its mode and the chmod that fixes it, as ssh does: whoever
// reads the key can sign as its owner. The error wraps ErrInsecure.
func CheckPrivate(what, path string, perm fs.FileMode) error {
	if perm&0o077 == 0 {
		return nil
	}
	return fmt.Errorf("%s %s has mode %04o: %w; run chmod 600 %s", what, path, perm.Perm(), ErrInsecure, path)
}
