package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

func TestUnknownKeyNamesDottedPath(t *testing.T) {
	tests := []struct {
		name string
		yml  string
		want string
	}{
		{"top level", "colour: red\n" + minimal, "colour: unknown key"},
		{"section", "http:\n  colour: red\n" + minimal, "http.colour: unknown key"},
		{"source", "sources:\n  demo:\n    colour: red\n    sinks: [{type: log}]\n", "sources.demo.colour: unknown key"},
		{"verify", "sources:\n  demo:\n    verify: {type: none, colour: red}\n    sinks: [{type: log}]\n", "sources.demo.verify.colour: unknown key"},
		{"source dedupe", "sources:\n  demo:\n    dedupe: {header: X-Id, colour: red}\n    sinks: [{type: log}]\n", "sources.demo.dedupe.colour: unknown key"},
		{"sink", "sources:\n  demo:\n    sinks:\n      - type: log\n        colour: red\n", "sources.demo.sinks[0].colour: unknown key"},
		{"second sink", "sources:\n  demo:\n    sinks:\n      - type: log\n      - {id: b, type: log, colour: red}\n", "sources.demo.sinks[1].colour: unknown key"},
		{"dispatch", "dispatch: {workers: 4}\n" + minimal, "dispatch.workers: unknown key"},
		{"retry", "retry: {jitter: 0.5}\n" + minimal, "retry.jitter: unknown key"},
		{"http sink", "sources:\n  demo:\n    sinks:\n      - {type: http, http: {url: https://x.example, method: PUT}}\n", "sources.demo.sinks[0].http.method: unknown key"},
		{"kafka sasl", "sources:\n  demo:\n    sinks:\n      - {type: kafka, kafka: {brokers: [\"k:9092\"], topic: t, sasl: {mechanism: plain, username: u, password: p, realm: r}}}\n", "sources.demo.sinks[0].kafka.sasl.realm: unknown key"},
		{"kafka tls", "sources:\n  demo:\n    sinks:\n      - {type: kafka, kafka: {brokers: [\"k:9092\"], topic: t, tls: {verify: false}}}\n", "sources.demo.sinks[0].kafka.tls.verify: unknown key"},
		{"nats sink", "sources:\n  demo:\n    sinks:\n      - {type: nats, nats: {url: nats://n, subject: s, stream: S}}\n", "sources.demo.sinks[0].nats.stream: unknown key"},
		{"rabbitmq sink", "sources:\n  demo:\n    sinks:\n      - {type: rabbitmq, rabbitmq: {url: amqp://h, routing_key: r, queue: q}}\n", "sources.demo.sinks[0].rabbitmq.queue: unknown key"},
		{"unknown sink block", "sources:\n  demo:\n    sinks:\n      - {type: log, sqs: {queue: q}}\n", "sources.demo.sinks[0].sqs: unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.LoadBytes([]byte(tt.yml), noEnv)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestUnknownKeysAllReported(t *testing.T) {
	yml := "colour: red\nhttp: {shape: round}\n" + minimal
	errs := asErrors(t, func() error { _, err := config.LoadBytes([]byte(yml), noEnv); return err }())
	if len(errs) != 2 || findKey(errs, "colour") == nil || findKey(errs, "http.shape") == nil {
		t.Fatalf("want both unknown keys, got %v", errs)
	}
}

func TestWrongKindOfValue(t *testing.T) {
	tests := []struct {
		name, yml, key, rule string
	}{
		{"string for int", "http: {port: abc}\n" + minimal, "http.port", `must be an integer, got "abc"`},
		{"float for int", "http: {port: 1.5}\n" + minimal, "http.port", "must be an integer, got 1.5"},
		{"overflow", "batcher: {max_queue_bytes: 99999999999999999999}\n" + minimal, "batcher.max_queue_bytes", ""},
		{"number for string", "sources:\n  demo:\n    tenant: 007\n    sinks: [{type: log}]\n", "sources.demo.tenant", "must be a string"},
		{"number in secret list", "sources:\n  demo:\n    verify: {secret: [123]}\n    sinks: [{type: log}]\n", "sources.demo.verify.secret[0]", "must be a string"},
		{"scalar for section", "http: 4000\n" + minimal, "http", "must be a mapping, got 4000"},
		{"mapping for list", "sources:\n  demo:\n    sinks: {type: log}\n", "sources.demo.sinks", "must be a list"},
		{"top level list", "- a\n", "(top level)", "must be a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.LoadBytes([]byte(tt.yml), noEnv)
			if tt.rule == "" {
				// Overflow is caught either by the shape check or by the
				// decoder; either way it must not load.
				if err == nil {
					t.Fatal("loaded an overflowing value")
				}
				return
			}
			wantViolation(t, err, tt.key, tt.rule)
		})
	}
}

func TestSyntaxErrorHasPosition(t *testing.T) {
	_, err := config.LoadBytes([]byte("http: [1\n"), noEnv)
	if err == nil || !strings.Contains(err.Error(), "parse YAML: [1:") {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error spans lines: %q", err)
	}
}

func TestInterpolation(t *testing.T) {
	tests := []struct {
		name    string
		value   string // YAML scalar used as node.instance
		env     map[string]string
		want    string
		wantErr string
	}{
		{"set", `"${NAME}"`, map[string]string{"NAME": "n1"}, "n1", ""},
		{"set wins over default", `"${NAME:-dflt}"`, map[string]string{"NAME": "n1"}, "n1", ""},
		{"default when unset", `"${NAME:-dflt}"`, nil, "dflt", ""},
		{"default when empty", `"${NAME:-dflt}"`, map[string]string{"NAME": ""}, "dflt", ""},
		{"default with colon", `"${NAME:-a:b}"`, nil, "a:b", ""},
		{"inside text", `"pre-${NAME}-post"`, map[string]string{"NAME": "x"}, "pre-x-post", ""},
		{"dollar dollar", `"a$$b"`, nil, "a$b", ""},
		{"escaped reference", `"$${NAME}"`, nil, "${NAME}", ""},
		{"lone dollar kept", `"a$b"`, nil, "a$b", ""},
		{"unset", `"${NOPE}"`, nil, "", "line 2: environment variable NOPE is not set"},
		{"unterminated", `"${NOPE"`, nil, "", "line 2: unterminated ${"},
		{"bad name", `"${1X}"`, nil, "", `invalid variable name "1X"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yml := "node:\n  instance: " + tt.value + "\n" + minimal
			c, err := config.LoadBytes([]byte(yml), env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Node.Instance != tt.want {
				t.Fatalf("instance = %q, want %q", c.Node.Instance, tt.want)
			}
		})
	}
}

func TestInterpolationReportsEveryUnsetVariable(t *testing.T) {
	yml := "node:\n  instance: ${A}\n  data_dir: ${B}\n" + minimal
	_, err := config.LoadBytes([]byte(yml), noEnv)
	if err == nil || !strings.Contains(err.Error(), "line 2: environment variable A") ||
		!strings.Contains(err.Error(), "line 3: environment variable B") {
		t.Fatalf("got %v", err)
	}
}

func TestDefaultsApplied(t *testing.T) {
	c := mustLoad(t, `
sources:
  demo:
    dedupe: {preset: github}
    sinks:
      - type: log
`, noEnv)
	want := config.Default()
	if !reflect.DeepEqual(c.Node, want.Node) || c.HTTP != want.HTTP || !reflect.DeepEqual(c.Admin, want.Admin) ||
		c.Log != want.Log || c.Batcher != want.Batcher || c.WAL != want.WAL || c.Dedupe != want.Dedupe ||
		c.Dispatch != want.Dispatch || c.Retry != want.Retry {
		t.Fatalf("defaults differ:\n got %+v\nwant %+v", c, want)
	}
	wantDispatch := config.DispatchConfig{
		Concurrency: 512, MaxInflight: 1_000, MaxInflightBytes: 64 << 20, AttemptTimeoutMs: 30_000,
		ScanBatch: 256, PollMs: 1_000, BreakerFailures: 5, BreakerCooldownMs: 10_000,
	}
	if c.Dispatch != wantDispatch {
		t.Fatalf("dispatch = %+v, want %+v", c.Dispatch, wantDispatch)
	}
	if wantRetry := (config.RetryConfig{BaseMs: 100, MaxMs: 300_000, MaxAttempts: 84}); c.Retry != wantRetry {
		t.Fatalf("retry = %+v, want %+v", c.Retry, wantRetry)
	}
	s := c.Sources["demo"]
	if s.Verify.Type != "none" || s.Sinks[0].ID != "log" || s.Dedupe.TTLSeconds != 259_200 {
		t.Fatalf("source defaults not applied: %+v", s)
	}
}

func TestExplicitValuesKept(t *testing.T) {
	c := mustLoad(t, `
http: {port: 0, prefix: /in}
admin: {port: 0}
batcher: {max_delay_ms: 0, partitions: 8}
`+minimal, noEnv)
	if c.HTTP.Port != 0 || c.Admin.Port != 0 || c.Batcher.MaxDelayMs != 0 {
		t.Fatalf("explicit 0 overwritten: http.port=%d admin.port=%d max_delay_ms=%d",
			c.HTTP.Port, c.Admin.Port, c.Batcher.MaxDelayMs)
	}
	if c.HTTP.Prefix != "/in" || c.Batcher.Partitions != 8 {
		t.Fatalf("explicit values overwritten: %+v %+v", c.HTTP, c.Batcher)
	}

	c = mustLoad(t, "batcher: {max_delay_ms: 5}\n"+minimal, noEnv)
	if c.Batcher.MaxDelayMs != 5 {
		t.Fatalf("max_delay_ms = %d, want 5", c.Batcher.MaxDelayMs)
	}

	c = mustLoad(t, `
dispatch:
  concurrency: 8
  max_inflight: 8
  max_inflight_bytes: 16777216
  attempt_timeout_ms: 1000
  scan_batch: 1
  poll_ms: 10
  breaker_failures: 1
  breaker_cooldown_ms: 100
retry: {base_ms: 1, max_ms: 1, max_attempts: 1}
`+minimal, noEnv)
	wantDispatch := config.DispatchConfig{
		Concurrency: 8, MaxInflight: 8, MaxInflightBytes: 16 << 20, AttemptTimeoutMs: 1_000,
		ScanBatch: 1, PollMs: 10, BreakerFailures: 1, BreakerCooldownMs: 100,
	}
	if c.Dispatch != wantDispatch {
		t.Fatalf("dispatch = %+v, want %+v", c.Dispatch, wantDispatch)
	}
	if wantRetry := (config.RetryConfig{BaseMs: 1, MaxMs: 1, MaxAttempts: 1}); c.Retry != wantRetry {
		t.Fatalf("retry = %+v, want %+v", c.Retry, wantRetry)
	}
}

// An explicit 0 on a new key is reported, not defaulted.
func TestExplicitZeroDispatchRetry(t *testing.T) {
	_, err := config.LoadBytes([]byte("dispatch: {concurrency: 0}\nretry: {max_attempts: 0}\n"+minimal), noEnv)
	wantViolation(t, err, "dispatch.concurrency", "must be between 1 and 1024, got 0")
	wantViolation(t, err, "retry.max_attempts", "must be between 1 and 10000, got 0")
}

func TestNullMeansDefault(t *testing.T) {
	c := mustLoad(t, "http:\n  port: ~\n  prefix:\n"+minimal, noEnv)
	if c.HTTP.Port != 4000 || c.HTTP.Prefix != "/webhooks" {
		t.Fatalf("null did not take the default: %+v", c.HTTP)
	}
}

// An explicit out-of-range value must be reported, not replaced by the
// default.
func TestExplicitZeroIsValidatedNotDefaulted(t *testing.T) {
	_, err := config.LoadBytes([]byte("batcher: {partitions: 0}\n"+minimal), noEnv)
	wantViolation(t, err, "batcher.partitions", "must be between 1 and 64, got 0")
}

func TestEnvOverrides(t *testing.T) {
	c := mustLoad(t, minimal, env(map[string]string{
		"ANKUSA_DATA_DIR":     "/var/lib/ankusa",
		"ANKUSA_INSTANCE":     "node-7",
		"ANKUSA_HTTP_PORT":    "8080",
		"ANKUSA_HTTP_IP":      "127.0.0.1",
		"ANKUSA_ADMIN_PORT":   "8081",
		"ANKUSA_ADMIN_IP":     "::1",
		"ANKUSA_WAL_TYPE":     "disk",
		"ANKUSA_LOG_LEVEL":    "debug",
		"ANKUSA_LOG_FORMAT":   "json",
		"ANKUSA_HTTP_ROUTING": "tenant_path",
	}))
	got := []any{c.Node.DataDir, c.Node.Instance, c.HTTP.Port, c.HTTP.IP, c.Admin.Port, c.Admin.IP,
		c.WAL.Type, c.Log.Level, c.Log.Format, c.HTTP.Routing}
	want := []any{"/var/lib/ankusa", "node-7", 8080, "127.0.0.1", 8081, "::1",
		"disk", "debug", "json", "tenant_path"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestEnvOverridesBeatFile(t *testing.T) {
	c := mustLoad(t, "http: {port: 5000}\n"+minimal, env(map[string]string{"ANKUSA_HTTP_PORT": "6000"}))
	if c.HTTP.Port != 6000 {
		t.Fatalf("port = %d, want 6000", c.HTTP.Port)
	}
}

func TestEmptyEnvOverrideIgnored(t *testing.T) {
	c := mustLoad(t, minimal, env(map[string]string{"ANKUSA_LOG_LEVEL": ""}))
	if c.Log.Level != "info" {
		t.Fatalf("level = %q", c.Log.Level)
	}
}

func TestBadEnvOverride(t *testing.T) {
	tests := []struct{ env, val, key, rule string }{
		{"ANKUSA_HTTP_PORT", "abc", "http.port", `ANKUSA_HTTP_PORT="abc": not an integer`},
		{"ANKUSA_ADMIN_PORT", "1.5", "admin.port", `ANKUSA_ADMIN_PORT="1.5": not an integer`},
		{"ANKUSA_HTTP_PORT", "70000", "http.port", "must be between 0 and 65535, got 70000 (set by ANKUSA_HTTP_PORT)"},
		{"ANKUSA_WAL_TYPE", "nil", "wal.type", `must be one of disk|dual|none, got "nil" (set by ANKUSA_WAL_TYPE)`},
		{"ANKUSA_INTAKE_TYPE", "pulsar", "intake.type", `must be one of memory|kafka|jetstream, got "pulsar" (set by ANKUSA_INTAKE_TYPE)`},
		{"ANKUSA_INTAKE_NODE_ID", "Node_A", "intake.node_id", `must match [a-z0-9._-]{1,64}, got "Node_A" (set by ANKUSA_INTAKE_NODE_ID)`},
	}
	for _, tt := range tests {
		t.Run(tt.env+"="+tt.val, func(t *testing.T) {
			_, err := config.LoadBytes([]byte(minimal), env(map[string]string{tt.env: tt.val}))
			wantViolation(t, err, tt.key, tt.rule)
		})
	}
}

// Env parse errors and validation errors are reported together.
func TestEnvAndValidationErrorsTogether(t *testing.T) {
	_, err := config.LoadBytes([]byte("log: {level: loud}\n"+minimal), env(map[string]string{"ANKUSA_HTTP_PORT": "x"}))
	errs := asErrors(t, err)
	if findKey(errs, "http.port") == nil || findKey(errs, "log.level") == nil {
		t.Fatalf("want both violations, got %v", err)
	}
}

func TestLoadNoFileReturnsDefault(t *testing.T) {
	t.Chdir(t.TempDir())
	c, err := config.Load("", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, config.Default()) {
		t.Fatalf("got %+v, want Default()", c)
	}
}

func TestLoadNoFileAppliesEnv(t *testing.T) {
	t.Chdir(t.TempDir())
	c, err := config.Load("", env(map[string]string{"ANKUSA_HTTP_PORT": "5001"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Port != 5001 || c.Sources["demo"].Sinks[0].ID != "log" {
		t.Fatalf("got %+v", c)
	}
}

func TestLoadFindsDefaultFile(t *testing.T) {
	t.Chdir(t.TempDir())
	writeFile(t, "ankusa.yml", "log: {level: debug}\n"+minimal)
	c, err := config.Load("", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "debug" {
		t.Fatalf("./ankusa.yml not used: level = %q", c.Log.Level)
	}
}

func TestLoadFromEnvPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	p := filepath.Join(dir, "other.yml")
	writeFile(t, p, "log: {format: json}\n"+minimal)
	writeFile(t, "ankusa.yml", "colour: red\n") // must be ignored
	c, err := config.Load("", env(map[string]string{"ANKUSA_CONFIG": p}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Format != "json" {
		t.Fatalf("ANKUSA_CONFIG not used: %+v", c.Log)
	}
}

func TestLoadNamedMissingFileIsError(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, tc := range []struct {
		name string
		path string
		env  map[string]string
	}{
		{"argument", "missing.yml", nil},
		{"ANKUSA_CONFIG", "", map[string]string{"ANKUSA_CONFIG": "missing.yml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(tc.path, env(tc.env))
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("got %v, want not-exist", err)
			}
		})
	}
}

func TestLoadErrorNamesFileAndKeepsErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	writeFile(t, "bad.yml", "http: {port: 99999}\n"+minimal)
	_, err := config.Load("bad.yml", noEnv)
	if err == nil || !strings.HasPrefix(err.Error(), "config bad.yml: http.port: must be between 0 and 65535") {
		t.Fatalf("got %v", err)
	}
	asErrors(t, err)
}

func TestDefaultValidatesClean(t *testing.T) {
	c := config.Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.WAL.Type != "disk" || c.Node.DataDir != "./data" || c.Node.Instance == "" {
		t.Fatalf("unexpected default: %+v", c)
	}
	s, ok := c.Sources["demo"]
	if !ok || s.Verify.Type != "none" || len(s.Sinks) != 1 || s.Sinks[0] != (config.SinkConfig{ID: "log", Type: "log"}) {
		t.Fatalf("unexpected demo source: %+v", c.Sources)
	}
}

func TestEmptyFileNeedsSources(t *testing.T) {
	_, err := config.LoadBytes(nil, noEnv)
	wantViolation(t, err, "sources", "at least one source is required")
}

func TestExitConfig(t *testing.T) {
	if config.ExitConfig != 78 {
		t.Fatalf("ExitConfig = %d", config.ExitConfig)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// backupOff is minimal with backups configured but off.
const backupOff = minimal + `
backup:
  enabled: false
  max_age_ms: 7200000
  primary: file:///var/backups/ankusa
  signing_key: 0123456789abcdef-test-key
`

// TestEnvBackupEnabled: ANKUSA_BACKUP_ENABLED (CONTRACTS) turns backups on
// and off; a value that is not a boolean names the variable.
func TestEnvBackupEnabled(t *testing.T) {
	c := mustLoad(t, backupOff, env(map[string]string{"ANKUSA_BACKUP_ENABLED": "true"}))
	if !c.Backup.Enabled {
		t.Fatal("ANKUSA_BACKUP_ENABLED=true left backup.enabled false")
	}
	_, err := config.LoadBytes([]byte(backupOff), env(map[string]string{"ANKUSA_BACKUP_ENABLED": "maybe"}))
	wantViolation(t, err, "backup.enabled", `ANKUSA_BACKUP_ENABLED="maybe": not a boolean`)
}

// TestUnknownEnvOverrideIsAnError: an ANKUSA_* variable the loader does not
// know is refused by name (a typo would otherwise be a silent no-op), while
// ANKUSA_CONFIG, the test suite's ANKUSA_TEST_* and variables the file
// interpolates stay valid.
func TestUnknownEnvOverrideIsAnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ankusa.yml")
	if err := os.WriteFile(path, []byte(minimal+"log: {level: \"${ANKUSA_MY_LEVEL}\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := []string{"PATH=/bin", "ANKUSA_CONFIG=" + path, "ANKUSA_MY_LEVEL=debug", "ANKUSA_HTTP_PORT=5002", "ANKUSA_TEST_NATS_URL=nats://127.0.0.1:4222"}
	c, err := config.LoadEnv("", ok)
	if err != nil {
		t.Fatalf("known overrides, ANKUSA_CONFIG and an interpolated variable: %v", err)
	}
	if c.Log.Level != "debug" || c.HTTP.Port != 5002 {
		t.Fatalf("log.level %q http.port %d, want debug and 5002", c.Log.Level, c.HTTP.Port)
	}
	_, err = config.LoadEnv("", append(ok, "ANKUSA_BAKUP_ENABLED=true"))
	wantViolation(t, err, "ANKUSA_BAKUP_ENABLED", "is not an environment override this version knows")
}
