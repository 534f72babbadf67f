package config_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

// dualMemory is Default() switched to wal.type: dual on the memory intake,
// with a memory block so every intake key exists.
func dualMemory() *config.Config {
	c := config.Default()
	c.WAL.Type = "dual"
	c.Intake.Type = "memory"
	c.Intake.NodeID = "node-a"
	c.Intake.Memory = &config.IntakeMemory{}
	c.Backup = testBackup
	return c
}

// testBackup is a valid backup block: dual requires one.
var testBackup = config.BackupConfig{
	Enabled: true, IntervalMs: 60_000, MaxAgeMs: 3_600_000, Keep: 3,
	Primary: "file:///tmp/ankusa-backups", SigningKey: "0123456789abcdef",
}

const backupYAML = "backup: {enabled: true, primary: \"file:///tmp/ankusa-backups\", signing_key: \"0123456789abcdef\"}\n"

// diskWithIntake is Default() (wal.type: disk) with the same intake block,
// which disk ignores but still range-checks.
func diskWithIntake() *config.Config {
	c := dualMemory()
	c.WAL.Type = "disk"
	return c
}

const dualMemoryYAML = `
wal: {type: dual}
intake:
  type: memory
  node_id: node-a
  memory: {path: /tmp/ankusa-intake, confirm_latency_ms: 5}
` + backupYAML + minimal

func TestIntakeDualMemoryValidates(t *testing.T) {
	if err := dualMemory().Validate(); err != nil {
		t.Fatalf("dual + memory: %v", err)
	}
	c := mustLoad(t, dualMemoryYAML, noEnv)
	if c.WAL.Type != "dual" || c.Intake.Type != "memory" || c.Intake.NodeID != "node-a" ||
		c.Intake.Memory == nil || c.Intake.Memory.ConfirmLatencyMs != 5 {
		t.Fatalf("intake not loaded: %+v", c.Intake)
	}
	// The memory block is optional: its path has a default.
	mustLoad(t, "wal: {type: dual}\n"+backupYAML+"intake: {type: memory, node_id: node-a}\n"+minimal, noEnv)
}

func TestIntakeRanges(t *testing.T) {
	tests := []rangeCase{
		{"intake.publish_timeout_ms", 100, 60_000, func(c *config.Config, v int64) { c.Intake.PublishTimeoutMs = int(v) }},
		{"intake.reconcile_deadline_ms", 1_000, 600_000, func(c *config.Config, v int64) { c.Intake.ReconcileDeadlineMs = int(v) }},
		{"intake.breaker_failures", 1, 100, func(c *config.Config, v int64) { c.Intake.BreakerFailures = int(v) }},
		{"intake.probe_ms", 100, 60_000, func(c *config.Config, v int64) { c.Intake.ProbeMs = int(v) }},
		{"intake.retry_after_s", 1, 300, func(c *config.Config, v int64) { c.Intake.RetryAfterS = int(v) }},
		{"intake.offset_flush_ms", 100, 60_000, func(c *config.Config, v int64) { c.Intake.OffsetFlushMs = int(v) }},
		{"intake.max_record_bytes", 65_537, 1 << 30, func(c *config.Config, v int64) { c.Intake.MaxRecordBytes = v }},
		{"intake.pending.max_records", 1, 10_000_000, func(c *config.Config, v int64) { c.Intake.Pending.MaxRecords = int(v) }},
		{"intake.pending.max_bytes", 1 << 20, 64 << 30, func(c *config.Config, v int64) { c.Intake.Pending.MaxBytes = v }},
		{"intake.memory.confirm_latency_ms", 0, 60_000, func(c *config.Config, v int64) { c.Intake.Memory.ConfirmLatencyMs = int(v) }},
	}
	// Ranges hold under disk too, so a typo is caught before dual is on.
	for _, mode := range []struct {
		name string
		base func() *config.Config
	}{{"dual", dualMemory}, {"disk", diskWithIntake}} {
		t.Run(mode.name, func(t *testing.T) { runRanges(t, mode.base, tests) })
	}
}

