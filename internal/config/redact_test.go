package config_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

func TestRedacted(t *testing.T) {
	c := config.Default()
	c.Node.DataDir = "s3://backup:hunter2@bucket.example/ankusa?token=tok_abc&region=zz-north-9"
	c.HTTP.Prefix = "/hooks"
	s := c.Sources["demo"]
	s.Tenant = "acme"
	s.Verify.Secret = []string{"whsec_first", "whsec_second"}
	s.Dedupe = &config.SourceDedupe{Header: "X-Request-Id", TTLSeconds: 60}
	c.Sources["demo"] = s

	r := c.Redacted()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	for _, secret := range []string{"whsec_first", "whsec_second", "hunter2", "tok_abc", "zz-north-9"} {
		if strings.Contains(out, secret) {
			t.Errorf("redacted output leaks %q: %s", secret, out)
		}
	}

	get := func(path ...any) any {
		var v any = r
		for _, p := range path {
			switch k := p.(type) {
			case string:
				v = v.(map[string]any)[k]
			case int:
				v = v.([]any)[k]
			}
		}
		return v
	}
	tests := []struct {
		path []any
		want any
	}{
		{[]any{"sources", "demo", "verify", "secret", 0}, "[REDACTED]"},
		{[]any{"sources", "demo", "verify", "secret", 1}, "[REDACTED]"},
		{[]any{"node", "data_dir"}, "s3://backup:[REDACTED]@bucket.example/ankusa?token=[REDACTED]&region=[REDACTED]"},
		{[]any{"http", "prefix"}, "/hooks"},
		{[]any{"http", "ip"}, "0.0.0.0"},
		{[]any{"node", "roles", 1}, "dispatch"},
		{[]any{"log", "level"}, "info"},
		{[]any{"wal", "type"}, "disk"},
		{[]any{"sources", "demo", "tenant"}, "acme"},
		{[]any{"sources", "demo", "verify", "type"}, "none"},
		{[]any{"sources", "demo", "dedupe", "header"}, "X-Request-Id"},
		{[]any{"sources", "demo", "sinks", 0, "id"}, "log"},
		{[]any{"sources", "demo", "sinks", 0, "type"}, "log"},
	}
	for _, tt := range tests {
		if got := get(tt.path...); got != tt.want {
			t.Errorf("%v = %v, want %v", tt.path, got, tt.want)
		}
	}
	// Numbers are shown, and 64-bit sizes stay exact.
	if got := get("batcher", "max_queue_bytes"); got != json.Number("268435456") {
		t.Errorf("max_queue_bytes = %#v", got)
	}
}

// Redacted must not touch the Config it was called on.
func TestRedactedLeavesConfigAlone(t *testing.T) {
	c := config.Default()
	s := c.Sources["demo"]
	s.Verify.Secret = []string{"whsec_x"}
	c.Sources["demo"] = s
	_ = c.Redacted()
	if c.Sources["demo"].Verify.Secret[0] != "whsec_x" {
		t.Fatal("Redacted mutated the config")
	}
}

func TestRedactedURLWithoutCredentialsUnchanged(t *testing.T) {
	c := config.Default()
	c.Node.DataDir = "file:///var/lib/ankusa"
	if got := c.Redacted()["node"].(map[string]any)["data_dir"]; got != "file:///var/lib/ankusa" {
		t.Fatalf("got %v", got)
	}
}
