// Package durable writes small files so that a crash leaves either the old
// content or the new, never a mix, and the new content is on disk when the
// write returns.
package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tempPrefix starts the name of every temporary file WriteFile makes. A
// leading dot keeps temporary files apart from the files they replace in
// directories whose file names start with a letter or digit.
const tempPrefix = ".tmp-"

// WriteFile replaces the file at path with data atomically and durably: it
// writes a temporary file in the same directory, syncs it, renames it over
// path and syncs the directory. After a crash, path holds either its old
// content or data; a temporary file may be left behind (see RemoveTemp). On
// error the temporary file is removed and path is unchanged, unless the
// error came from syncing the directory after the rename.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, tempPrefix+base+"-*")
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("durable: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("durable: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("durable: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	ok = true
	if err := SyncDir(dir); err != nil {
		return err
	}
	return nil
}

// SyncDir syncs a directory, making the creation, renaming and removal of
// its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("durable: sync directory %s: %w", dir, err)
	}
	return nil
}

// MkdirAll creates dir and any missing parents, as os.MkdirAll does, and
// syncs the parent of each directory it created, so the new directories
// survive a crash.
func MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("durable: %s is not a directory", dir)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("durable: %w", err)
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("durable: %w", err)
	}
	return SyncDir(parent)
}

// IsTemp reports whether name (a base name) is a temporary file of
// WriteFile's.
func IsTemp(name string) bool { return strings.HasPrefix(name, tempPrefix) }

// RemoveTemp removes the temporary files a crash during WriteFile left in
// dir and returns their names. Call it only when no WriteFile into dir is
// running.
func RemoveTemp(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("durable: %w", err)
	}
	var removed []string
	for _, e := range ents {
		if !IsTemp(e.Name()) || e.IsDir() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("durable: %w", err)
		}
		removed = append(removed, e.Name())
	}
	if len(removed) > 0 {
		if err := SyncDir(dir); err != nil {
			return removed, err
		}
	}
	return removed, nil
}
