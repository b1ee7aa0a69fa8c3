package store

import "github.com/auditd/auditd/internal/envvar"

// Secrets returns the configured strings whose secrets must not be shown
// (the HTTP URL and watermark URL, the PostgreSQL DSN), as written and with
// ${VAR} expanded, for redact.Text and redact.Error: a last guard over
// messages that may quote them (a run's report, its log line, its alert).
func (c Config) Secrets() []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		out = append(out, s)
		if e := envvar.Expand(s); e != s && e != "" {
			out = append(out, e)
		}
	}
	if h := c.HTTP; h != nil {
		add(h.URL)
		add(h.WatermarkURL)
	}
	if p := c.Postgres; p != nil {
		add(p.DSN)
	}
	return out
}
