package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Fingerprint identifies a spec's derivation logic: a changed source,
// filter, key, initial or step forces a full fold.
func Fingerprint(s *Spec) string {
	b, _ := json.Marshal([]any{s.Name, s.Sources, s.Decode, s.Filter, s.Key, s.Initial, s.Step})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}
