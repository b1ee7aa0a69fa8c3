package store

// Column is one column of a store whose rows have typed columns
// (PostgreSQL), as the store describes its result.
type Column struct {
	// Name is the column's name in the result.
	Name string `json:"name"`
	// Type is the store's name of the column's type: "text", "numeric",
	// "int8", "timestamptz", "_int4" (an array), a user-defined type's
	// name.
	Type string `json:"type"`
	// Kind is what values the column's rows give.
	Kind ColumnKind `json:"kind"`
	// Key marks the key column.
	Key bool `json:"key,omitempty"`
}

// ColumnKind says what values a column's rows give, for a comparison to
// know, before reading a row, which expected values the column can equal.
type ColumnKind string

const (
	// ColumnAny may give any value (json, jsonb, a type the store does not
	// know).
	ColumnAny ColumnKind = "any"
	// ColumnNumber gives numbers (smallint, integer, bigint, numeric,
	// real, double precision, oid).
	ColumnNumber ColumnKind = "number"
	// ColumnText gives free text (text, varchar, char, name).
	ColumnText ColumnKind = "text"
	// ColumnString gives strings of a fixed form other than an instant
	// (date, time, interval, uuid, inet, ...).
	ColumnString ColumnKind = "string"
	// ColumnBool gives true or false.
	ColumnBool ColumnKind = "bool"
	// ColumnTime gives instants as time.Time (timestamptz, timestamp).
	ColumnTime ColumnKind = "time"
	// ColumnBytes gives bytes as their standard base64 (bytea).
	ColumnBytes ColumnKind = "bytes"
	// ColumnList gives lists (arrays).
	ColumnList ColumnKind = "list"
)
