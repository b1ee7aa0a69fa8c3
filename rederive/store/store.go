// Package store reads derived stores (PostgreSQL, Redis, JSONL or CSV
// files, HTTP services) as a stream of Rows, with the watermarks a store
// reports. Open picks the adapter a Config names; every adapter keeps the
// Store contract, which package storetest checks.
package store

import (
	"context"
	"errors"
)

// Row is one key of a derived store and its value.
//
// Value is a JSON-like Go value: nil, bool, string, json.Number (every
// number, in its exact decimal text, so decimal columns compare exactly),
// []any or map[string]any; and two more types where a store says more, or
// less, than JSON does:
//
//   - Text: a value held as untyped text (a CSV cell, a Redis string or
//     hash field), whose type only the expected value can tell: "10115"
//     is a string for a string state and a number for a numeric one;
//   - time.Time: a PostgreSQL timestamptz or timestamp (the latter read
//     as UTC), an instant, compared with an expected timestamp as one.
//
// Every store that reads a row as named fields (a PostgreSQL row, a JSONL,
// CSV or HTTP object, a Redis hash) turns it into a value by one rule: the
// fields other than the key field form a map[string]any, except that when
// exactly one field remains, the value is that field's value. So a table
// (key, balance), a Redis hash {balance} and a JSONL line {"key", "balance"}
// all give the balance itself, and a derivation exports the same value for
// each. A row with no field but its key gives an empty map. Redis "json" and
// "string" values are values already and are used as they are.
type Row struct {
	Key   string
	Value any
}

// Text is a value a store holds as text without a type: a CSV cell, a
// Redis "string" value or hash field. It is kept as written, and the
// comparison reads it by the type of the expected value (see package
// compare): as text for a string, as a number for a number, as true or
// false for a bool, as an RFC 3339 instant for a timestamp. It encodes to
// JSON as a string.
type Text string

// Store is a derived store auditd checks: PostgreSQL, Redis, a file, an HTTP
// service.
type Store interface {
	// Scan calls fn for every row of the store, in any order, streaming:
	// it never holds the whole store in memory. An error from fn stops the
	// scan and is returned. Any other error (unreachable, malformed rows)
	// wraps ErrStore.
	Scan(ctx context.Context, fn func(Row) error) error
	// Check makes sure the store can be read, cheaply, without reading
	// its rows: it connects (and authenticates) and checks what it can of
	// the rows' shape. PostgreSQL describes the query without running it
	// (the table exists, the key column is in the result); Redis answers
	// PING and the first key SCAN meets reads as the configured type; a
	// file exists, and a CSV header, or the first JSONL line, has the key;
	// an HTTP GET answers 2xx and its first row has the key (the rest of
	// the response is not read). An error wraps ErrStore, as Scan's would;
	// a done ctx's is returned as is. A nil error does not promise that a
	// Scan succeeds: a row further on may still be malformed.
	Check(ctx context.Context) error
	// Watermarks returns, for each source log the store reports on, the
	// ledger tree size it has applied: entries [0, size). ok is false when
	// the store is not configured to report watermarks.
	Watermarks(ctx context.Context) (marks map[string]uint64, ok bool, err error)
	// Close releases the store's connections.
	Close() error
}

// ErrStore marks an error of the derived store itself (down, refused,
// malformed rows): a run that meets it ends in state error, never drift.
var ErrStore = errors.New("rederive: derived store")

// Config says where a derivation's derived store is and how to read
// it. Exactly one of Postgres, Redis, File and HTTP is set.
type Config struct {
	Postgres *PostgresConfig `yaml:"postgres,omitempty" json:"postgres,omitempty"`
	Redis    *RedisConfig    `yaml:"redis,omitempty" json:"redis,omitempty"`
	File     *FileConfig     `yaml:"file,omitempty" json:"file,omitempty"`
	HTTP     *HTTPConfig     `yaml:"http,omitempty" json:"http,omitempty"`
}

