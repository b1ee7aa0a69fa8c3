package envvar

import "testing"

func TestExpand(t *testing.T) {
	t.Setenv("AUDITD_TEST_A", "x$y")
	for in, want := range map[string]string{
		"":                          "",
		"plain":                     "plain",
		"${AUDITD_TEST_A}":          "x$y",
		"a${AUDITD_TEST_A}b":        "ax$yb",
		"${AUDITD_TEST_UNSET}-":     "-",
		"pa$$word $HOME $1":         "pa$$word $HOME $1",
		"${not a name} ${":          "${not a name} ${",
		"${AUDITD_TEST_A}${}${A-B}": "x$y${}${A-B}",
	} {
		if got := Expand(in); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
	// ExpandSet refuses an unset variable, and takes one set, even to "",
	// as given.
	t.Setenv("AUDITD_TEST_EMPTY", "")
	if got, err := ExpandSet("a${AUDITD_TEST_EMPTY}b"); err != nil || got != "ab" {
		t.Errorf("a variable set to empty: %q, %v", got, err)
	}
	if _, err := ExpandSet("${AUDITD_TEST_UNSET}"); err == nil {
		t.Errorf("an unset variable expanded")
	}
}

func FuzzExpand(f *testing.F) {
	f.Add("a${B}c$$d${")
	f.Fuzz(func(t *testing.T, s string) {
		_ = Expand(s) // no panic
	})
}
