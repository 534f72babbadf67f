package config

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/ankusa/ankusa/internal/verify"
)

// Defaults of the scalar keys. They live here, once, so Default(), the
// loader and docs/configuration.md have a single source to agree with.
const (
	defaultDataDir        = "./data"
	defaultInstance       = "ankusa" // only when the hostname is unavailable
	defaultHTTPIP         = "0.0.0.0"
	defaultHTTPPort       = 4000
	defaultRouting        = "path"
	defaultPrefix         = "/webhooks"
	defaultMaxBodyBytes   = 8_000_000
	defaultMaxHeaderBytes = 65_536
	defaultReadTimeoutMs  = 30_000

	defaultMaxInflightBodyBytes = 256 << 20
	defaultMaxConns             = 10_000
	defaultMaxConnsPerIP        = 0
	defaultIdleTimeoutMs        = 60_000
	defaultShutdownTimeoutMs    = 20_000
	defaultAdminReadTimeoutMs   = 10_000
	defaultAdminIdleTimeoutMs   = 60_000
	defaultAdminMaxConns        = 256
	defaultFDReserve            = 1_024

	defaultAdminIP       = "127.0.0.1"
	defaultAdminPort     = 4002
	defaultLogLevel      = "info"
	defaultLogFormat     = "text"
	defaultPartitions    = 2
	defaultMaxBatch      = 256
	defaultMaxDelayMs    = 0
	defaultMaxQueue      = 10_000
	defaultMaxQueueBytes = 256 << 20
	defaultDeadlineMs    = 15_000
	defaultWALType       = "disk"
	defaultDedupeScope   = "node"
	defaultSweepInterval = 60_000
	defaultSweepBatch    = 1_000
	defaultVerifyType    = "none"
	defaultDedupeTTL     = 259_200

	// Verification (CONTRACTS "Verification"). The tolerance is the
	// engine's own default, written out so /v1/config shows it.
	defaultToleranceSeconds = verify.DefaultToleranceSeconds
	defaultOnVerifyFailure  = OnVerifyFailureReject

	defaultQuarantineMaxBytes = 1 << 30
	defaultQuarantineRate     = 20.0
	defaultQuarantineBurst    = 100

	defaultSourceStoreType = SourceStoreStatic

	// defaultConcurrency: an attempt holds its slot for the whole round
	// trip, and while the node also ingests at full speed (its CPU shared
	// with the edge) an attempt to a receiver answering in 5 ms holds it
	// about 20 ms, not the 7 ms it takes on an idle node: 256 delivered
	// 0.74–0.76 of a 2-core node's ingest rate during ingest, 512 all of it
	// (docs/benchmarks.md "Issue 14, the fifth session"); 32 allowed 4 600/s.
	defaultConcurrency       = 512
	defaultMaxInflight       = 1_000
	defaultMaxInflightBytes  = 64 << 20
	defaultAttemptTimeoutMs  = 30_000
	defaultScanBatch         = 256
	defaultPollMs            = 1_000
	defaultBreakerFailures   = 5
	defaultBreakerCooldownMs = 10_000

	defaultRetryBaseMs      = 100
	defaultRetryMaxMs       = 300_000
	defaultRetryMaxAttempts = 84

	// Intake (wal.type: dual), ADR DUR-1 section 11. intake.type and
	// intake.node_id have no default: dual requires them.
	defaultIntakeFleet               = "default"
	defaultIntakePublishTimeoutMs    = 2_000
	defaultIntakeReconcileDeadlineMs = 20_000
	defaultIntakeBreakerFailures     = 3
	defaultIntakeProbeMs             = 1_000
	defaultIntakeRetryAfterS         = 2
	defaultIntakeOffsetFlushMs       = 1_000
	defaultIntakeMaxRecordBytes      = 10_000_000
	defaultIntakeRecoverOnBoot       = true
	defaultIntakeVerifyTopic         = true
	defaultIntakePendingMaxRecords   = 50_000
	defaultIntakePendingMaxBytes     = 256 << 20
	defaultIntakeMemoryConfirmMs     = 0
	// intakeMemoryDir is the memory log's directory under node.data_dir
	// when intake.memory.path is empty (see IntakeMemoryPath).
	intakeMemoryDir = "intake"

	// Sink timeouts: an HTTP POST is one round trip; a broker publish may
	// wait for a leader election or a reconnect, hence the longer default.
	defaultHTTPSinkTimeoutMs   = 5_000
	defaultBrokerSinkTimeoutMs = 10_000
)