// An explicit out-of-range intake value in the file is reported, not
// replaced by its default, even under disk.
func TestIntakeExplicitZeroReported(t *testing.T) {
	_, err := config.LoadBytes([]byte("intake: {breaker_failures: 0, pending: {max_records: 0}}\n"+minimal), noEnv)
	wantViolation(t, err, "intake.breaker_failures", "must be between 1 and 100, got 0")
	wantViolation(t, err, "intake.pending.max_records", "must be between 1 and 10000000, got 0")
}

func TestIntakeRules(t *testing.T) {
	tests := []ruleCase{ // key "" means the config must be valid
		// What dual requires.
		{"dual without type", func(c *config.Config) { c.Intake.Type = ""; c.Intake.Memory = nil }, "intake.type", "required when wal.type is dual (supported: memory|kafka|jetstream)"},
		{"dual without node id", func(c *config.Config) { c.Intake.NodeID = "" }, "intake.node_id", "required when wal.type is dual"},
		{"disk without type or node id", func(c *config.Config) {
			c.WAL.Type, c.Intake.Type, c.Intake.NodeID, c.Intake.Memory = "disk", "", "", nil
		}, "", ""},

		// intake.type.
		{"type kafka without its block", func(c *config.Config) { c.Intake.Type = "kafka"; c.Intake.Memory = nil }, "intake.kafka", "required when intake.type is kafka"},
		{"type jetstream without its block", func(c *config.Config) { c.Intake.Type = "jetstream"; c.Intake.Memory = nil }, "intake.jetstream", "required when intake.type is jetstream"},
		{"type kafka", func(c *config.Config) {
			c.Intake.Type, c.Intake.Memory, c.Intake.Kafka = "kafka", nil, &config.IntakeKafka{Brokers: []string{"k1:9092"}}
		}, "", ""},
		{"kafka broker without port", func(c *config.Config) {
			c.Intake.Type, c.Intake.Memory, c.Intake.Kafka = "kafka", nil, &config.IntakeKafka{Brokers: []string{"k1"}}
		}, "intake.kafka.brokers[0]", "must be host:port"},
		{"type jetstream", func(c *config.Config) {
			c.Intake.Type, c.Intake.Memory, c.Intake.JetStream = "jetstream", nil, &config.IntakeJetStream{URL: "nats://n1:4222", Stream: "ANKUSA_INTAKE"}
		}, "", ""},
		{"jetstream without stream", func(c *config.Config) {
			c.Intake.Type, c.Intake.Memory, c.Intake.JetStream = "jetstream", nil, &config.IntakeJetStream{URL: "nats://n1:4222"}
		}, "intake.jetstream.stream", "required"},
		{"kafka block on a memory intake", func(c *config.Config) { c.Intake.Kafka = &config.IntakeKafka{Brokers: []string{"k:1"}} }, "intake.kafka", "only allowed when intake.type is kafka"},
		{"type typo", func(c *config.Config) { c.Intake.Type = "memroy" }, "intake.type", `must be one of memory|kafka|jetstream, got "memroy"`},
		{"type memory under disk", func(c *config.Config) { c.WAL.Type = "disk" }, "", ""},

		// The memory block belongs to intake.type: memory.
		{"memory block with kafka", func(c *config.Config) { c.Intake.Type = "kafka" }, "intake.memory", "only allowed when intake.type is memory (intake.type is kafka)"},
		{"memory block without type", func(c *config.Config) { c.WAL.Type, c.Intake.Type = "disk", "" }, "intake.memory", "only allowed when intake.type is memory (intake.type is not set)"},
		{"memory block no path", func(c *config.Config) { c.Intake.Memory = &config.IntakeMemory{} }, "", ""},
		{"memory path inside store", func(c *config.Config) {
			c.Node.DataDir, c.Intake.Memory.Path = "/var/lib/ankusa", "/var/lib/ankusa/store/intake"
		}, "intake.memory.path", "must not be inside the store directory /var/lib/ankusa/store"},
		{"memory path is store", func(c *config.Config) {
			c.Node.DataDir, c.Intake.Memory.Path = "/var/lib/ankusa", "/var/lib/ankusa/store/"
		}, "intake.memory.path", "must not be inside the store directory"},
		{"memory path beside store", func(c *config.Config) {
			c.Node.DataDir, c.Intake.Memory.Path = "/var/lib/ankusa", "/var/lib/ankusa/storeroom"
		}, "", ""},
		{"memory path elsewhere", func(c *config.Config) { c.Intake.Memory.Path = "/mnt/shared/intake" }, "", ""},

		// Dual keeps every role.
		{"dual ingest only", func(c *config.Config) { c.Node.Roles = []string{"ingest"} }, "node.roles", "must include ingest and dispatch when wal.type is dual, missing dispatch"},
		{"dual dispatch only", func(c *config.Config) { c.Node.Roles = []string{"dispatch"} }, "node.roles", "missing ingest"},
		{"disk ingest only", func(c *config.Config) { c.WAL.Type, c.Node.Roles = "disk", []string{"ingest"} }, "", ""},
	}
	runRules(t, dualMemory, tests)
}

