package config_test

import (
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

// withDedupe returns allSinks() whose demo source dedupes on a header, so
// the per-source dedupe keys and every sink block's keys exist.
func withDedupe() *config.Config {
	c := allSinks()
	s := c.Sources["demo"]
	s.Dedupe = &config.SourceDedupe{Header: "X-Id", TTLSeconds: 3600}
	c.Sources["demo"] = s
	return c
}

func TestNumericRanges(t *testing.T) {
	tests := []rangeCase{
		{"http.port", 0, 65535, func(c *config.Config, v int64) { c.HTTP.Port = int(v) }},
		{"http.max_body_bytes", 1, 100_000_000, func(c *config.Config, v int64) { c.HTTP.MaxBodyBytes = v }},
		{"http.max_header_bytes", 1_024, 1_048_576, func(c *config.Config, v int64) { c.HTTP.MaxHeaderBytes = int(v) }},
		{"http.read_timeout_ms", 100, 600_000, func(c *config.Config, v int64) { c.HTTP.ReadTimeoutMs = int(v) }},
		{"http.max_inflight_body_bytes", 8_000_000, 16 << 30, func(c *config.Config, v int64) { c.HTTP.MaxInflightBodyBytes = v }},
		{"http.max_conns", 1, 1_000_000, func(c *config.Config, v int64) { c.HTTP.MaxConns = int(v) }},
		{"http.max_conns_per_ip", 0, 1_000_000, func(c *config.Config, v int64) { c.HTTP.MaxConnsPerIP = int(v) }},
		{"http.idle_timeout_ms", 1_000, 3_600_000, func(c *config.Config, v int64) { c.HTTP.IdleTimeoutMs = int(v) }},
		{"http.shutdown_timeout_ms", 100, 600_000, func(c *config.Config, v int64) { c.HTTP.ShutdownTimeoutMs = int(v) }},
		{"node.fd_reserve", 64, 1_000_000, func(c *config.Config, v int64) { c.Node.FDReserve = int(v) }},
		{"admin.port", 0, 65535, func(c *config.Config, v int64) { c.Admin.Port = int(v) }},
		{"admin.read_timeout_ms", 100, 600_000, func(c *config.Config, v int64) { c.Admin.ReadTimeoutMs = int(v) }},
		{"admin.idle_timeout_ms", 1_000, 3_600_000, func(c *config.Config, v int64) { c.Admin.IdleTimeoutMs = int(v) }},
		{"admin.max_conns", 1, 100_000, func(c *config.Config, v int64) { c.Admin.MaxConns = int(v) }},
		{"batcher.partitions", 1, 64, func(c *config.Config, v int64) { c.Batcher.Partitions = int(v) }},
		{"batcher.max_batch", 1, 10_000, func(c *config.Config, v int64) { c.Batcher.MaxBatch = int(v) }},
		{"batcher.max_delay_ms", 0, 1_000, func(c *config.Config, v int64) { c.Batcher.MaxDelayMs = int(v) }},
		{"batcher.max_queue", 1, 1_000_000, func(c *config.Config, v int64) { c.Batcher.MaxQueue = int(v) }},
		{"batcher.max_queue_bytes", 1 << 20, 16 << 30, func(c *config.Config, v int64) { c.Batcher.MaxQueueBytes = v }},
		{"batcher.deadline_ms", 100, 120_000, func(c *config.Config, v int64) { c.Batcher.DeadlineMs = int(v) }},
		{"dedupe.sweep_interval_ms", 1_000, 3_600_000, func(c *config.Config, v int64) { c.Dedupe.SweepIntervalMs = int(v) }},
		{"dedupe.sweep_batch", 1, 100_000, func(c *config.Config, v int64) { c.Dedupe.SweepBatch = int(v) }},
		{"sources.demo.dedupe.ttl_seconds", 1, 31_536_000, func(c *config.Config, v int64) { c.Sources["demo"].Dedupe.TTLSeconds = int(v) }},
		{"dispatch.concurrency", 1, 1_024, func(c *config.Config, v int64) { c.Dispatch.Concurrency = int(v) }},
		{"dispatch.max_inflight", 1, 100_000, func(c *config.Config, v int64) { c.Dispatch.MaxInflight = int(v) }},
		{"dispatch.max_inflight_bytes", 1 << 20, 16 << 30, func(c *config.Config, v int64) { c.Dispatch.MaxInflightBytes = v }},
		{"dispatch.attempt_timeout_ms", 100, 600_000, func(c *config.Config, v int64) { c.Dispatch.AttemptTimeoutMs = int(v) }},
		{"dispatch.scan_batch", 1, 10_000, func(c *config.Config, v int64) { c.Dispatch.ScanBatch = int(v) }},
		{"dispatch.poll_ms", 10, 60_000, func(c *config.Config, v int64) { c.Dispatch.PollMs = int(v) }},
		{"dispatch.breaker_failures", 1, 1_000, func(c *config.Config, v int64) { c.Dispatch.BreakerFailures = int(v) }},
		{"dispatch.breaker_cooldown_ms", 100, 3_600_000, func(c *config.Config, v int64) { c.Dispatch.BreakerCooldownMs = int(v) }},
		{"retry.base_ms", 1, 3_600_000, func(c *config.Config, v int64) { c.Retry.BaseMs = int(v) }},
		{"retry.max_ms", 1, 86_400_000, func(c *config.Config, v int64) { c.Retry.MaxMs = int(v) }},
		{"retry.max_attempts", 1, 10_000, func(c *config.Config, v int64) { c.Retry.MaxAttempts = int(v) }},
		{"sources.demo.sinks[1].http.timeout_ms", 100, 600_000, func(c *config.Config, v int64) { c.Sources["demo"].Sinks[1].HTTP.TimeoutMs = int(v) }},
		{"sources.demo.sinks[2].kafka.timeout_ms", 100, 600_000, func(c *config.Config, v int64) { c.Sources["demo"].Sinks[2].Kafka.TimeoutMs = int(v) }},
		{"sources.demo.sinks[3].nats.timeout_ms", 100, 600_000, func(c *config.Config, v int64) { c.Sources["demo"].Sinks[3].NATS.TimeoutMs = int(v) }},
		{"sources.demo.sinks[4].rabbitmq.timeout_ms", 100, 600_000, func(c *config.Config, v int64) { c.Sources["demo"].Sinks[4].RabbitMQ.TimeoutMs = int(v) }},
	}
	runRanges(t, withDedupe, tests)
}

func TestSecretCount(t *testing.T) {
	c := config.Default()
	s := c.Sources["demo"]
	s.Verify.Type = "github"
	s.Verify.Secret = []string{"1", "2", "3", "4", "5", "6", "7", "8"}
	c.Sources["demo"] = s
	if err := c.Validate(); err != nil {
		t.Fatalf("8 secrets refused: %v", err)
	}
	s.Verify.Secret = append(s.Verify.Secret, "9")
	c.Sources["demo"] = s
	wantViolation(t, c.Validate(), "sources.demo.verify.secret", "must have at most 8 entries, got 9")
}

func TestRules(t *testing.T) {
	src := func(c *config.Config, f func(s *config.SourceConfig)) {
		s := c.Sources["demo"]
		f(&s)
		c.Sources["demo"] = s
	}
	tests := []ruleCase{ // key "" means the config must be valid
		{"routing tenant_path", func(c *config.Config) { c.HTTP.Routing = "tenant_path" }, "", ""},
		{"routing bad", func(c *config.Config) { c.HTTP.Routing = "host" }, "http.routing", `must be one of path|tenant_path, got "host"`},
		{"log level debug", func(c *config.Config) { c.Log.Level = "debug" }, "", ""},
		{"log level bad", func(c *config.Config) { c.Log.Level = "trace" }, "log.level", `must be one of debug|info|warn|error, got "trace"`},
		{"log format json", func(c *config.Config) { c.Log.Format = "json" }, "", ""},
		{"log format bad", func(c *config.Config) { c.Log.Format = "xml" }, "log.format", `got "xml"`},
		{"log level empty", func(c *config.Config) { c.Log.Level = "" }, "log.level", "must be set (one of debug|info|warn|error)"},
		{"wal dual needs intake", func(c *config.Config) { c.WAL.Type = "dual" }, "intake.type", "required when wal.type is dual"},
		{"wal none", func(c *config.Config) { c.WAL.Type = "none" }, "", ""},
		{"wal none with node-scope dedupe", func(c *config.Config) {
			c.WAL.Type = "none"
			src(c, func(s *config.SourceConfig) { s.Dedupe = &config.SourceDedupe{Header: "X-Id", TTLSeconds: 60} })
		}, "sources.demo.dedupe", "needs dedupe.scope: fleet when wal.type is none"},
		{"wal none with fleet dedupe", func(c *config.Config) {
			c.WAL.Type, c.Dedupe.Scope, c.Fleet.Redis.URL = "none", "fleet", "redis://127.0.0.1:6379"
			src(c, func(s *config.SourceConfig) { s.Dedupe = &config.SourceDedupe{Header: "X-Id", TTLSeconds: 60} })
		}, "", ""},
		{"wal typo", func(c *config.Config) { c.WAL.Type = "dsk" }, "wal.type", `must be one of disk|dual|none, got "dsk"`},
		{"dedupe scope typo", func(c *config.Config) { c.Dedupe.Scope = "global" }, "dedupe.scope", `must be one of node|fleet, got "global"`},
		{"fleet needs a redis url", func(c *config.Config) { c.Dedupe.Scope = "fleet" }, "fleet.redis.url", "required when dedupe.scope is fleet"},
		{"fleet redis url scheme", func(c *config.Config) {
			c.Dedupe.Scope, c.Fleet.Redis.URL = "fleet", "http://:hunter2@127.0.0.1:6379"
		}, "fleet.redis.url", "must be a redis:// or rediss:// URL with a host"},
		{"fleet valid", func(c *config.Config) { c.Dedupe.Scope, c.Fleet.Redis.URL = "fleet", "redis://127.0.0.1:6379/0" }, "", ""},
		{"fleet pending ttl range", func(c *config.Config) {
			c.Dedupe.Scope, c.Fleet.Redis.URL, c.Fleet.PendingTTLMs = "fleet", "redis://127.0.0.1:6379", 999
		}, "fleet.pending_ttl_ms", "must be between 1000 and 600000, got 999"},
		{"fleet key prefix", func(c *config.Config) {
			c.Dedupe.Scope, c.Fleet.Redis.URL, c.Fleet.KeyPrefix = "fleet", "redis://127.0.0.1:6379", "a b"
		}, "fleet.key_prefix", "must match"},
		{"verify type typo", func(c *config.Config) { src(c, func(s *config.SourceConfig) { s.Verify.Type = "hmca" }) }, "sources.demo.verify.type", `, got "hmca"`},
		{"sink type", func(c *config.Config) { src(c, func(s *config.SourceConfig) { s.Sinks[0].Type = "smtp" }) }, "sources.demo.sinks[0].type", `must be one of log|http|kafka|nats|rabbitmq, got "smtp"`},
		{"role bad", func(c *config.Config) { c.Node.Roles = []string{"ingest", "relay"} }, "node.roles[1]", `got "relay"`},
		{"role duplicate", func(c *config.Config) { c.Node.Roles = []string{"ingest", "ingest"} }, "node.roles[1]", `duplicate role "ingest"`},
		{"roles empty", func(c *config.Config) { c.Node.Roles = nil }, "node.roles", "at least one role"},
		{"instance empty", func(c *config.Config) { c.Node.Instance = "" }, "node.instance", "must not be empty"},
		{"data dir empty", func(c *config.Config) { c.Node.DataDir = "" }, "node.data_dir", "must not be empty"},
		{"http ip bad", func(c *config.Config) { c.HTTP.IP = "localhost" }, "http.ip", `must be an IP address, got "localhost"`},
		{"admin ip bad", func(c *config.Config) { c.Admin.IP = "" }, "admin.ip", "must be an IP address"},
		{"prefix no slash", func(c *config.Config) { c.HTTP.Prefix = "hooks" }, "http.prefix", `must start with "/"`},
		{"prefix trailing slash", func(c *config.Config) { c.HTTP.Prefix = "/hooks/" }, "http.prefix", `must not end with "/"`},
		{"prefix root", func(c *config.Config) { c.HTTP.Prefix = "/" }, "http.prefix", `must not end with "/"`},
		{"prefix nested", func(c *config.Config) { c.HTTP.Prefix = "/a/b" }, "", ""},
		{"source id bad", func(c *config.Config) { c.Sources["a b"] = c.Sources["demo"] }, "sources.a b", "source id must match"},
		{"source id too long", func(c *config.Config) { c.Sources[strings.Repeat("a", 65)] = c.Sources["demo"] }, "sources." + strings.Repeat("a", 65), "source id must match"},
		{"source id 64", func(c *config.Config) { c.Sources[strings.Repeat("A", 64)] = c.Sources["demo"] }, "", ""},
		{"tenant ok", func(c *config.Config) { src(c, func(s *config.SourceConfig) { s.Tenant = "Acme_1" }) }, "", ""},
		{"tenant bad", func(c *config.Config) { src(c, func(s *config.SourceConfig) { s.Tenant = "acme/1" }) }, "sources.demo.tenant", "must match"},
		{"tenants ok", func(c *config.Config) {
			c.HTTP.Routing = "tenant_path"
			src(c, func(s *config.SourceConfig) { s.Tenants = []string{"acme", "globex"} })
		}, "", ""},
		{"tenants under path routing", func(c *config.Config) { src(c, func(s *config.SourceConfig) { s.Tenants = []string{"acme"} }) },
			"sources.demo.tenants", "applies only with http.routing: tenant_path"},
		{"tenants with tenant", func(c *config.Config) {
			c.HTTP.Routing = "tenant_path"
			src(c, func(s *config.SourceConfig) { s.Tenant, s.Tenants = "acme", []string{"acme"} })
		}, "sources.demo.tenants", "must be empty when tenant is set"},
		{"tenants bad id", func(c *config.Config) {
			c.HTTP.Routing = "tenant_path"
			src(c, func(s *config.SourceConfig) { s.Tenants = []string{"acme", "a b"} })
		}, "sources.demo.tenants[1]", "must match"},
		{"tenants duplicate", func(c *config.Config) {
			c.HTTP.Routing = "tenant_path"
			src(c, func(s *config.SourceConfig) { s.Tenants = []string{"acme", "acme"} })
		}, "sources.demo.tenants[1]", `duplicate tenant "acme"`},
		{"no sources", func(c *config.Config) { c.Sources = nil }, "sources", "at least one source is required"},
		{"no sinks", func(c *config.Config) { src(c, func(s *config.SourceConfig) { s.Sinks = nil }) }, "sources.demo.sinks", "at least one sink is required"},
		{"sink id bad", func(c *config.Config) { src(c, func(s *config.SourceConfig) { s.Sinks[0].ID = "Log" }) }, "sources.demo.sinks[0].id", `must match [a-z0-9_-]{1,32}, got "Log"`},
		{"sink id duplicate", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) { s.Sinks = append(s.Sinks, config.SinkConfig{ID: "log", Type: "log"}) })
		}, "sources.demo.sinks[1].id", `duplicate sink id "log"`},
		{"two sinks distinct", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) { s.Sinks = append(s.Sinks, config.SinkConfig{ID: "audit", Type: "log"}) })
		}, "", ""},
		{"dedupe none", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) { s.Dedupe = &config.SourceDedupe{TTLSeconds: 60} })
		}, "sources.demo.dedupe", "exactly one of preset, header, json is required, got none"},
		{"dedupe two", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) {
				s.Dedupe = &config.SourceDedupe{Preset: "github", JSON: "id", TTLSeconds: 60}
			})
		}, "sources.demo.dedupe", "got preset and json"},
		{"dedupe preset ok", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) {
				s.Dedupe = &config.SourceDedupe{Preset: "standard_webhooks", TTLSeconds: 60}
			})
		}, "", ""},
		{"dedupe preset bad", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) { s.Dedupe = &config.SourceDedupe{Preset: "bitbucket", TTLSeconds: 60} })
		}, "sources.demo.dedupe.preset", `must be one of github|standard_webhooks|svix|shopify|stripe|slack|discord|twilio|paddle|linear|square|intercom|gitlab|pagerduty|mailgun, got "bitbucket"`},
		{"dedupe header bad", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) { s.Dedupe = &config.SourceDedupe{Header: "X Id", TTLSeconds: 60} })
		}, "sources.demo.dedupe.header", "must be an HTTP header name"},
		{"dedupe json ok", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) { s.Dedupe = &config.SourceDedupe{JSON: "data.id", TTLSeconds: 60} })
		}, "", ""},
		{"dedupe json bad", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) { s.Dedupe = &config.SourceDedupe{JSON: "data..id", TTLSeconds: 60} })
		}, "sources.demo.dedupe.json", "must be a dotted path"},
		{"empty secret", func(c *config.Config) {
			src(c, func(s *config.SourceConfig) { s.Verify.Type, s.Verify.Secret = "github", []string{""} })
		}, "sources.demo.verify.secret[0]", "must not be empty"},
	}
	runRules(t, config.Default, tests)
}

