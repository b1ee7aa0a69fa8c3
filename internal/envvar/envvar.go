// Package envvar holds auditd's one ${VAR} rule for configuration files:
// ${NAME} is replaced by the environment variable NAME; $NAME without
// braces, $$, a lone $ and ${...} around something that is not a variable
// name are left alone, so that secrets holding a $ survive.
package envvar

import (
	"fmt"
	"os"
	"strings"
)

// Expand applies the rule to s, an unset variable giving "".
func Expand(s string) string {
	out, _ := expand(s, func(name string) (string, error) { return os.Getenv(name), nil })
	return out
}

// ExpandSet applies the rule to s and refuses a variable that is not set:
// an unset ${DSN} must not become "" and quietly connect to a default
// database. A variable set to "" is taken as given.
func ExpandSet(s string) (string, error) {
	return expand(s, func(name string) (string, error) {
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("%s is not set (referenced as ${%s})", name, name)
		}
		return v, nil
	})
}

func expand(s string, lookup func(string) (string, error)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i+2:], '}')
		if j < 0 || !IsName(s[i+2:i+2+j]) {
			b.WriteString(s[:i+2])
			s = s[i+2:]
			continue
		}
		v, err := lookup(s[i+2 : i+2+j])
		if err != nil {
			return "", err
		}
		b.WriteString(s[:i])
		b.WriteString(v)
		s = s[i+2+j+1:]
	}
	b.WriteString(s)
	return b.String(), nil
}

// IsName reports whether s is an environment variable name: a letter or
// _, then letters, digits and _.
func IsName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