// Without intake.type and intake.node_id, dual is refused by a file, naming
// both keys in one pass.
func TestIntakeDualRequiresTypeAndNodeID(t *testing.T) {
	_, err := config.LoadBytes([]byte("wal: {type: dual}\n"+backupYAML+minimal), noEnv)
	errs := asErrors(t, err)
	wantViolation(t, err, "intake.type", "required when wal.type is dual")
	wantViolation(t, err, "intake.node_id", "required when wal.type is dual")
	if len(errs) != 2 {
		t.Fatalf("want exactly the two missing keys, got %v", err)
	}
}

func TestIntakeNames(t *testing.T) {
	ok := []string{"a", "node-a", "node_a", "n.1-x_2", "0", strings.Repeat("a", 64), "a.b.c"}
	bad := map[string]string{
		"Node-A":                "must match [a-z0-9._-]{1,64}",
		"node a":                "must match",
		"node/a":                "must match",
		"node*":                 "must match",
		"nöde":                  "must match",
		strings.Repeat("a", 65): "must match",
		".a":                    `must not start or end with "."`,
		"a.":                    `must not start or end with "."`,
		"a..b":                  `contain ".."`,
		".":                     `must not start or end with "."`,
		"node-a\n":              "must match",
		strings.Repeat("é", 10): "must match",
	}
	for _, key := range []string{"intake.node_id", "intake.fleet"} {
		set := func(c *config.Config, s string) {
			if key == "intake.node_id" {
				c.Intake.NodeID = s
			} else {
				c.Intake.Fleet = s
			}
		}
		for _, s := range ok {
			t.Run(key+"="+s, func(t *testing.T) {
				c := dualMemory()
				set(c, s)
				if err := c.Validate(); err != nil {
					t.Fatalf("want valid, got %v", err)
				}
			})
		}
		for s, rule := range bad {
			t.Run(fmt.Sprintf("%s=%q", key, s), func(t *testing.T) {
				c := dualMemory()
				set(c, s)
				wantViolation(t, c.Validate(), key, rule)
				// The alphabet holds under disk too.
				c.WAL.Type = "disk"
				wantViolation(t, c.Validate(), key, rule)
			})
		}
	}
	// fleet has a default, so an explicit empty one is a mistake.
	c := dualMemory()
	c.Intake.Fleet = ""
	wantViolation(t, c.Validate(), "intake.fleet", `must match [a-z0-9._-]{1,64}, got ""`)
}