func TestCrossKeyRules(t *testing.T) {
	tests := []ruleCase{
		{"same port same ip", func(c *config.Config) {
			c.HTTP.IP, c.Admin.IP, c.HTTP.Port, c.Admin.Port = "127.0.0.1", "127.0.0.1", 4000, 4000
		},
			"admin.port", "must differ from http.port (4000)"},
		{"same port wildcard", func(c *config.Config) { c.Admin.Port = 4000 }, // 0.0.0.0 covers 127.0.0.1
			"admin.port", "must differ from http.port (4000)"},
		{"same port v6 wildcard", func(c *config.Config) { c.HTTP.IP, c.Admin.Port = "::", 4000 },
			"admin.port", "must differ from http.port"},
		{"same port different ip", func(c *config.Config) { c.HTTP.IP, c.Admin.Port = "10.0.0.1", 4000 }, "", ""},
		{"both zero", func(c *config.Config) { c.HTTP.Port, c.Admin.Port = 0, 0 }, "", ""},
		{"batch over queue", func(c *config.Config) { c.Batcher.MaxBatch, c.Batcher.MaxQueue = 500, 100 },
			"batcher.max_batch", "must be at most batcher.max_queue (100), got 500"},
		{"batch equals queue", func(c *config.Config) { c.Batcher.MaxBatch, c.Batcher.MaxQueue = 100, 100 }, "", ""},
		{"queue bytes under body", func(c *config.Config) { c.Batcher.MaxQueueBytes, c.HTTP.MaxBodyBytes = 2<<20, 3<<20 },
			"batcher.max_queue_bytes", "must be at least http.max_body_bytes (3145728), got 2097152"},
		{"queue bytes equals body", func(c *config.Config) { c.Batcher.MaxQueueBytes, c.HTTP.MaxBodyBytes = 2<<20, 2<<20 }, "", ""},
		{"inflight under concurrency", func(c *config.Config) { c.Dispatch.Concurrency, c.Dispatch.MaxInflight = 64, 63 },
			"dispatch.max_inflight", "must be at least dispatch.concurrency (64), got 63"},
		{"inflight equals concurrency", func(c *config.Config) { c.Dispatch.Concurrency, c.Dispatch.MaxInflight = 64, 64 }, "", ""},
		// A body larger than the inflight budget is claimed alone.
		{"inflight bytes under body", func(c *config.Config) { c.Dispatch.MaxInflightBytes, c.HTTP.MaxBodyBytes = 1<<20, 100_000_000 }, "", ""},
		{"retry max under base", func(c *config.Config) { c.Retry.BaseMs, c.Retry.MaxMs = 1_000, 999 },
			"retry.max_ms", "must be at least retry.base_ms (1000), got 999"},
		{"retry max equals base", func(c *config.Config) { c.Retry.BaseMs, c.Retry.MaxMs = 1_000, 1_000 }, "", ""},
	}
	runRules(t, config.Default, tests)
}

