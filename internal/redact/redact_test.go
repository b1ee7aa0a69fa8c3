package redact_test

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/auditd/auditd/internal/redact"
)

const pass = "s3cr3t-PASS"

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://user:" + pass + "@host:8080/base", "http://user:xxxxx@host:8080/base"},
		{"https://host/path", "https://host/path"},
		{"redis://:" + pass + "@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"postgres://u:" + pass + "@db/test?sslmode=disable", "postgres://u:xxxxx@db/test?sslmode=disable"},
		{"postgres://u@db/test?password=" + pass + "&sslmode=disable", "postgres://xxxxx@db/test?password=xxxxx&sslmode=disable"},
		{"https://hooks.example/alert?token=" + pass + "&team=ops", "https://hooks.example/alert?token=xxxxx&team=ops"},
		{"https://" + pass + "@hooks.example/", "https://xxxxx@hooks.example/"},
		{"http://user:s3cr%2Ft@host", "http://user:xxxxx@host"},
		{"host=db user=u password=" + pass + " dbname=test", "host=db user=u password=xxxxx dbname=test"},
		{"host=db password='" + pass + ` it\'s' dbname=test`, "host=db password=xxxxx dbname=test"},
		{"host=db password = " + pass, "host=db password = xxxxx"},
		{"127.0.0.1:6379", "127.0.0.1:6379"},
		{"", ""},
		// Does not parse: masked in place all the same.
		{"http://user:" + pass + "@ho st:80%zz/x?key=" + pass, "http://user:xxxxx@ho st:80%zz/x?key=xxxxx"},
		{"http://us er:" + pass + "@host/%zz", "http://us er:xxxxx@host/%zz"},
	} {
		got := redact.URL(c.in)
		if got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, pass) || strings.Contains(got, "s3cr%2Ft") {
			t.Errorf("URL(%q) = %q shows the password", c.in, got)
		}
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ configured, msg string }{
		{"http://user:" + pass + "@host/", `peer http://user:` + pass + `@host: GET http://user:` + pass + `@host/v1/logs: connection refused`},
		{"http://user:s3cr%2Ft@host", `Get "http://user:s3cr/t@host/x": dial: refused (s3cr%2Ft)`},
		{"host=db password='" + pass + "'", "cannot parse `host=db password='" + pass + "'`: " + pass},
		{"postgres://u:" + pass + "@db/x", "failed to connect to `user=u database=x`: password " + pass},
		{"https://hooks.example/a?token=" + pass, `Post "https://hooks.example/a?token=` + pass + `": EOF`},
	} {
		got := redact.Text(c.msg, "http://other", c.configured)
		if strings.Contains(got, pass) || strings.Contains(got, "s3cr/t") || strings.Contains(got, "s3cr%2Ft") {
			t.Errorf("Text(%q) = %q shows the password", c.msg, got)
		}
		if !strings.Contains(got, redact.Mask) {
			t.Errorf("Text(%q) = %q: no mask", c.msg, got)
		}
	}
	// The user name of a URL without password is masked where the URL
	// is quoted, not everywhere.
	if got := redact.Text("GET https://tok@hooks/x: tok", "https://tok@hooks/x"); got != "GET https://xxxxx@hooks/x: tok" {
		t.Errorf("user-only: %q", got)
	}
}

func TestError(t *testing.T) {
	u := "http://u:" + pass + "@h"
	base := fmt.Errorf("GET %s: %w", u, fs.ErrNotExist)
	err := redact.Error(base, u)
	if strings.Contains(err.Error(), pass) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Error: %v (is %v)", err, errors.Is(err, fs.ErrNotExist))
	}
	if clean := errors.New("no secret"); redact.Error(clean, u) != clean {
		t.Error("an error without secret is wrapped")
	}
	if redact.Error(nil, u) != nil {
		t.Error("nil")
	}
}

func FuzzURL(f *testing.F) {
	f.Add("http://user:" + pass + "@host/")
	f.Add("host=x password='" + pass + "'")
	f.Add("http://u:" + pass + "@h%zz/?token=" + pass)
	f.Fuzz(func(t *testing.T, s string) {
		_ = redact.URL(s)
		_ = redact.Text(s, s)
	})
}
