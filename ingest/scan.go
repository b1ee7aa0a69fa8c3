package ingest

import (
	"bytes"
	"io"
	"sync"

	"github.com/auditd/auditd/internal/jsonscan"
)

// Read windows come from two pools: a small one for the single-event
// bodies most requests carry, a large one once a body outgrows it. A
// window grown past the large size (an event longer than it) is not
// pooled.
const (
	smallWindow = 4 << 10
	largeWindow = 64 << 10
)

var (
	smallWindows = sync.Pool{New: func() any { b := make([]byte, smallWindow); return &b }}
	largeWindows = sync.Pool{New: func() any { b := make([]byte, largeWindow); return &b }}
)

// window reads a body through a buffer it reuses, keeping the bytes from
// offset keep on (the current event) and counting the newlines of those
// it drops, so any offset at or after keep can be turned into a line.
// Offsets are from the start of the body.
type window struct {
	r    io.Reader
	pool *sync.Pool // where buf came from, nil if from none
	home *[]byte
	buf  []byte // the bytes from offset base on
	base int64
	err  error // the reader's error (io.EOF at the end), kept until the data before it is used
	keep int64 // bytes before keep may be dropped
	// line is the 1-based line of offset lineOff (lineOff >= base).
	line    int
	lineOff int64
}

// reset readies w to read r, with a small buffer.
func (w *window) reset(r io.Reader) {
	*w = window{r: r, pool: &smallWindows, line: 1}
	w.home = smallWindows.Get().(*[]byte)
	w.buf = (*w.home)[:0]
}

// release returns the buffer to its pool. Nothing the decoder returns
// points into it.
func (w *window) release() {
	if w.pool != nil {
		w.pool.Put(w.home)
	}
	w.pool, w.home, w.buf = nil, nil, nil
}

// end is the offset after the last byte read.
func (w *window) end() int64 { return w.base + int64(len(w.buf)) }

// from returns the bytes read from offset off on (off >= base).
func (w *window) from(off int64) []byte { return w.buf[off-w.base:] }

// fill reads more of the body. It reports false, with the reader's error
// (io.EOF at the end), when nothing more can be read.
func (w *window) fill() (bool, error) {
	if w.err != nil {
		return false, w.err
	}
	w.makeRoom()
	for range 100 { // a reader that keeps returning 0, nil is broken
		n, err := w.r.Read(w.buf[len(w.buf):cap(w.buf)])
		w.buf = w.buf[:len(w.buf)+n]
		if err != nil {
			w.err = err
		}
		if n > 0 {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	w.err = io.ErrNoProgress
	return false, w.err
}

// makeRoom drops the bytes before keep if less than a quarter of the
// buffer is free, and moves to a larger buffer if that is still so, or at
// once from the small one when a first read filled it: a body that
// outgrows the small window is read in large pieces.
func (w *window) makeRoom() {
	outgrown := w.pool == &smallWindows && len(w.buf) == cap(w.buf)
	if drop := w.keep - w.base; drop > 0 && (outgrown || cap(w.buf)-len(w.buf) < cap(w.buf)/4) {
		w.lineAt(w.keep) // count the newlines about to go
		n := copy(w.buf, w.buf[drop:])
		w.buf = w.buf[:n]
		w.base = w.keep
	}
	if !outgrown && cap(w.buf)-len(w.buf) >= cap(w.buf)/4 {
		return
	}
	var pool *sync.Pool
	var home *[]byte
	if cap(w.buf) < largeWindow && len(w.buf) <= largeWindow/2 {
		pool, home = &largeWindows, largeWindows.Get().(*[]byte)
	} else {
		b := make([]byte, 0, 2*cap(w.buf))
		home = &b
	}
	nb := append((*home)[:0], w.buf...)
	w.release()
	w.pool, w.home, w.buf = pool, home, nb
}

// lineAt returns the 1-based line of offset off (off >= keep, or at least
// off >= base). Lines are counted once, as the offsets asked for move on.
func (w *window) lineAt(off int64) int {
	if off >= w.lineOff {
		w.line += bytes.Count(w.buf[w.lineOff-w.base:off-w.base], nl)
		w.lineOff = off
		return w.line
	}
	return w.line - bytes.Count(w.buf[off-w.base:w.lineOff-w.base], nl)
}

var nl = []byte{'\n'}

// skipSpace returns the offset of the first byte at or after off that is
// not JSON whitespace, reading more as needed; at the end of the body (or
// on a read error) it returns the error.
func (w *window) skipSpace(off int64) (int64, error) {
	for {
		b := w.from(off)
		for i, c := range b {
			if !jsonscan.IsSpace(c) {
				return off + int64(i), nil
			}
		}
		off += int64(len(b))
		if ok, err := w.fill(); !ok {
			return off, err
		}
	}
}

// reader reads the body from offset off on, through the window (so what it
// reads stays there for the decoder to go on from), for encoding/json.
type windowReader struct {
	w   *window
	off int64
}

func (r *windowReader) Read(p []byte) (int, error) {
	if r.off == r.w.end() {
		if ok, err := r.w.fill(); !ok {
			return 0, err
		}
	}
	n := copy(p, r.w.from(r.off))
	r.off += int64(n)
	return n, nil
}