// A cross-key rule stays quiet when one side already failed its own rule.
func TestCrossKeyQuietWhenSideInvalid(t *testing.T) {
	runQuiet(t, config.Default, []quietCase{
		{"batcher.max_queue", func(c *config.Config) { c.Batcher.MaxQueue = 0 }},
		{"dispatch.concurrency", func(c *config.Config) { c.Dispatch.Concurrency = 2_000 }},
		{"retry.base_ms", func(c *config.Config) { c.Retry.BaseMs = 4_000_000 }},
	})
}

func TestAllViolationsInOnePass(t *testing.T) {
	yml := `
http: {port: 70000, routing: host, prefix: "hooks/"}
log: {level: loud}
wal: {type: dual}
batcher: {partitions: 0}
sources:
  demo:
    sinks: []
  "bad id!":
    verify: {type: hmca}
    sinks: [{type: log}, {type: log}]
`
	_, err := config.LoadBytes([]byte(yml), noEnv)
	errs := asErrors(t, err)
	want := []string{
		"http.port", "http.routing", "http.prefix", "log.level", "batcher.partitions", "intake.type", "intake.node_id",
		"backup.enabled", "sources.bad id!", "sources.bad id!.verify.type", "sources.bad id!.sinks[1].id", "sources.demo.sinks",
	}
	for _, k := range want {
		if findKey(errs, k) == nil {
			t.Errorf("missing violation for %q", k)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("got %d violations, want %d: %v", len(errs), len(want), err)
	}
	if !strings.Contains(err.Error(), "; ") {
		t.Errorf("violations not joined with \"; \": %q", err)
	}
}

func TestErrorFormat(t *testing.T) {
	errs := config.Errors{
		{Key: "a.b", Rule: "must be between 1 and 64, got 0"},
		{Key: "c", Rule: "unknown key"},
	}
	if got, want := errs.Error(), "a.b: must be between 1 and 64, got 0; c: unknown key"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
