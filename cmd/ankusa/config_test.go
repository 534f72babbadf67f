package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const checkSecret = "s3cr3t-from-the-environment-4711"

// checkConfigYAML is a file as a Helm chart renders it: the secret comes from
// the environment through ${VAR}.
const checkConfigYAML = `
node:
  instance: ankusa-0
  data_dir: /data
sources:
  github:
    verify:
      type: github
      secret: "${GITHUB_WEBHOOK_SECRET}"
    sinks:
      - type: http
        http:
          url: https://user:hunter2-password@internal.example/hooks?token=abc
`

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ankusa.yml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestConfigCheck_ValidPrintsEffectiveConfigRedacted(t *testing.T) {
	path := writeConfig(t, checkConfigYAML)
	var out bytes.Buffer
	cfg, err := checkConfig(path, env("GITHUB_WEBHOOK_SECRET", checkSecret), &out)
	if err != nil {
		t.Fatalf("checkConfig: %v", err)
	}
	if cfg.Node.Instance != "ankusa-0" {
		t.Fatalf("instance = %q", cfg.Node.Instance)
	}
	text := out.String()
	for _, secret := range []string{checkSecret, "hunter2-password", "token=abc"} {
		if strings.Contains(text, secret) {
			t.Errorf("output shows the secret %q:\n%s", secret, text)
		}
	}
	var tree map[string]any
	if err := json.Unmarshal(out.Bytes(), &tree); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, text)
	}
	// Effective: defaults filled in (the ingest port was not written).
	if got := tree["http"].(map[string]any)["port"]; got != float64(4000) {
		t.Errorf("http.port = %v, want the default 4000", got)
	}
	src := tree["sources"].(map[string]any)["github"].(map[string]any)
	// secret is a list (rotation); each entry is hidden.
	if got := fmt.Sprint(src["verify"].(map[string]any)["secret"]); got != "[[REDACTED]]" {
		t.Errorf("sources.github.verify.secret = %v, want [[REDACTED]]", got)
	}
	if got := tree["node"].(map[string]any)["data_dir"]; got != "/data" {
		t.Errorf("node.data_dir = %v, want /data", got)
	}
}

func TestConfigCheck_Invalid(t *testing.T) {
	for _, tc := range []struct {
		name   string
		text   string
		getenv func(string) (string, bool)
		want   []string // in the error
	}{
		{
			name: "unset variable", text: checkConfigYAML, getenv: env(),
			want: []string{"GITHUB_WEBHOOK_SECRET"},
		},
		{
			name: "bad value", text: strings.Replace(checkConfigYAML, "data_dir: /data", "data_dir: /data\nhttp:\n  port: 70000", 1),
			getenv: env("GITHUB_WEBHOOK_SECRET", checkSecret),
			want:   []string{"http.port"},
		},
		{
			name: "unknown key", text: checkConfigYAML + "surprise: 1\n",
			getenv: env("GITHUB_WEBHOOK_SECRET", checkSecret),
			want:   []string{"surprise", "unknown key"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.text)
			var out bytes.Buffer
			_, err := checkConfig(path, tc.getenv, &out)
			if err == nil {
				t.Fatalf("checkConfig accepted an invalid file; printed:\n%s", out.String())
			}
			if out.Len() != 0 {
				t.Errorf("an invalid file printed a config:\n%s", out.String())
			}
			msg := err.Error()
			for _, w := range append(tc.want, path) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
			if strings.Contains(msg, checkSecret) {
				t.Errorf("error repeats the secret: %q", msg)
			}
		})
	}
}

func TestConfigCheck_MissingFile(t *testing.T) {
	var out bytes.Buffer
	_, err := checkConfig(filepath.Join(t.TempDir(), "nope.yml"), env(), &out)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want a not-exist error", err)
	}
}
