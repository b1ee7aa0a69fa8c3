package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/auditd/auditd/internal/redact"
	"github.com/auditd/auditd/internal/redirect"
)

// httpStore reads rows from an HTTP GET: a JSON array of objects, decoded
// one element at a time, or NDJSON, one object per line. Each object holds
// its key in KeyField (default "key"); its value follows the rule on Row.
//
// Without a configured format the response's Content-Type decides
// (application/x-ndjson, application/ndjson, application/jsonl: NDJSON;
// application/json: an array), failing that its first byte ('[': an
// array).
//
// Errors name the URL as configured, before ${VAR} expansion and without
// its password (redact.URL), so a secret in the URL stays out of logs,
// reports and alerts.
type httpStore struct {
	client   *http.Client
	url      string
	name     string
	format   string
	keyField string
	headers  map[string]string
	wmURL    string
	wmName   string
}

var _ Store = (*httpStore)(nil)

func openHTTP(c HTTPConfig) (*httpStore, error) {
	name := "http " + redact.URL(c.URL)
	switch c.Format {
	case "", "json", "ndjson":
	default:
		return nil, fmt.Errorf("%w: %s: unknown format %q (want json or ndjson)", ErrStore, name, c.Format)
	}
	if c.URL == "" {
		return nil, fmt.Errorf("%w: http: no url", ErrStore)
	}
	timeout := time.Duration(c.Timeout)
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	key := c.KeyField
	if key == "" {
		key = "key"
	}
	headers := make(map[string]string, len(c.Headers))
	for k, v := range c.Headers {
		hv, err := expandEnvSet("http header "+k, v)
		if err != nil {
			return nil, err
		}
		headers[k] = hv
	}
	url, err := expandEnvSet("http url", c.URL)
	if err != nil {
		return nil, err
	}
	wmURL, err := expandEnvSet("http watermark_url", c.WatermarkURL)
	if err != nil {
		return nil, err
	}
	return &httpStore{
		// A transport of its own, so Close drops only this store's
		// idle connections.
		client: &http.Client{Timeout: timeout, Transport: http.DefaultTransport.(*http.Transport).Clone(),
			CheckRedirect: redirect.SameOrigin}, // the headers go to the configured origin only
		url:      url,
		name:     name,
		format:   c.Format,
		keyField: key,
		headers:  headers,
		wmURL:    wmURL,
		wmName:   "http " + redact.URL(c.WatermarkURL),
	}, nil
}

func (s *httpStore) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// get sends a GET and returns the response of a 2xx status.
func (s *httpStore) get(ctx context.Context, target, name, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		// url.Parse's error quotes the expanded URL.
		return nil, storeError(ctx, name, redact.Error(err, target))
	}
	req.Header.Set("Accept", accept)
	for k, v := range s.headers {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// A *url.Error quotes the expanded URL: keep only its cause.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, storeError(ctx, name, fmt.Errorf("GET: %w", err))
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		msg := strings.TrimSpace(string(snippet))
		if msg != "" {
			msg = ": " + msg
		}
		return nil, storeError(ctx, name, fmt.Errorf("GET: status %s%s", resp.Status, msg))
	}
	return resp, nil
}

// Check sends the GET and reads the response's first row: a status other
// than 2xx, a body that is neither a JSON array nor NDJSON, or a first
// object without the key field is an error. The rest of the body is not
// read: the connection is dropped.
func (s *httpStore) Check(ctx context.Context) error {
	err := s.Scan(ctx, func(Row) error { return errFirstRow })
	if err == errFirstRow {
		return nil
	}
	return err
}

func (s *httpStore) Scan(ctx context.Context, fn func(Row) error) error {
	resp, err := s.get(ctx, s.url, s.name, "application/json, application/x-ndjson")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	format := s.format
	if format == "" {
		format = contentFormat(resp.Header.Get("Content-Type"), br)
	}
	if format == "ndjson" {
		return scanJSONL(ctx, br, s.name, s.keyField, fn)
	}
	return scanJSONArray(ctx, br, s.name, s.keyField, fn)
}

// contentFormat picks "json" or "ndjson" from a Content-Type, else from the
// first byte that is not white space.
func contentFormat(contentType string, br *bufio.Reader) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines", "application/jsonlines":
		return "ndjson"
	case "application/json":
		return "json"
	}
	for i := 1; ; i++ {
		b, err := br.Peek(i)
		if err != nil || len(b) < i {
			return "ndjson" // empty: no rows either way
		}
		switch b[i-1] {
		case ' ', '\t', '\r', '\n':
			continue
		case '[':
			return "json"
		}
		return "ndjson"
	}
}

// scanJSONArray reads a JSON array of objects from r, one element at a
// time, and calls fn with each as a row.
func scanJSONArray(ctx context.Context, r io.Reader, store, keyField string, fn func(Row) error) error {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return storeError(ctx, store, fmt.Errorf("malformed JSON: %w", err))
	}
	if tok != json.Delim('[') {
		return storeError(ctx, store, fmt.Errorf("malformed JSON: want an array, found %v", tok))
	}
	for i := 0; dec.More(); i++ {
		if i&1023 == 1023 && ctx.Err() != nil {
			return ctx.Err()
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return storeError(ctx, store, fmt.Errorf("element %d: malformed JSON: %w", i, err))
		}
		row, err := objectRow(v, keyField)
		if err != nil {
			return storeError(ctx, store, fmt.Errorf("element %d: %w", i, err))
		}
		if err := fn(row); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return storeError(ctx, store, fmt.Errorf("malformed JSON at the end of the array: %w", err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return storeError(ctx, store, errors.New("malformed JSON: data after the array"))
	}
	return nil
}

func (s *httpStore) Watermarks(ctx context.Context) (map[string]uint64, bool, error) {
	if s.wmURL == "" {
		return nil, false, nil
	}
	resp, err := s.get(ctx, s.wmURL, s.wmName, "application/json")
	if err != nil {
		return nil, true, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, true, storeError(ctx, s.wmName, err)
	}
	marks, err := parseMarks(b)
	if err != nil {
		return nil, true, storeError(ctx, s.wmName, fmt.Errorf("watermarks: %w", err))
	}
	return marks, true, nil
}