// PostgresConfig reads rows from PostgreSQL.
type PostgresConfig struct {
	// DSN is a libpq connection string or URL. ${VAR} is expanded from the
	// environment.
	DSN string `yaml:"dsn" json:"-"`
	// Query returns the rows: the key column and the value columns. Either
	// Query or Table is set.
	Query string `yaml:"query,omitempty" json:"query,omitempty"`
	// Table is read whole (SELECT * FROM table); "schema.table" names a
	// table in another schema.
	Table string `yaml:"table,omitempty" json:"table,omitempty"`
	// KeyColumn names the key column (default: the first column).
	KeyColumn string `yaml:"key_column,omitempty" json:"key_column,omitempty"`
	// WatermarkQuery, if set, returns rows (log text, size bigint): the
	// ledger size of each source log the store has applied.
	WatermarkQuery string `yaml:"watermark_query,omitempty" json:"watermark_query,omitempty"`
}

// RedisConfig reads keys from Redis.
type RedisConfig struct {
	// Addr is host:port (default 127.0.0.1:6379). ${VAR} in Addr,
	// Username and Password is expanded from the environment.
	Addr     string `yaml:"addr,omitempty" json:"addr,omitempty"`
	DB       int    `yaml:"db,omitempty" json:"db,omitempty"`
	Username string `yaml:"username,omitempty" json:"-"`
	Password string `yaml:"password,omitempty" json:"-"`
	// Pattern is the SCAN MATCH pattern, e.g. "balance:*" (default:
	// Prefix followed by *). The derived key is the Redis key with Prefix
	// removed.
	Pattern string `yaml:"pattern" json:"pattern"`
	Prefix  string `yaml:"prefix,omitempty" json:"prefix,omitempty"`
	// Type is how each key holds its value: "hash" (fields are the
	// value's fields, by the rule on Row), "json" (a string holding a
	// JSON value) or "string" (a plain string or number). Default "json".
	// Text that is a JSON number exactly becomes a json.Number.
	Type string `yaml:"type,omitempty" json:"type,omitempty"`
	// WatermarkKey, if set, names a Redis hash of log -> applied size. A
	// missing hash reports no log.
	WatermarkKey string `yaml:"watermark_key,omitempty" json:"watermark_key,omitempty"`
}

// FileConfig reads a JSONL or CSV file.
type FileConfig struct {
	Path string `yaml:"path" json:"path"`
	// Format is "jsonl" or "csv" (default from the file extension:
	// .jsonl, .ndjson or .csv).
	Format string `yaml:"format,omitempty" json:"format,omitempty"`
	// KeyField names the key field or CSV column (default "key").
	KeyField string `yaml:"key_field,omitempty" json:"key_field,omitempty"`
	// WatermarkPath, if set, is a JSON file {"log": size, ...}.
	WatermarkPath string `yaml:"watermark_path,omitempty" json:"watermark_path,omitempty"`
}

// HTTPConfig reads a JSON array or NDJSON from a URL.
type HTTPConfig struct {
	// URL is read with GET. ${VAR} is expanded from the environment.
	URL string `yaml:"url" json:"url"`
	// Format is "json" (an array of objects) or "ndjson" (default: from
	// the Content-Type).
	Format string `yaml:"format,omitempty" json:"format,omitempty"`
	// KeyField names each object's key field (default "key").
	KeyField string `yaml:"key_field,omitempty" json:"key_field,omitempty"`
	// Headers are sent with each request. ${VAR} in a value is expanded
	// from the environment.
	Headers map[string]string `yaml:"headers,omitempty" json:"-"`
	// WatermarkURL, if set, returns a JSON object {"log": size, ...}.
	WatermarkURL string `yaml:"watermark_url,omitempty" json:"watermark_url,omitempty"`
	// Timeout bounds each request (default 30s).
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// Kind names the configured store: postgres, redis, file or http ("" if
// none is set).
func (c Config) Kind() string {
	switch {
	case c.Postgres != nil:
		return "postgres"
	case c.Redis != nil:
		return "redis"
	case c.File != nil:
		return "file"
	case c.HTTP != nil:
		return "http"
	}
	return ""
}
