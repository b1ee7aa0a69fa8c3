package main

import (
	"fmt"
	"github.com/auditd/auditd/internal/envvar"
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
		s, err := envvar.ExpandSet(v.String())
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
			s, err := envvar.ExpandSet(v.MapIndex(k).String())
			if err != nil {
				return fmt.Errorf("%s.%v: %w", path, k, err)
			}
			v.SetMapIndex(k, reflect.ValueOf(s).Convert(v.Type().Elem()))
		}
	}
	return nil
}
