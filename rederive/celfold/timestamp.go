package celfold

import (
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// A timestamp is an instant (docs/derivations.md, "Timestamps"): every
// timestamp a derivation sees is held in UTC, whatever offset its text
// had, so string(ts), format("%s") and the exported state all render it
// in UTC, as getHours() and the other accessors without a time zone read
// it. timestampLibrary redefines the two standard conversions that would
// keep an offset.
func timestampLibrary() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function(overloads.TypeConvertTimestamp,
			cel.Overload(overloads.StringToTimestamp, []*cel.Type{cel.StringType}, cel.TimestampType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					t := v.ConvertToType(types.TimestampType)
					if ts, ok := t.(types.Timestamp); ok {
						return types.Timestamp{Time: ts.Time.UTC()}
					}
					return t
				}))),
		cel.Function(overloads.TypeConvertString,
			cel.Overload(overloads.TimestampToString, []*cel.Type{cel.TimestampType}, cel.StringType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					ts, ok := v.(types.Timestamp)
					if !ok {
						return types.MaybeNoSuchOverloadErr(v)
					}
					return types.String(formatTimestamp(ts.Time))
				}))),
	}
}

// formatTimestamp renders an instant in UTC, RFC 3339 with the fraction
// of a second it has, trailing zeros trimmed: "2026-01-01T09:30:00Z",
// "2026-01-01T09:30:00.5Z".
func formatTimestamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
