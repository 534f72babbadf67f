package config_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
)

const goodToken = "tok_0123456789abcdef"

func TestAdminAccessRules(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	tests := []struct {
		name      string
		ip        string
		tokens    []config.AdminToken
		open      []string
		key, rule string // "" = valid
	}{
		{name: "loopback, no tokens", ip: "127.0.0.1"},
		{name: "ipv6 loopback, no tokens", ip: "::1"},
		{name: "wildcard, no tokens", ip: "0.0.0.0", key: "admin.ip", rule: "set admin.tokens"},
		{name: "routable, no tokens", ip: "10.1.2.3", key: "admin.ip", rule: "not a loopback address"},
		{name: "wildcard, one token", ip: "0.0.0.0", tokens: []config.AdminToken{{Name: "ops", Token: goodToken, Role: "read"}}},
		{name: "hash", ip: "::", tokens: []config.AdminToken{{Name: "ops", TokenSHA256: sum, Role: "operate"}}},
		{name: "neither", tokens: []config.AdminToken{{Name: "ops", Role: "read"}}, key: "admin.tokens[0]", rule: "must set token or token_sha256"},
		{name: "both", tokens: []config.AdminToken{{Name: "ops", Token: goodToken, TokenSHA256: sum, Role: "read"}}, key: "admin.tokens[0]", rule: "only one of"},
		{name: "short", tokens: []config.AdminToken{{Name: "ops", Token: "hunter2", Role: "read"}}, key: "admin.tokens[0].token", rule: "at least 16 bytes, got 7"},
		{name: "bad hash", tokens: []config.AdminToken{{Name: "ops", TokenSHA256: "xyz", Role: "read"}}, key: "admin.tokens[0].token_sha256", rule: "64 hex digits"},
		{name: "role", tokens: []config.AdminToken{{Name: "ops", Token: goodToken, Role: "admin"}}, key: "admin.tokens[0].role", rule: "read|operate"},
		{name: "no name", tokens: []config.AdminToken{{Token: goodToken, Role: "read"}}, key: "admin.tokens[0].name", rule: "must match"},
		{name: "duplicate name", tokens: []config.AdminToken{{Name: "a", Token: goodToken, Role: "read"}, {Name: "a", Token: goodToken + "x", Role: "read"}}, key: "admin.tokens[1].name", rule: "duplicate"},
		{name: "open unknown", open: []string{"health", "wal"}, key: "admin.open[1]", rule: "health|ready|metrics"},
		{name: "open duplicate", open: []string{"ready", "ready"}, key: "admin.open[1]", rule: "duplicate"},
		{name: "open empty", open: []string{}},
	}
	tlsTests := []ruleCase{
		{"http cert without key", func(c *config.Config) { c.HTTP.TLS.CertFile = "/c" }, "http.tls.key_file", "required when http.tls.cert_file"},
		{"admin key without cert", func(c *config.Config) { c.Admin.TLS.KeyFile = "/k" }, "admin.tls.cert_file", "required when admin.tls.key_file"},
		{"client CA without TLS", func(c *config.Config) { c.Admin.TLS.ClientCAFile = "/ca" }, "admin.tls.client_ca_file", "needs admin.tls.cert_file"},
		{"full admin TLS", func(c *config.Config) {
			c.Admin.TLS = config.AdminTLS{CertFile: "/c", KeyFile: "/k", ClientCAFile: "/ca"}
		}, "", ""},
	}
	runRules(t, config.Default, tlsTests)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			if tt.ip != "" {
				c.Admin.IP = tt.ip
			}
			c.Admin.Tokens = tt.tokens
			if tt.open != nil {
				c.Admin.Open = tt.open
			}
			err := c.Validate()
			wantOutcome(t, err, tt.key, tt.rule)
			if err != nil && (strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), goodToken)) {
				t.Fatalf("error repeats a token: %v", err)
			}
		})
	}
}

// Tokens come from the environment, ANKUSA_ADMIN_IP moves the listener,
// and the non-loopback rule names both keys.
func TestAdminTokensFromEnvAndIPRule(t *testing.T) {
	yml := `
admin:
  ip: 0.0.0.0
  tokens:
    - {name: ci, token: "${CI_TOKEN}", role: operate}
` + minimal
	c := mustLoad(t, yml, env(map[string]string{"CI_TOKEN": goodToken}))
	if c.Admin.Tokens[0].Token != goodToken {
		t.Fatalf("token = %q", c.Admin.Tokens[0].Token)
	}
	if got := c.Admin.Open; strings.Join(got, ",") != "health,ready,metrics" {
		t.Fatalf("admin.open default = %v", got)
	}
	_, err := config.LoadBytes([]byte(minimal), env(map[string]string{"ANKUSA_ADMIN_IP": "0.0.0.0"}))
	wantViolation(t, err, "admin.ip", "admin.tokens")
}

// /v1/config shows who holds a token and its role, never the token or
// its hash.
func TestAdminTokensRedacted(t *testing.T) {
	c := config.Default()
	sum := strings.Repeat("cd", 32)
	c.Admin.Tokens = []config.AdminToken{
		{Name: "ci", Token: goodToken, Role: "operate"},
		{Name: "grafana", TokenSHA256: sum, Role: "read"},
	}
	raw, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	for _, secret := range []string{goodToken, sum} {
		if strings.Contains(out, secret) {
			t.Fatalf("redacted config leaks %q: %s", secret, out)
		}
	}
	for _, shown := range []string{`"name":"ci"`, `"role":"operate"`, `"name":"grafana"`, `"open":["health","ready","metrics"]`} {
		if !strings.Contains(out, shown) {
			t.Errorf("redacted config does not show %s: %s", shown, out)
		}
	}
}

func TestRetentionKeys(t *testing.T) {
	tests := []struct {
		yml       string
		want      time.Duration
		key, rule string
	}{
		{yml: "", want: 0},
		{yml: "retention: {delivered: 0}\n", want: 0},
		{yml: "retention: {delivered: 72h}\n", want: 72 * time.Hour},
		{yml: "retention: {delivered: 7d}\n", want: 7 * 24 * time.Hour},
		{yml: "retention: {delivered: 90m}\n", want: 90 * time.Minute},
		{yml: "retention: {delivered: soon}\n", key: "retention.delivered", rule: "must be a duration"},
		{yml: "retention: {delivered: 400d}\n", key: "retention.delivered", rule: "between 0 and 365d"},
		{yml: "retention: {delivered: -1h}\n", key: "retention.delivered", rule: "between 0 and 365d"},
		{yml: "retention: {max_bytes: 10}\n", key: "retention.max_bytes", rule: "must be between"},
		{yml: "retention: {sweep_interval_ms: 1}\n", key: "retention.sweep_interval_ms", rule: "must be between"},
	}
	for _, tt := range tests {
		t.Run(tt.yml, func(t *testing.T) {
			c, err := config.LoadBytes([]byte(tt.yml+minimal), noEnv)
			if tt.key != "" {
				wantViolation(t, err, tt.key, tt.rule)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Retention.DeliveredDuration(); got != tt.want {
				t.Fatalf("delivered = %s, want %s", got, tt.want)
			}
			if c.Retention.MaxBytes != 1<<30 || c.Retention.SweepIntervalMs != 1000 {
				t.Fatalf("defaults: %+v", c.Retention)
			}
		})
	}
}