func TestIntakeCrossKeyRules(t *testing.T) {
	tests := []ruleCase{
		{"publish timeout equals deadline", func(c *config.Config) { c.Intake.PublishTimeoutMs, c.Batcher.DeadlineMs = 15_000, 15_000 },
			"intake.publish_timeout_ms", "must be less than batcher.deadline_ms (15000) when wal.type is dual, got 15000"},
		{"publish timeout over deadline", func(c *config.Config) { c.Batcher.DeadlineMs = 1_000 },
			"intake.publish_timeout_ms", "must be less than batcher.deadline_ms (1000) when wal.type is dual, got 2000"},
		{"publish timeout under deadline", func(c *config.Config) { c.Intake.PublishTimeoutMs, c.Batcher.DeadlineMs = 14_999, 15_000 }, "", ""},
		{"record under body + 65536", func(c *config.Config) { c.HTTP.MaxBodyBytes, c.Intake.MaxRecordBytes = 10_000_000, 10_065_535 },
			"intake.max_record_bytes", "must be at least http.max_body_bytes + 65536 (10065536) when wal.type is dual, got 10065535"},
		{"record equals body + 65536", func(c *config.Config) { c.HTTP.MaxBodyBytes, c.Intake.MaxRecordBytes = 10_000_000, 10_065_536 }, "", ""},
		{"default record under max body", func(c *config.Config) { c.HTTP.MaxBodyBytes = 100_000_000 },
			"intake.max_record_bytes", "must be at least http.max_body_bytes + 65536 (100065536) when wal.type is dual, got 10000000"},
		{"pending bytes under record", func(c *config.Config) { c.Intake.Pending.MaxBytes, c.Intake.MaxRecordBytes = 8<<20, 8<<20+1 },
			"intake.pending.max_bytes", "must be at least intake.max_record_bytes (8388609) when wal.type is dual, got 8388608"},
		{"pending bytes equals record", func(c *config.Config) {
			c.HTTP.MaxBodyBytes, c.Intake.Pending.MaxBytes, c.Intake.MaxRecordBytes = 1<<20, 8<<20, 8<<20
		}, "", ""},
		// Under disk the intake block is ignored: keys the operator never
		// wrote must not refuse a disk config.
		{"disk: default record under max body", func(c *config.Config) { c.WAL.Type, c.HTTP.MaxBodyBytes = "disk", 100_000_000 }, "", ""},
		{"disk: publish timeout over deadline", func(c *config.Config) { c.WAL.Type, c.Batcher.DeadlineMs = "disk", 1_000 }, "", ""},
		{"disk: pending bytes under record", func(c *config.Config) {
			c.WAL.Type, c.Intake.Pending.MaxBytes, c.Intake.MaxRecordBytes = "disk", 1<<20, 8<<20
		}, "", ""},
	}
	runRules(t, dualMemory, tests)
}

// A cross-key rule stays quiet when one side already failed its own rule.
func TestIntakeCrossKeyQuietWhenSideInvalid(t *testing.T) {
	runQuiet(t, dualMemory, []quietCase{
		{"batcher.deadline_ms", func(c *config.Config) { c.Batcher.DeadlineMs = 50 }},
		{"intake.publish_timeout_ms", func(c *config.Config) { c.Intake.PublishTimeoutMs = 99_999 }},
		{"http.max_body_bytes", func(c *config.Config) { c.HTTP.MaxBodyBytes = 200_000_000; c.Batcher.MaxQueueBytes = 1 << 30 }},
		{"intake.max_record_bytes", func(c *config.Config) { c.Intake.MaxRecordBytes = 2 << 30 }},
		{"intake.pending.max_bytes", func(c *config.Config) { c.Intake.Pending.MaxBytes = 1 }},
	})
}

func TestIntakeDefaults(t *testing.T) {
	want := config.IntakeConfig{
		Fleet:               "default",
		PublishTimeoutMs:    2_000,
		ReconcileDeadlineMs: 20_000,
		BreakerFailures:     3,
		ProbeMs:             1_000,
		RetryAfterS:         2,
		OffsetFlushMs:       1_000,
		MaxRecordBytes:      10_000_000,
		RecoverOnBoot:       new(true),
		VerifyTopic:         new(true),
		Pending:             config.IntakePending{MaxRecords: 50_000, MaxBytes: 256 << 20},
	}
	if got := mustLoad(t, minimal, noEnv).Intake; !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded defaults:\n got %+v\nwant %+v", got, want)
	}
	if got := config.Default().Intake; !reflect.DeepEqual(got, want) {
		t.Fatalf("Default():\n got %+v\nwant %+v", got, want)
	}

	// Under dual only type and node_id need writing; a memory block gets
	// its defaults too.
	c := mustLoad(t, "wal: {type: dual}\n"+backupYAML+"intake: {type: memory, node_id: n1, memory: {}}\n"+minimal, noEnv)
	want.Type, want.NodeID, want.Memory = "memory", "n1", &config.IntakeMemory{Path: "", ConfirmLatencyMs: 0}
	if !reflect.DeepEqual(c.Intake, want) {
		t.Fatalf("dual defaults:\n got %+v\nwant %+v", c.Intake, want)
	}
}