// DefaultPath is the file Load reads when no path is named and
// ANKUSA_CONFIG is unset.
const DefaultPath = "./ankusa.yml"

// Default is the configuration used when no file exists: every key at its
// default and a single "demo" source logging what it receives, so a bare
// `ankusa` is useful on first run.
func Default() *Config {
	c := &Config{
		Sources: map[string]SourceConfig{
			"demo": {
				Verify: VerifyConfig{Type: "none"},
				Sinks:  []SinkConfig{{ID: "log", Type: "log"}},
			},
		},
	}
	applyDefaults(c, func(string) bool { return false })
	return c
}

// applyDefaults fills every key the operator did not give. given reports
// whether a dotted key was present (and non-null) in the file; it is asked
// instead of testing for zero values because 0 and "" can be deliberate
// (batcher.max_delay_ms: 0, admin.port: 0), and a deliberate out-of-range
// value should reach Validate rather than be silently replaced.
func applyDefaults(c *Config, given func(key string) bool) {
	applyBackupDefaults(c, given)
	applyArchiveDefaults(c, given)
	n := &c.Node
	if !given("node.instance") {
		n.Instance = hostname()
	}
	def(given, "node.data_dir", &n.DataDir, defaultDataDir)
	if !given("node.roles") {
		n.Roles = []string{"ingest", "dispatch"}
	}

	h := &c.HTTP
	def(given, "http.ip", &h.IP, defaultHTTPIP)
	def(given, "http.port", &h.Port, defaultHTTPPort)
	def(given, "http.routing", &h.Routing, defaultRouting)
	def(given, "http.prefix", &h.Prefix, defaultPrefix)
	def(given, "http.max_body_bytes", &h.MaxBodyBytes, defaultMaxBodyBytes)
	def(given, "http.max_header_bytes", &h.MaxHeaderBytes, defaultMaxHeaderBytes)
	def(given, "http.read_timeout_ms", &h.ReadTimeoutMs, defaultReadTimeoutMs)
	def(given, "http.max_inflight_body_bytes", &h.MaxInflightBodyBytes, defaultMaxInflightBodyBytes)
	def(given, "http.max_conns", &h.MaxConns, defaultMaxConns)
	def(given, "http.max_conns_per_ip", &h.MaxConnsPerIP, defaultMaxConnsPerIP)
	def(given, "http.idle_timeout_ms", &h.IdleTimeoutMs, defaultIdleTimeoutMs)
	def(given, "http.shutdown_timeout_ms", &h.ShutdownTimeoutMs, defaultShutdownTimeoutMs)
	def(given, "node.fd_reserve", &n.FDReserve, defaultFDReserve)

	def(given, "rate_limits.unlisted_tenants", &c.RateLimits.UnlistedTenants, UnlistedTenantsShared)

	def(given, "admin.ip", &c.Admin.IP, defaultAdminIP)
	def(given, "admin.port", &c.Admin.Port, defaultAdminPort)
	def(given, "admin.read_timeout_ms", &c.Admin.ReadTimeoutMs, defaultAdminReadTimeoutMs)
	def(given, "admin.idle_timeout_ms", &c.Admin.IdleTimeoutMs, defaultAdminIdleTimeoutMs)
	def(given, "admin.max_conns", &c.Admin.MaxConns, defaultAdminMaxConns)
	if !given("admin.open") {
		c.Admin.Open = AdminOpenRoutes()
	}

	def(given, "log.level", &c.Log.Level, defaultLogLevel)
	def(given, "log.format", &c.Log.Format, defaultLogFormat)

	b := &c.Batcher
	def(given, "batcher.partitions", &b.Partitions, defaultPartitions)
	def(given, "batcher.max_batch", &b.MaxBatch, defaultMaxBatch)
	def(given, "batcher.max_delay_ms", &b.MaxDelayMs, defaultMaxDelayMs)
	def(given, "batcher.max_queue", &b.MaxQueue, defaultMaxQueue)
	def(given, "batcher.max_queue_bytes", &b.MaxQueueBytes, defaultMaxQueueBytes)
	def(given, "batcher.deadline_ms", &b.DeadlineMs, defaultDeadlineMs)

	def(given, "wal.type", &c.WAL.Type, defaultWALType)

	def(given, "dedupe.scope", &c.Dedupe.Scope, defaultDedupeScope)
	def(given, "dedupe.sweep_interval_ms", &c.Dedupe.SweepIntervalMs, defaultSweepInterval)
	def(given, "dedupe.sweep_batch", &c.Dedupe.SweepBatch, defaultSweepBatch)

	d := &c.Dispatch
	def(given, "dispatch.concurrency", &d.Concurrency, defaultConcurrency)
	def(given, "dispatch.max_inflight", &d.MaxInflight, defaultMaxInflight)
	def(given, "dispatch.max_inflight_bytes", &d.MaxInflightBytes, defaultMaxInflightBytes)
	def(given, "dispatch.attempt_timeout_ms", &d.AttemptTimeoutMs, defaultAttemptTimeoutMs)
	def(given, "dispatch.scan_batch", &d.ScanBatch, defaultScanBatch)
	def(given, "dispatch.poll_ms", &d.PollMs, defaultPollMs)
	def(given, "dispatch.breaker_failures", &d.BreakerFailures, defaultBreakerFailures)
	def(given, "dispatch.breaker_cooldown_ms", &d.BreakerCooldownMs, defaultBreakerCooldownMs)

	applyIntakeDefaults(&c.Intake, given)
	applyFleetDefaults(c, given)

	r := &c.Retry
	def(given, "retry.base_ms", &r.BaseMs, defaultRetryBaseMs)
	def(given, "retry.max_ms", &r.MaxMs, defaultRetryMaxMs)
	def(given, "retry.max_attempts", &r.MaxAttempts, defaultRetryMaxAttempts)

	def(given, "retention.delivered", &c.Retention.Delivered, Duration("0"))
	def(given, "retention.max_bytes", &c.Retention.MaxBytes, int64(1<<30))
	def(given, "retention.sweep_interval_ms", &c.Retention.SweepIntervalMs, 1_000)

	q := &c.Quarantine
	def(given, "quarantine.max_bytes", &q.MaxBytes, defaultQuarantineMaxBytes)
	def(given, "quarantine.rate", &q.Rate, defaultQuarantineRate)
	def(given, "quarantine.burst", &q.Burst, defaultQuarantineBurst)

	applyRateLimitDefaults(&c.RateLimits, given)

	def(given, "source_store.type", &c.SourceStore.Type, defaultSourceStoreType)

	ids := make([]string, 0, len(c.Sources))
	for id := range c.Sources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := c.Sources[id]
		p := "sources." + id
		def(given, p+".verify.type", &s.Verify.Type, defaultVerifyType)
		if !given(p + ".verify.tolerance_seconds") {
			s.Verify.ToleranceSeconds = new(defaultToleranceSeconds)
		}
		def(given, p+".on_verify_failure", &s.OnVerifyFailure, defaultOnVerifyFailure)
		if s.Dedupe != nil {
			def(given, p+".dedupe.ttl_seconds", &s.Dedupe.TTLSeconds, defaultDedupeTTL)
		}
		for i := range s.Sinks {
			k := &s.Sinks[i]
			sp := fmt.Sprintf("%s.sinks[%d]", p, i)
			def(given, sp+".id", &k.ID, k.Type)
			// Every present block gets its timeout, even one that does not
			// match the type: Validate reports the mismatch, not a range.
			if k.HTTP != nil {
				def(given, sp+".http.timeout_ms", &k.HTTP.TimeoutMs, defaultHTTPSinkTimeoutMs)
			}
			if k.Kafka != nil {
				def(given, sp+".kafka.timeout_ms", &k.Kafka.TimeoutMs, defaultBrokerSinkTimeoutMs)
			}
			if k.NATS != nil {
				def(given, sp+".nats.timeout_ms", &k.NATS.TimeoutMs, defaultBrokerSinkTimeoutMs)
			}
			if k.RabbitMQ != nil {
				def(given, sp+".rabbitmq.timeout_ms", &k.RabbitMQ.TimeoutMs, defaultBrokerSinkTimeoutMs)
			}
		}
		c.Sources[id] = s
	}
}

