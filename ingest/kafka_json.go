package ingest

import (
	"encoding/json"
	"unicode/utf8"
)

// maxJSONDepth is encoding/json's nesting limit: json.Valid rejects a value
// nested deeper.
const maxJSONDepth = 10000

// payloadKind reports what json.Valid(v) and utf8.Valid(v) report: whether
// v is one JSON value (with surrounding white space) and whether it is
// valid UTF-8. The two become leaf marks (merkle.MarkNotJSON,
// merkle.MarkNotUTF8), so they must agree with those functions byte for
// byte: FuzzPayloadKind checks it. The JSON check is the body decoder's
// scanValue, which takes only what encoding/json takes; what it bails on
// (a mistake, deep nesting, a cut-off value) json.Valid settles.
func payloadKind(v []byte) (isJSON, isUTF8 bool) {
	isUTF8 = utf8.Valid(v)
	i, st := skipSpace(v, 0, false, nil)
	if st == fastOK {
		var n int
		if n, st = scanValue(v[i:], false, nil); st == fastOK && allSpace(v[i+n:]) {
			return true, isUTF8
		}
	}
	return json.Valid(v), isUTF8
}

// allSpace reports whether b holds only JSON white space.
func allSpace(b []byte) bool {
	for _, c := range b {
		if !isSpace(c) {
			return false
		}
	}
	return true
}
