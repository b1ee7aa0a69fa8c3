// Package redact hides the secrets of configured URLs and connection
// strings (peer, witness and store URLs, PostgreSQL DSNs, Redis URLs,
// webhook URLs) wherever auditd shows them: API answers, metric labels,
// logs, alerts and command output. The URL used to connect keeps its
// secrets; only what is shown is redacted.
//
// A secret is the password of a URL's userinfo (the user name too when
// there is no password: a token given as user name), the value of a query
// parameter whose name says it holds one (password, token, secret, key,
// sig, auth, credential...), and the password value of a key=value DSN
// ("host=db password=s3cr3t").
package redact

import (
	"net/url"
	"strings"
)

// Mask is what replaces a secret.
const Mask = "xxxxx"

// URL returns the configured URL or DSN s as it may be shown: with the
// password of its userinfo replaced by Mask (as url.URL.Redacted does), its
// user name too when it has no password, and the values of its secret
// query parameters; a key=value DSN with its password replaced. A string
// that does not parse is masked in place, never returned as is.
func URL(s string) string {
	if !strings.Contains(s, "://") {
		if isKeyValue(s) {
			return keyValue(s)
		}
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" {
		return unparsed(s)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
		} else if u.User.Username() != "" {
			u.User = url.User(Mask)
		}
	}
	u.RawQuery = query(u.RawQuery)
	return u.String()
}

// Text returns msg with the secrets of the configured URLs or DSNs removed:
// each configured string is replaced by URL of it, then each secret it
// holds (as written, decoded and encoded) by Mask wherever it still
// appears, as in an error of a library that quotes the URL or DSN its own
// way.
func Text(msg string, configured ...string) string {
	for _, c := range configured {
		if c == "" {
			continue
		}
		if r := URL(c); r != c {
			msg = strings.ReplaceAll(msg, c, r)
			if t := strings.TrimRight(c, "/"); t != c && t != "" {
				msg = strings.ReplaceAll(msg, t, strings.TrimRight(r, "/"))
			}
		}
		for _, s := range secrets(c) {
			msg = strings.ReplaceAll(msg, s, Mask)
		}
		if user := userOnly(c); user != "" {
			msg = strings.ReplaceAll(msg, "//"+user+"@", "//"+Mask+"@")
		}
	}
	return msg
}

// Error returns err with its message scrubbed by Text; errors.Is and
// errors.As still see err. A nil err, or one whose message holds no
// secret, is returned as is.
func Error(err error, configured ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if m := Text(msg, configured...); m != msg {
		return &redacted{msg: m, err: err}
	}
	return err
}

// redacted is an error shown without its secrets.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// parts splits a URL-looking string into what precedes its userinfo, the
// userinfo ("" when none), and the rest from the host on.
func parts(s string) (head, userinfo, rest string) {
	i := strings.Index(s, "://")
	if i < 0 {
		return s, "", ""
	}
	head, rest = s[:i+3], s[i+3:]
	auth := rest
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		return head, "", rest
	}
	return head, rest[:at], rest[at+1:]
}

// userOnly is the user name of a URL whose userinfo has no password.
func userOnly(s string) string {
	_, ui, _ := parts(s)
	if strings.Contains(ui, ":") {
		return ""
	}
	return ui
}

// secrets returns the secrets c holds, as written, decoded and encoded,
// longest first (so that a secret holding another is masked whole).
func secrets(c string) []string {
	var out []string
	add := func(s string) {
		forms := []string{s}
		if d, err := url.PathUnescape(s); err == nil {
			forms = append(forms, d)
		}
		if d, err := url.QueryUnescape(s); err == nil {
			forms = append(forms, d)
		}
		forms = append(forms, url.QueryEscape(s), url.PathEscape(s))
	next:
		for _, f := range forms {
			if f == "" || f == Mask {
				continue
			}
			for _, o := range out {
				if o == f {
					continue next
				}
			}
			out = append(out, f)
		}
	}
	if !strings.Contains(c, "://") {
		if isKeyValue(c) {
			for _, v := range keyValueSecrets(c) {
				add(v)
			}
		}
	} else {
		_, ui, rest := parts(c)
		if _, pass, ok := strings.Cut(ui, ":"); ok {
			add(pass)
		}
		if i := strings.Index(rest, "?"); i >= 0 {
			q, _, _ := strings.Cut(rest[i+1:], "#")
			for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
				if k, v, _ := strings.Cut(kv, "="); secretName(k) {
					add(v)
				}
			}
		}
	}
	// Longest first.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// secretName reports whether a query parameter or DSN key names a secret.
func secretName(k string) bool {
	if d, err := url.QueryUnescape(k); err == nil {
		k = d
	}
	k = strings.ToLower(k)
	for _, w := range []string{"pass", "pwd", "token", "secret", "key", "sig", "auth", "credential"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// query masks the values of the secret parameters of a raw query, keeping
// everything else as written.
func query(raw string) string {
	if raw == "" {
		return raw
	}
	ps := strings.Split(raw, "&")
	for i, kv := range ps {
		if k, _, ok := strings.Cut(kv, "="); ok && secretName(k) {
			ps[i] = k + "=" + Mask
		}
	}
	return strings.Join(ps, "&")
}

// unparsed masks, in place, the userinfo and secret query values of a
// string that looks like a URL but does not parse.
func unparsed(s string) string {
	head, ui, rest := parts(s)
	if ui != "" {
		if user, _, ok := strings.Cut(ui, ":"); ok {
			ui = user + ":" + Mask
		} else {
			ui = Mask
		}
		ui += "@"
	}
	if i := strings.Index(rest, "?"); i >= 0 {
		q, frag, hasFrag := strings.Cut(rest[i+1:], "#")
		rest = rest[:i+1] + query(q)
		if hasFrag {
			rest += "#" + frag
		}
	}
	return head + ui + rest
}