// applyRateLimitDefaults gives every written limit without a burst one
// second's worth of requests. There is no default limit: none is unlimited.
func applyRateLimitDefaults(r *RateLimitsConfig, given func(string) bool) {
	if d := r.Default; d != nil && !given("rate_limits.default.burst") {
		d.Burst = defaultBurst(d.Rate)
	}
	for _, t := range sortedKeys(r.Tenants) {
		l := r.Tenants[t]
		if !given("rate_limits.tenants." + t + ".burst") {
			l.Burst = defaultBurst(l.Rate)
			r.Tenants[t] = l
		}
	}
}

// defaultBurst is one second's worth at rate, max(1, ceil(rate)), kept in
// burst's range so that a bad rate is the only thing reported.
func defaultBurst(rate float64) int {
	switch {
	case !(rate > 1): // NaN and rates refused by Validate included
		return 1
	case rate >= maxRateLimitBurst:
		return maxRateLimitBurst
	default:
		return int(math.Ceil(rate))
	}
}

// applyIntakeDefaults fills the intake block. It runs under every wal.type:
// the block is ignored under disk, but a complete effective config is what
// GET /v1/config shows and what a switch to dual starts from.
func applyIntakeDefaults(in *IntakeConfig, given func(string) bool) {
	def(given, "intake.fleet", &in.Fleet, defaultIntakeFleet)
	def(given, "intake.publish_timeout_ms", &in.PublishTimeoutMs, defaultIntakePublishTimeoutMs)
	def(given, "intake.reconcile_deadline_ms", &in.ReconcileDeadlineMs, defaultIntakeReconcileDeadlineMs)
	def(given, "intake.breaker_failures", &in.BreakerFailures, defaultIntakeBreakerFailures)
	def(given, "intake.probe_ms", &in.ProbeMs, defaultIntakeProbeMs)
	def(given, "intake.retry_after_s", &in.RetryAfterS, defaultIntakeRetryAfterS)
	def(given, "intake.offset_flush_ms", &in.OffsetFlushMs, defaultIntakeOffsetFlushMs)
	def(given, "intake.max_record_bytes", &in.MaxRecordBytes, defaultIntakeMaxRecordBytes)
	if !given("intake.recover_on_boot") {
		in.RecoverOnBoot = new(defaultIntakeRecoverOnBoot)
	}
	if !given("intake.verify_topic") {
		in.VerifyTopic = new(defaultIntakeVerifyTopic)
	}
	def(given, "intake.pending.max_records", &in.Pending.MaxRecords, defaultIntakePendingMaxRecords)
	def(given, "intake.pending.max_bytes", &in.Pending.MaxBytes, defaultIntakePendingMaxBytes)
	// A memory block written under any type gets its defaults here; under
	// intake.type: memory an absent one is added after the env overrides
	// (completeIntakeMemory). Its path default depends on node.data_dir,
	// which an env override may still change, so it stays "" (see
	// IntakeMemoryPath).
	if m := in.Memory; m != nil {
		def(given, "intake.memory.path", &m.Path, "")
		def(given, "intake.memory.confirm_latency_ms", &m.ConfirmLatencyMs, defaultIntakeMemoryConfirmMs)
	}
}