// A loaded config under intake.type: memory always has its memory block,
// even when the type came from the environment, so callers can read
// Intake.Memory without a nil check.
func TestIntakeMemoryBlockAlwaysPresentUnderMemory(t *testing.T) {
	for name, tc := range map[string]struct {
		yml string
		env map[string]string
	}{
		"type in file":  {"wal: {type: dual}\n" + backupYAML + "intake: {type: memory, node_id: n1}\n" + minimal, nil},
		"type from env": {"wal: {type: dual}\n" + backupYAML + "intake: {node_id: n1}\n" + minimal, map[string]string{"ANKUSA_INTAKE_TYPE": "memory"}},
		"under disk":    {"intake: {type: memory}\n" + minimal, nil},
	} {
		t.Run(name, func(t *testing.T) {
			c := mustLoad(t, tc.yml, env(tc.env))
			if want := (&config.IntakeMemory{}); !reflect.DeepEqual(c.Intake.Memory, want) {
				t.Fatalf("memory = %+v, want %+v", c.Intake.Memory, want)
			}
		})
	}
	// No other type gets one.
	if m := mustLoad(t, minimal, noEnv).Intake.Memory; m != nil {
		t.Fatalf("memory block without intake.type: %+v", m)
	}
}

func TestIntakeExplicitValuesKept(t *testing.T) {
	c := mustLoad(t, backupYAML+`
wal: {type: dual}
batcher: {deadline_ms: 20000}
intake:
  type: memory
  node_id: node-b
  fleet: eu.west-1
  publish_timeout_ms: 100
  reconcile_deadline_ms: 1000
  breaker_failures: 1
  probe_ms: 100
  retry_after_s: 1
  offset_flush_ms: 100
  max_record_bytes: 8065536
  recover_on_boot: false
  verify_topic: false
  pending: {max_records: 1, max_bytes: 16777216}
  memory: {path: ./drill/intake, confirm_latency_ms: 0}
`+minimal, noEnv)
	want := config.IntakeConfig{
		Type: "memory", NodeID: "node-b", Fleet: "eu.west-1",
		PublishTimeoutMs: 100, ReconcileDeadlineMs: 1_000, BreakerFailures: 1, ProbeMs: 100,
		RetryAfterS: 1, OffsetFlushMs: 100, MaxRecordBytes: 8_065_536,
		RecoverOnBoot: new(false), VerifyTopic: new(false),
		Pending: config.IntakePending{MaxRecords: 1, MaxBytes: 16 << 20},
		Memory:  &config.IntakeMemory{Path: "./drill/intake"},
	}
	if !reflect.DeepEqual(c.Intake, want) {
		t.Fatalf("explicit values:\n got %+v\nwant %+v", c.Intake, want)
	}
}

func TestIntakeMemoryPath(t *testing.T) {
	c := config.Default()
	c.Node.DataDir = "/var/lib/ankusa"
	if got, want := c.IntakeMemoryPath(), filepath.Join("/var/lib/ankusa", "intake"); got != want {
		t.Fatalf("no memory block: got %q, want %q", got, want)
	}
	c.Intake.Memory = &config.IntakeMemory{}
	if got, want := c.IntakeMemoryPath(), filepath.Join("/var/lib/ankusa", "intake"); got != want {
		t.Fatalf("empty path: got %q, want %q", got, want)
	}
	c.Intake.Memory.Path = "/mnt/outlives-host/intake"
	if got := c.IntakeMemoryPath(); got != "/mnt/outlives-host/intake" {
		t.Fatalf("explicit path: got %q", got)
	}

	// The default follows node.data_dir even when an env override sets it,
	// after defaults were applied.
	c = mustLoad(t, "wal: {type: dual}\n"+backupYAML+"intake: {type: memory, node_id: n1}\n"+minimal,
		env(map[string]string{"ANKUSA_DATA_DIR": "/srv/ankusa"}))
	if got, want := c.IntakeMemoryPath(), filepath.Join("/srv/ankusa", "intake"); got != want {
		t.Fatalf("with ANKUSA_DATA_DIR: got %q, want %q", got, want)
	}
	if got, want := config.Default().IntakeMemoryPath(), filepath.Join("data", "intake"); got != want {
		t.Fatalf("Default(): got %q, want %q", got, want)
	}
}

