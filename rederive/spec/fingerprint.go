package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Fingerprint identifies a spec's derivation logic: a changed source,
// filter, key, initial, step, all_keys or step_all forces a full fold.
// Value is not part of it (it maps states, folded the same, to the values
// compared), nor are the settings but cost_limit: a raised limit folds
// again the events that failed under the old one. A spec without all_keys,
// or with the default cost_limit, has the fingerprint it had before
// either existed.
func Fingerprint(s *Spec) string {
	fields := []any{s.Name, s.Sources, s.Decode, s.Filter, s.Key, s.Initial, s.Step}
	if s.AllKeys != "" || s.StepAll != "" {
		fields = append(fields, s.AllKeys, s.StepAll)
	}
	if s.CostLimit != 0 && s.CostLimit != specDefaultCostLimit {
		fields = append(fields, s.CostLimit)
	}
	b, _ := json.Marshal(fields)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}
