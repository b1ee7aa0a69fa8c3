package ingest

import (
	"unicode/utf8"

	"github.com/auditd/auditd/internal/jsonscan"
)

// payloadKind reports what json.Valid(v) and utf8.Valid(v) report: whether
// v is one JSON value (with surrounding white space) and whether it is
// valid UTF-8. The two become leaf marks (merkle.MarkNotJSON,
// merkle.MarkNotUTF8), so they must agree with those functions byte for
// byte: FuzzPayloadKind checks it. The JSON check is jsonscan's, which
// takes what encoding/json takes.
func payloadKind(v []byte) (isJSON, isUTF8 bool) {
	return jsonscan.Valid(v), utf8.Valid(v)
}