// completeIntakeMemory gives intake.type: memory its block (every key at its
// default) when none was written, so a loaded config never has a nil
// Intake.Memory under that type. It runs after the env overrides, since
// ANKUSA_INTAKE_TYPE may be what chose memory.
func completeIntakeMemory(c *Config) {
	if c.Intake.Type == "memory" && c.Intake.Memory == nil {
		c.Intake.Memory = &IntakeMemory{Path: "", ConfirmLatencyMs: defaultIntakeMemoryConfirmMs}
	}
}

// IntakeMemoryPath is the directory of the memory intake log:
// intake.memory.path when set, else <node.data_dir>/intake. It is resolved
// here, on use, rather than stored as a default, so that ANKUSA_DATA_DIR
// (applied after defaults) moves it too.
func (c *Config) IntakeMemoryPath() string {
	if m := c.Intake.Memory; m != nil && m.Path != "" {
		return m.Path
	}
	return filepath.Join(c.Node.DataDir, intakeMemoryDir)
}

// def sets *dst to v unless key was given.
func def[T any](given func(string) bool, key string, dst *T, v T) {
	if !given(key) {
		*dst = v
	}
}

// hostname names the instance after the machine, which is what an operator
// reading logs from several nodes expects to see.
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return defaultInstance
	}
	return h
}
