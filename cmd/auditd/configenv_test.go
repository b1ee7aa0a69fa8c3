package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auditd.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue 10: one ${VAR} rule for the whole configuration file. Webhook
// headers used os.ExpandEnv (an unset variable became "", and $NAME and $$
// were expanded too) while stores refused an unset variable.
func TestConfigEnvOneRule(t *testing.T) {
	t.Setenv("LC_TOKEN", "s3cr$t")
	t.Setenv("LC_EMPTY", "")
	t.Setenv("LC_DIR", "/srv/auditd")
	t.Setenv("LC_PASS", "kafka-pw")
	t.Setenv("PLAIN", "expanded-by-mistake")
	path := writeConfig(t, `
data_dir: ${LC_DIR}/data
write_token: "${LC_EMPTY}"
logs: [a, "${LC_DIR}"]
kafka:
  brokers: [127.0.0.1:9092]
  topics: [t]
  sasl:
    mechanism: PLAIN
    username: u
    password: ${LC_PASS}
webhooks:
  - url: http://127.0.0.1:9/hook
    headers:
      Authorization: Bearer ${LC_TOKEN}
      X-Literal: $PLAIN and a$$b and $ and ${not a name}
`)
	c, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct{ name, got, want string }{
		{"data_dir", c.DataDir, "/srv/auditd/data"},
		{"write_token (set to \"\")", c.WriteToken, ""},
		{"logs[1]", c.Logs[1], "/srv/auditd"},
		{"kafka.sasl.password", c.Kafka.SASL.Password, "kafka-pw"},
		{"Authorization (a $ in the value survives)", c.Webhooks[0].Headers["Authorization"], "Bearer s3cr$t"},
		{"X-Literal (no braces: left alone)", c.Webhooks[0].Headers["X-Literal"], "$PLAIN and a$$b and $ and ${not a name}"},
	} {
		if g.got != g.want {
			t.Errorf("%s = %q, want %q", g.name, g.got, g.want)
		}
	}
}

func TestConfigEnvUnsetIsAnError(t *testing.T) {
	os.Unsetenv("LC_MISSING")
	for _, c := range []struct{ yaml, field string }{
		{"webhooks:\n  - url: http://127.0.0.1:9/hook\n    headers:\n      Authorization: Bearer ${LC_MISSING}\n", "webhooks[0].headers.Authorization"},
		{"read_token: ${LC_MISSING}\n", "read_token"},
		{"kafka:\n  brokers: [\"${LC_MISSING}:9092\"]\n", "kafka.brokers[0]"},
	} {
		path := writeConfig(t, c.yaml)
		_, err := loadConfig(path)
		if err == nil {
			t.Fatalf("%s: an unset ${LC_MISSING} was accepted", c.field)
		}
		for _, want := range []string{path, c.field, "LC_MISSING is not set"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not name %q", c.field, err, want)
			}
		}
	}
}
