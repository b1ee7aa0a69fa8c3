package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// fileStore reads a JSONL or CSV file, streaming.
//
// JSONL: one JSON object per line (blank lines are skipped), its key in
// KeyField (a string, or a number whose text is the key), its value by the
// rule on Row, numbers as json.Number.
//
// CSV: a header row naming the columns, then one row per key. Every cell,
// the empty one included, is Text, untyped: "10115" is a string or a
// number by the expected value's type. There is no null.
type fileStore struct {
	path     string
	name     string
	csv      bool
	keyField string
	wmPath   string
}

var _ Store = (*fileStore)(nil)

func openFile(c FileConfig) (*fileStore, error) {
	name := "file " + c.Path
	format := c.Format
	if format == "" {
		switch strings.ToLower(filepath.Ext(c.Path)) {
		case ".jsonl", ".ndjson":
			format = "jsonl"
		case ".csv":
			format = "csv"
		default:
			return nil, fmt.Errorf("%w: %s: no format set and none known for the extension", ErrStore, name)
		}
	}
	if format != "jsonl" && format != "csv" {
		return nil, fmt.Errorf("%w: %s: unknown format %q (want jsonl or csv)", ErrStore, name, format)
	}
	key := c.KeyField
	if key == "" {
		key = "key"
	}
	return &fileStore{path: c.Path, name: name, csv: format == "csv", keyField: key, wmPath: c.WatermarkPath}, nil
}

func (s *fileStore) Close() error { return nil }

func (s *fileStore) Scan(ctx context.Context, fn func(Row) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.Open(s.path)
	if err != nil {
		var perr *fs.PathError
		if errors.As(err, &perr) {
			err = fmt.Errorf("%s: %w", perr.Op, perr.Err) // the name says the path
		}
		return storeError(ctx, s.name, err)
	}
	defer f.Close()
	if s.csv {
		return scanCSV(ctx, f, s.name, s.keyField, fn)
	}
	return scanJSONL(ctx, f, s.name, s.keyField, fn)
}

// Check opens the file and reads its first row: a CSV header must name
// the key column, a JSONL line must be an object with the key field. An
// empty JSONL file passes: it holds no rows.
func (s *fileStore) Check(ctx context.Context) error {
	err := s.Scan(ctx, func(Row) error { return errFirstRow })
	if err == errFirstRow {
		return nil
	}
	return err
}

// errFirstRow stops a Check's scan at the first row.
var errFirstRow = errors.New("first row read")

func (s *fileStore) Watermarks(ctx context.Context) (map[string]uint64, bool, error) {
	if s.wmPath == "" {
		return nil, false, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, true, err
	}
	b, err := os.ReadFile(s.wmPath)
	if err != nil {
		return nil, true, storeError(ctx, s.name, fmt.Errorf("watermarks: %w", err))
	}
	marks, err := parseMarks(b)
	if err != nil {
		return nil, true, storeError(ctx, s.name, fmt.Errorf("watermarks %s: %w", s.wmPath, err))
	}
	return marks, true, nil
}

// scanJSONL reads JSON objects, one per line, from r and calls fn with
// each as a row. Errors name the store and the line.
func scanJSONL(ctx context.Context, r io.Reader, store, keyField string, fn func(Row) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // a line longer than br's buffer
	for line := 1; ; line++ {
		if line&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long[:0], b...)
			for err == bufio.ErrBufferFull {
				b, err = br.ReadSlice('\n')
				long = append(long, b...)
			}
			b = long
		}
		if err != nil && err != io.EOF {
			return storeError(ctx, store, fmt.Errorf("line %d: %w", line, err))
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			row, perr := jsonRow(t, keyField)
			if perr != nil {
				return storeError(ctx, store, fmt.Errorf("line %d: %w", line, perr))
			}
			if ferr := fn(row); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// jsonRow turns one JSON object into a row keyed by its keyField.
func jsonRow(b []byte, keyField string) (Row, error) {
	v, err := DecodeJSON(b)
	if err != nil {
		return Row{}, fmt.Errorf("malformed JSON: %w", err)
	}
	return objectRow(v, keyField)
}

// objectRow turns a decoded JSON object into a row keyed by its keyField.
func objectRow(v any, keyField string) (Row, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Row{}, errors.New("not a JSON object")
	}
	kv, ok := m[keyField]
	if !ok {
		return Row{}, fmt.Errorf("no key field %q", keyField)
	}
	key, ok := keyText(kv)
	if !ok {
		return Row{}, fmt.Errorf("key field %q is not a string or a number", keyField)
	}
	return Row{Key: key, Value: objectValue(m, keyField)}, nil
}

// scanCSV reads a CSV file with a header row from r and calls fn with each
// row. Errors name the store and the line.
func scanCSV(ctx context.Context, r io.Reader, store, keyField string, fn func(Row) error) error {
	cr := csv.NewReader(bufio.NewReaderSize(r, 64<<10))
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return storeError(ctx, store, errors.New("no header row"))
	}
	if err != nil {
		return storeError(ctx, store, err)
	}
	header = append([]string(nil), header...)
	header[0] = strings.TrimPrefix(header[0], "\uFEFF") // a byte order mark
	keyIdx := -1
	for i, h := range header {
		if h == keyField {
			keyIdx = i
		}
		for _, prev := range header[:i] {
			if prev == h {
				return storeError(ctx, store, fmt.Errorf("line 1: column %q appears twice", h))
			}
		}
	}
	if keyIdx < 0 {
		return storeError(ctx, store, fmt.Errorf("line 1: no key column %q", keyField))
	}
	for n := 1; ; n++ {
		if n&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			// A *csv.ParseError names the line.
			return storeError(ctx, store, err)
		}
		m := make(map[string]any, len(rec)-1)
		for i, cell := range rec {
			if i != keyIdx {
				m[header[i]] = Text(cell)
			}
		}
		if err := fn(Row{Key: rec[keyIdx], Value: fieldsValue(m)}); err != nil {
			return err
		}
	}
}
