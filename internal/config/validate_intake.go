package config

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// intakeNameRE is the alphabet of intake.node_id and intake.fleet (ADR
// DUR-1 section 11). Both become part of the log's topic / subject.
var intakeNameRE = regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)

const (
	// intakeRecordOverhead is the room a log record needs beyond the body
	// (envelope, headers, key): intake.max_record_bytes must be at least
	// http.max_body_bytes plus this, so every body the node accepts fits in
	// one record.
	intakeRecordOverhead = 65_536
	// maxIntakeRecordBytes bounds intake.max_record_bytes: far above any
	// http.max_body_bytes, well below what brokers can carry in one record.
	maxIntakeRecordBytes = 1 << 30
)

// intakeTypes are the values of intake.type that work today; laterIntakeTypes
// are recognised but refused until their adapters ship.
var (
	intakeTypes      = []string{"memory", "kafka", "jetstream"}
	laterIntakeTypes = []string{}
)

// validateIntake checks the intake block. Ranges and alphabets are checked
// under every wal.type, so a typo is caught before the day dual is switched
// on; what dual requires (intake.type, intake.node_id, the roles) and the
// cross-key rules with other sections are checked only under dual, since
// the block is ignored under disk and must not refuse a disk config over
// keys its operator never wrote (a disk node may raise http.max_body_bytes
// past the default intake.max_record_bytes).
func (c *Config) validateIntake(v *validator) {
	in := c.Intake
	dual := c.WAL.Type == "dual"

	switch {
	case in.Type != "":
		v.oneOf("intake.type", in.Type, intakeTypes, laterIntakeTypes, "")
	case dual:
		v.add("intake.type", "required when wal.type is dual (supported: %s)", strings.Join(intakeTypes, "|"))
	}

	switch {
	case in.NodeID != "":
		intakeName(v, "intake.node_id", in.NodeID)
	case dual:
		v.add("intake.node_id", "required when wal.type is dual: this node's identity in the intake log, stable across host replacement, [a-z0-9._-]{1,64}")
	}
	intakeName(v, "intake.fleet", in.Fleet)

	intRange(v, "intake.publish_timeout_ms", in.PublishTimeoutMs, 100, 60_000)
	intRange(v, "intake.reconcile_deadline_ms", in.ReconcileDeadlineMs, 1_000, 600_000)
	intRange(v, "intake.breaker_failures", in.BreakerFailures, 1, 100)
	intRange(v, "intake.probe_ms", in.ProbeMs, 100, 60_000)
	intRange(v, "intake.retry_after_s", in.RetryAfterS, 1, 300)
	intRange(v, "intake.offset_flush_ms", in.OffsetFlushMs, 100, 60_000)
	intRange(v, "intake.max_record_bytes", in.MaxRecordBytes, intakeRecordOverhead+1, maxIntakeRecordBytes)
	intRange(v, "intake.pending.max_records", in.Pending.MaxRecords, 1, 10_000_000)
	intRange(v, "intake.pending.max_bytes", in.Pending.MaxBytes, 1<<20, 64<<30)

	c.validateIntakeBrokers(v, dual)
	if m := in.Memory; m != nil {
		// With a known type (kafka and jetstream included) the block must
		// match it; with a typo (already reported) the intended type is
		// unknown, so only the block's own keys are checked, as for sinks.
		known := slices.Contains(intakeTypes, in.Type) || slices.Contains(laterIntakeTypes, in.Type)
		switch {
		case known && in.Type != "memory":
			v.add("intake.memory", "only allowed when intake.type is memory (intake.type is %s)", in.Type)
		case in.Type == "":
			v.add("intake.memory", "only allowed when intake.type is memory (intake.type is not set)")
		default:
			intRange(v, "intake.memory.confirm_latency_ms", m.ConfirmLatencyMs, 0, 60_000)
			c.validateIntakeMemoryPath(v)
		}
	}

	if !dual {
		return
	}
	// A dual node keeps every role (ADR section 11): it acks, and its own
	// dispatch delivers what boot recovery replays from the log.
	var missing []string
	for _, role := range []string{"ingest", "dispatch"} {
		if !slices.Contains(c.Node.Roles, role) {
			missing = append(missing, role)
		}
	}
	if len(missing) > 0 && v.ok("node.roles") { // no roles at all is already reported
		v.add("node.roles", "must include ingest and dispatch when wal.type is dual, missing %s", strings.Join(missing, " and "))
	}
	// A publish attempt must end before the record's batcher deadline, or
	// the caller would be answered before the publish could be.
	if v.ok("intake.publish_timeout_ms", "batcher.deadline_ms") && in.PublishTimeoutMs >= c.Batcher.DeadlineMs {
		v.add("intake.publish_timeout_ms", "must be less than batcher.deadline_ms (%d) when wal.type is dual, got %d",
			c.Batcher.DeadlineMs, in.PublishTimeoutMs)
	}
	// Every body the node accepts must fit in one log record.
	if v.ok("intake.max_record_bytes", "http.max_body_bytes") && in.MaxRecordBytes < c.HTTP.MaxBodyBytes+intakeRecordOverhead {
		v.add("intake.max_record_bytes", "must be at least http.max_body_bytes + %d (%d) when wal.type is dual, got %d",
			intakeRecordOverhead, c.HTTP.MaxBodyBytes+intakeRecordOverhead, in.MaxRecordBytes)
	}
	// A record of the largest size must fit in an empty pending set, or it
	// would be refused (503 intake_unavailable) forever.
	if v.ok("intake.pending.max_bytes", "intake.max_record_bytes") && in.Pending.MaxBytes < in.MaxRecordBytes {
		v.add("intake.pending.max_bytes", "must be at least intake.max_record_bytes (%d) when wal.type is dual, got %d",
			in.MaxRecordBytes, in.Pending.MaxBytes)
	}
	// Dual also requires backups (backup.go) and, under dedupe.scope: fleet,
	// intake.reconcile_deadline_ms < fleet.pending_ttl_ms (fleet.go).
}

// intakeName checks a node id or fleet name. Beyond the ADR's alphabet, a
// dot may not start, end or double: both names become dot-separated tokens
// of the JetStream subject (ankusa.intake.<fleet>.<node>), where an empty
// token is invalid.
func intakeName(v *validator, key, s string) {
	switch {
	case !intakeNameRE.MatchString(s):
		v.add(key, "must match [a-z0-9._-]{1,64}, got %q", s)
	case strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, ".."):
		v.add(key, "must not start or end with \".\" or contain \"..\" (it becomes part of the log's subject), got %q", s)
	}
}

// validateIntakeMemoryPath refuses a memory log inside the store directory,
// which belongs to the store alone.
func (c *Config) validateIntakeMemoryPath(v *validator) {
	if c.Node.DataDir == "" {
		return // reported on node.data_dir; the default path is unknown
	}
	store := filepath.Join(c.Node.DataDir, "store")
	p := filepath.Clean(c.IntakeMemoryPath())
	if p == store || strings.HasPrefix(p, store+string(filepath.Separator)) {
		v.add("intake.memory.path", "must not be inside the store directory %s, got %q", store, c.Intake.Memory.Path)
	}
}
