package crash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServe_BadConfigExits78: a configuration the binary cannot run with
// ends the process with status 78 (EX_CONFIG) and one line on stderr that
// names every offending key, before anything is opened or bound.
func TestServe_BadConfigExits78(t *testing.T) {
	const validSources = `sources:
  demo:
    verify: {type: none}
    sinks: [{id: log, type: log}]
`
	tests := []struct {
		name     string
		yaml     string   // appended to node.data_dir; "" writes no file at all
		env      []string // added to the child's environment
		wantKeys []string // each must appear on the line: the keys (or file, variable) at fault
	}{
		{
			name:     "unknown key",
			yaml:     "http: {ip: 127.0.0.1, colour: red}\n" + validSources,
			wantKeys: []string{"http.colour"},
		},
		{
			name:     "unknown nested key",
			yaml:     "sources:\n  demo:\n    verify: {type: none}\n    sinks: [{id: log, type: log, colour: red}]\n",
			wantKeys: []string{"sources.demo.sinks[0].colour"},
		},
		{
			name:     "port out of range",
			yaml:     "http: {ip: 127.0.0.1, port: 70000}\n" + validSources,
			wantKeys: []string{"http.port"},
		},
		{
			name:     "archive without retention, url or key",
			yaml:     "archive: {enabled: true}\n" + validSources,
			wantKeys: []string{"archive.url", "retention.delivered", "archive.signing_key"},
		},
		{
			name:     "batch above range",
			yaml:     "batcher: {max_batch: 20000}\n" + validSources,
			wantKeys: []string{"batcher.max_batch"},
		},
		{
			name:     "wrong kind",
			yaml:     "http: {ip: 127.0.0.1, port: \"abc\"}\n" + validSources,
			wantKeys: []string{"http.port"},
		},
		{
			name:     "duplicate key",
			yaml:     "http:\n  ip: 127.0.0.1\n  port: 1\n  port: 2\n" + validSources,
			wantKeys: []string{`"port"`, "already defined"},
		},
		{
			name:     "unset variable",
			yaml:     "http: {ip: 127.0.0.1, port: ${ANKUSA_DRILL_UNSET}}\n" + validSources,
			wantKeys: []string{"ANKUSA_DRILL_UNSET"},
		},
		{
			name:     "missing file",
			yaml:     "", // no file is written
			wantKeys: []string{"ankusa.yml", "no such file"},
		},
		{
			name:     "operator API off loopback without tokens",
			yaml:     "admin: {ip: 0.0.0.0, port: 0}\n" + validSources,
			wantKeys: []string{"admin.ip", "admin.tokens"},
		},
		{
			name:     "unknown env override",
			yaml:     validSources,
			env:      []string{"ANKUSA_BAKUP_ENABLED=true"},
			wantKeys: []string{"ANKUSA_BAKUP_ENABLED"},
		},
		{
			name:     "certificate file missing",
			yaml:     "http: {ip: 127.0.0.1, port: 0, tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}}\nadmin: {port: 0}\n" + validSources,
			wantKeys: []string{"http.tls.cert_file", "/nonexistent/c.pem"},
		},
		{
			name:     "several problems, one line",
			yaml:     "http: {ip: 127.0.0.1, port: 70000}\nadmin: {ip: 127.0.0.1, port: -1}\nlog: {level: loud}\n" + validSources,
			wantKeys: []string{"http.port", "admin.port", "log.level"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dataDir := filepath.Join(dir, "data")
			cfg := filepath.Join(dir, "ankusa.yml")
			body := fmt.Sprintf("node: {data_dir: %q}\n", dataDir) + tc.yaml
			if tc.yaml != "" {
				if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binPath, "serve", "--config", cfg)
			cmd.Dir = dir
			cmd.Env = append(childEnv(), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("still running after 20s (killed); stderr:\n%s", stderr.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("run = %v, want exit status 78; stderr:\n%s", err, stderr.String())
			}
			if code := ee.ExitCode(); code != 78 {
				t.Errorf("exit status %d, want 78; stderr:\n%s", code, stderr.String())
			}
			msg := stderr.String()
			line, rest, _ := strings.Cut(msg, "\n")
			if line == "" || rest != "" || !strings.HasSuffix(msg, "\n") {
				t.Errorf("stderr is not exactly one line:\n%q", msg)
			}
			for _, k := range tc.wantKeys {
				if !strings.Contains(line, k) {
					t.Errorf("stderr does not name %s: %q", k, line)
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout not empty: %q", stdout.String())
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data dir %s was touched by a config that failed (stat: %v)", dataDir, err)
			}
			t.Logf("stderr: %s", line)
		})
	}
}
