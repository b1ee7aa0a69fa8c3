package redact

import "strings"

// A key=value DSN is libpq's connection string: pairs key=value separated
// by white space, a value either bare (up to white space) or in single
// quotes with \' and \\ escapes.

// isKeyValue reports whether s looks like a key=value DSN.
func isKeyValue(s string) bool {
	return strings.Contains(s, "=")
}

// kvPair is one pair of a key=value DSN: key, and where its value starts
// and ends in the string.
type kvPair struct {
	key        string
	start, end int
}

// kvPairs splits a key=value DSN, tolerating what does not parse (a value
// whose quote is not closed runs to the end).
func kvPairs(s string) []kvPair {
	var out []kvPair
	i := 0
	for i < len(s) {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		k := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[k:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			continue // a word without value
		}
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		start := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i+1, len(s))
		} else {
			for i < len(s) && !isSpace(s[i]) {
				i++
			}
		}
		out = append(out, kvPair{key: key, start: start, end: i})
	}
	return out
}

func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v'
}

// keyValue masks the secret values of a key=value DSN.
func keyValue(s string) string {
	var b strings.Builder
	last := 0
	for _, p := range kvPairs(s) {
		if !secretName(p.key) || p.start == p.end {
			continue
		}
		b.WriteString(s[last:p.start])
		b.WriteString(Mask)
		last = p.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// keyValueSecrets returns the secret values of a key=value DSN, as
// written and unquoted.
func keyValueSecrets(s string) []string {
	var out []string
	for _, p := range kvPairs(s) {
		if !secretName(p.key) || p.start == p.end {
			continue
		}
		v := s[p.start:p.end]
		out = append(out, v)
		if strings.HasPrefix(v, "'") {
			u := strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
			u = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(u)
			out = append(out, u)
		}
	}
	return out
}