func TestIntakeEnvOverrides(t *testing.T) {
	// The file asks for dual; the node's identity and log come from the
	// environment, as in a StatefulSet.
	c := mustLoad(t, "wal: {type: dual}\n"+backupYAML+"intake: {node_id: from-file}\n"+minimal, env(map[string]string{
		"ANKUSA_INTAKE_TYPE":    "memory",
		"ANKUSA_INTAKE_NODE_ID": "ankusa-0",
	}))
	if c.Intake.Type != "memory" || c.Intake.NodeID != "ankusa-0" {
		t.Fatalf("env not applied: type=%q node_id=%q", c.Intake.Type, c.Intake.NodeID)
	}
	// And everything from the environment, on the built-in default file.
	c = mustLoad(t, backupYAML+minimal, env(map[string]string{
		"ANKUSA_WAL_TYPE":       "dual",
		"ANKUSA_INTAKE_TYPE":    "memory",
		"ANKUSA_INTAKE_NODE_ID": "ankusa-1",
	}))
	if c.WAL.Type != "dual" || c.Intake.Type != "memory" || c.Intake.NodeID != "ankusa-1" {
		t.Fatalf("env not applied: %+v %+v", c.WAL, c.Intake)
	}
	// An empty variable is unset: dual still needs the key.
	_, err := config.LoadBytes([]byte("wal: {type: dual}\n"+backupYAML+"intake: {type: memory}\n"+minimal),
		env(map[string]string{"ANKUSA_INTAKE_NODE_ID": ""}))
	wantViolation(t, err, "intake.node_id", "required when wal.type is dual")
}

func TestIntakeUnknownKeys(t *testing.T) {
	for yml, want := range map[string]string{
		"intake: {colour: red}\n" + minimal:                                 "intake.colour: unknown key",
		"intake: {pending: {max_hooks: 1}}\n" + minimal:                     "intake.pending.max_hooks: unknown key",
		"intake: {type: memory, memory: {size: 1}}\n" + minimal:             "intake.memory.size: unknown key",
		"intake: {type: kafka, kafka: {brokerz: [\"k:9092\"]}}\n" + minimal: "intake.kafka.brokerz: unknown key",
	} {
		if _, err := config.LoadBytes([]byte(yml), noEnv); err == nil || err.Error() != want {
			t.Errorf("%q: got %v, want %q", yml, err, want)
		}
	}
	_, err := config.LoadBytes([]byte("intake: {recover_on_boot: \"yes\"}\n"+minimal), noEnv)
	wantViolation(t, err, "intake.recover_on_boot", "must be true or false")
}

func TestIntakeRedacted(t *testing.T) {
	c := dualMemory()
	c.Intake.Fleet = "eu"
	c.Intake.Memory.Path = "/mnt/drill/intake"
	r := c.Redacted()
	in := r["intake"].(map[string]any)
	for k, want := range map[string]any{"type": "memory", "node_id": "node-a", "fleet": "eu", "recover_on_boot": true, "verify_topic": true} {
		if got := in[k]; got != want {
			t.Errorf("intake.%s = %#v, want %#v", k, got, want)
		}
	}
	if got := in["memory"].(map[string]any)["path"]; got != "/mnt/drill/intake" {
		t.Errorf("intake.memory.path = %#v", got)
	}
	if got := fmt.Sprint(in["pending"].(map[string]any)["max_bytes"]); got != "268435456" {
		t.Errorf("intake.pending.max_bytes = %s", got)
	}
}
