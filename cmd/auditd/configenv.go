package main

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
)

// expandConfigEnv applies the configuration's one ${VAR} rule to every
// string the YAML file set, in c and the structs, pointers, slices and maps
// below it: ${NAME} becomes the value of the environment variable NAME;
// an unset NAME is an error naming the variable and the field (an unset
// ${TOKEN} must not become "" and quietly send no credentials); a variable
// set to "" is taken as given. $NAME without braces, $$ and a lone $ are
// left alone, so that secrets holding a $ survive. It is the rule of
// derivation specs' stores too (rederive).
func expandConfigEnv(c *Config) error {
	return expandValue(reflect.ValueOf(c).Elem(), "")
}

func expandValue(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.String:
		s, err := expandEnvSet(v.String())
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		v.SetString(s)
	case reflect.Pointer:
		if !v.IsNil() {
			return expandValue(v.Elem(), path)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" || !v.Field(i).CanSet() {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if path != "" {
				name = path + "." + name
			}
			if err := expandValue(v.Field(i), name); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := expandValue(v.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case reflect.Map:
		if v.Type().Elem().Kind() != reflect.String {
			return nil // no such map in Config; values of maps are not addressable
		}
		for _, k := range v.MapKeys() {
			s, err := expandEnvSet(v.MapIndex(k).String())
			if err != nil {
				return fmt.Errorf("%s.%v: %w", path, k, err)
			}
			v.SetMapIndex(k, reflect.ValueOf(s).Convert(v.Type().Elem()))
		}
	}
	return nil
}

// expandEnvSet replaces each ${NAME} in s by the variable NAME, failing on
// one that is not set.
func expandEnvSet(s string) (string, error) {
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
		if j < 0 {
			break
		}
		name := s[i+2 : i+2+j]
		if !isEnvName(name) {
			b.WriteString(s[:i+2])
			s = s[i+2:]
			continue
		}
		val, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("%s is not set (referenced as ${%s})", name, name)
		}
		b.WriteString(s[:i])
		b.WriteString(val)
		s = s[i+2+j+1:]
	}
	b.WriteString(s)
	return b.String(), nil
}

// isEnvName reports whether s is an environment variable name: a letter or
// _, then letters, digits and _.
func isEnvName(s string) bool {
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
