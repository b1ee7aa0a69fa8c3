package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/auditd/auditd/ledger"
)

// wireEvent is an Event as a body carries it. Its id and key keep the
// JSON text's own bytes: encoding/json rewrites invalid UTF-8 and lone
// surrogate escapes to U+FFFD, which would make different ids collide.
type wireEvent struct {
	ID            *idText         `json:"id"`
	Key           *keyText        `json:"key"`
	KeyBase64     *string         `json:"key_base64"`
	Time          *string         `json:"time"`
	Payload       json.RawMessage `json:"payload"`
	PayloadBase64 *string         `json:"payload_base64"`
}

// entry checks what only the wire form shows (an id given as "") and
// converts the event.
func (w *wireEvent) entry(lim Limits) (ledger.Entry, error) {
	ev := Event{KeyBase64: w.KeyBase64, Time: w.Time, Payload: w.Payload, PayloadBase64: w.PayloadBase64}
	if w.ID != nil {
		if w.ID.s == "" {
			return ledger.Entry{}, errors.New(`id is "": an id is 1 to 1024 bytes; leave it out to have one assigned`)
		}
		ev.ID = w.ID.s
	}
	if w.Key != nil {
		ev.Key = &w.Key.s
	}
	return ev.Entry(lim)
}

type idText struct{ s string }

type keyText struct{ s string }

// fieldError is a bad id or key value; the decoder locates the field.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }

func (t *idText) UnmarshalJSON(b []byte) error {
	s, err := strictString(b)
	if err != nil {
		return &fieldError{"id", err}
	}
	t.s = s
	return nil
}

func (t *keyText) UnmarshalJSON(b []byte) error {
	s, err := strictString(b)
	if err != nil {
		if b[0] == '"' {
			err = fmt.Errorf("%w (send bytes as key_base64)", err)
		}
		return &fieldError{"key", err}
	}
	t.s = s
	return nil
}

// fieldOffset returns the offset in obj (one JSON object, after space or
// a comma) of its top-level field name, or 0.
func fieldOffset(obj []byte, name string) int64 {
	lead := leadingSpace(obj) // the comma and space before an array element
	obj = obj[lead:]
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0
	}
	for dec.More() {
		before := dec.InputOffset()
		t, err := dec.Token()
		if err != nil {
			return 0
		}
		if t == name {
			return int64(lead) + before + int64(leadingSpace(obj[before:]))
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return 0
		}
	}
	return 0
}

func leadingSpace(b []byte) int {
	n := 0
	for n < len(b) && (b[n] == ' ' || b[n] == '\t' || b[n] == '\r' || b[n] == '\n' || b[n] == ',') {
		n++
	}
	return n
}

// strictString decodes a JSON string, refusing one encoding/json would
// change: invalid UTF-8 bytes, or a \u escape of a lone surrogate.
func strictString(b []byte) (string, error) {
	if len(b) < 2 || b[0] != '"' {
		var s string
		err := json.Unmarshal(b, &s) // the usual "cannot unmarshal number ..."
		if err == nil {
			err = errors.New("not a JSON string")
		}
		return "", err
	}
	if !utf8.Valid(b) {
		return "", errors.New("not valid UTF-8")
	}
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b[1 : len(b)-1]), nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "", err
	}
	// Every U+FFFD in the result must come from the text: a literal one or
	// a \ufffd escape. Any other is a replaced lone surrogate.
	if n := strings.Count(s, "\uFFFD"); n > 0 && n != bytes.Count(b, []byte("\uFFFD"))+countFFFDEscapes(b) {
		return "", errors.New("holds a lone UTF-16 surrogate escape (not valid Unicode)")
	}
	return s, nil
}

// countFFFDEscapes counts the \ufffd escapes (any case) of a JSON string.
func countFFFDEscapes(b []byte) int {
	n := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) && strings.EqualFold(string(b[i+2:i+6]), "fffd") {
			n++
			i += 5
			continue
		}
		i++ // skip the escaped character (\\ included)
	}
	return n
}
