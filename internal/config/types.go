// Package config loads, validates and redacts Ankusa's YAML configuration.
//
// The shape of Config mirrors the YAML one to one: every yaml tag is a key an
// operator can write, and every key has a default (defaults.go) and a rule
// (validate.go). Unknown keys are refused by the loader.
package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ankusa/ankusa/internal/verify"
)

// Config is the whole effective configuration of one instance.
type Config struct {
	Node    NodeConfig    `yaml:"node" json:"node"`
	HTTP    HTTPConfig    `yaml:"http" json:"http"`
	Admin   AdminConfig   `yaml:"admin" json:"admin"`
	Log     LogConfig     `yaml:"log" json:"log"`
	Batcher BatcherConfig `yaml:"batcher" json:"batcher"`
	WAL     WALConfig     `yaml:"wal" json:"wal"`
	Dedupe  DedupeConfig  `yaml:"dedupe" json:"dedupe"`
	// Fleet is the shared claim store of dedupe.scope: fleet.
	Fleet    FleetConfig    `yaml:"fleet" json:"fleet"`
	Intake   IntakeConfig   `yaml:"intake" json:"intake"`
	Backup   BackupConfig   `yaml:"backup" json:"backup"`
	Dispatch DispatchConfig `yaml:"dispatch" json:"dispatch"`
	Retry    RetryConfig    `yaml:"retry" json:"retry"`
	// Retention keeps delivered hooks (history) for a while.
	Retention RetentionConfig `yaml:"retention" json:"retention"`
	// Archive keeps delivered hooks past their retention in an object store.
	Archive ArchiveConfig `yaml:"archive" json:"archive"`
	// Quarantine bounds the pen of hooks that failed verification on a
	// source with on_verify_failure: quarantine.
	Quarantine QuarantineConfig `yaml:"quarantine" json:"quarantine"`
	// RateLimits bounds the ingest rate per tenant. Absent: unlimited.
	RateLimits RateLimitsConfig `yaml:"rate_limits" json:"rate_limits"`
	// SourceStore says where sources come from besides this file.
	SourceStore SourceStoreConfig       `yaml:"source_store" json:"source_store"`
	Sources     map[string]SourceConfig `yaml:"sources" json:"sources"`
}

// QuarantineConfig bounds the quarantine pen (CONTRACTS "Verification").
type QuarantineConfig struct {
	// MaxBytes bounds the bodies held in quarantine, node-wide; past it a
	// hook that would be quarantined is answered 503 quarantine_full.
	// Default 1 GiB, 1 MiB..1 TiB.
	MaxBytes int64 `yaml:"max_bytes" json:"max_bytes"`
	// Rate refills each source's quarantine token bucket, per second;
	// beyond it 429 quarantine_rate_limited. Default 20, 0.1..10_000.
	Rate float64 `yaml:"rate" json:"rate"`
	// Burst is the size of that bucket. Default 100, 1..100_000.
	Burst int `yaml:"burst" json:"burst"`
}

// RateLimitsConfig bounds accepted requests per tenant with token buckets
// (429 rate_limited). A tenant with an entry in Tenants uses it; any other
// tenant uses Default; with no Default it is unlimited. Use For.
type RateLimitsConfig struct {
	// Default is every other tenant's limit, each tenant with a bucket of
	// its own. nil: unlimited.
	Default *RateLimit `yaml:"default" json:"default,omitempty"`
	// Tenants maps a tenant id ([A-Za-z0-9_-]{1,64}) to its own limit.
	Tenants map[string]RateLimit `yaml:"tenants" json:"tenants,omitempty"`
	// UnlistedTenants: "shared" (default) charges every tenant named in the
	// URL of an unbound source that has no limit of its own to one bucket
	// per source; "own" gives each its own bucket (bypassable by making up
	// tenants: only for a trusted network).
	UnlistedTenants string `yaml:"unlisted_tenants" json:"unlisted_tenants"`
}

// Values of rate_limits.unlisted_tenants.
const (
	UnlistedTenantsShared = "shared"
	UnlistedTenantsOwn    = "own"
)

// RateLimit is one token bucket.
type RateLimit struct {
	// Rate is the refill, in requests per second. Required, 0.01..1_000_000.
	Rate float64 `yaml:"rate" json:"rate"`
	// Burst is the bucket size. Default: one second's worth,
	// max(1, ceil(rate)); 1..10_000_000.
	Burst int `yaml:"burst" json:"burst"`
}

// For returns the limit of tenant: its own entry, else the default. ok is
// false when the tenant is unlimited.
func (r RateLimitsConfig) For(tenant string) (limit RateLimit, ok bool) {
	if l, found := r.Tenants[tenant]; found {
		return l, true
	}
	if r.Default != nil {
		return *r.Default, true
	}
	return RateLimit{}, false
}

// SourceStoreConfig says where sources are defined.
type SourceStoreConfig struct {
	// Type: static (default; sources come from this file only) | persistent
	// (the operator API may also add sources, kept in the node's store;
	// sources may then be empty).
	Type string `yaml:"type" json:"type"`
}

// Source store types.
const (
	SourceStoreStatic     = "static"
	SourceStorePersistent = "persistent"
)

// IntakeConfig is the replicated intake log of wal.type: dual (ADR DUR-1
// section 11). Every key but Type and NodeID has a default; the block is
// ignored under disk, though its keys are still range-checked there.
type IntakeConfig struct {
	// Type: memory (tests and demos only: not replicated) | kafka | jetstream. Required under dual.
	Type string `yaml:"type" json:"type"`
	// NodeID is this node's stable identity in the log, [a-z0-9._-]{1,64}. Required under dual.
	NodeID string `yaml:"node_id" json:"node_id"`
	// Fleet names the fleet; part of the topic / subject. Default "default", [a-z0-9._-]{1,64}.
	Fleet string `yaml:"fleet" json:"fleet"`
	// PublishTimeoutMs bounds one publish attempt. Default 2_000, 100..60_000, < batcher.deadline_ms.
	PublishTimeoutMs int `yaml:"publish_timeout_ms" json:"publish_timeout_ms"`
	// ReconcileDeadlineMs: a carried record older than this is stuck. Default 20_000, 1_000..600_000.
	ReconcileDeadlineMs int `yaml:"reconcile_deadline_ms" json:"reconcile_deadline_ms"`
	// BreakerFailures consecutive failed publishes open the gate. Default 3, 1..100.
	BreakerFailures int `yaml:"breaker_failures" json:"breaker_failures"`
	// ProbeMs: an open gate admits one batch after this long. Default 1_000, 100..60_000.
	ProbeMs int `yaml:"probe_ms" json:"probe_ms"`
	// RetryAfterS is the Retry-After of 503 intake_unavailable. Default 2, 1..300.
	RetryAfterS int `yaml:"retry_after_s" json:"retry_after_s"`
	// OffsetFlushMs: how often the watermark and offset are written. Default 1_000, 100..60_000.
	OffsetFlushMs int `yaml:"offset_flush_ms" json:"offset_flush_ms"`
	// MaxRecordBytes bounds one record. Default 10_000_000; >= http.max_body_bytes + 65_536.
	MaxRecordBytes int64 `yaml:"max_record_bytes" json:"max_record_bytes"`
	// RecoverOnBoot replays the log at boot. Default true.
	RecoverOnBoot *bool `yaml:"recover_on_boot" json:"recover_on_boot"`
	// VerifyTopic checks the topic/stream settings at boot. Default true.
	VerifyTopic *bool            `yaml:"verify_topic" json:"verify_topic"`
	Pending     IntakePending    `yaml:"pending" json:"pending"`
	Memory      *IntakeMemory    `yaml:"memory" json:"memory,omitempty"`
	Kafka       *IntakeKafka     `yaml:"kafka" json:"kafka,omitempty"`
	JetStream   *IntakeJetStream `yaml:"jetstream" json:"jetstream,omitempty"`
}

// IntakePending bounds the pending set (records not yet confirmed in both places).
type IntakePending struct {
	MaxRecords int   `yaml:"max_records" json:"max_records"` // default 50_000, 1..10_000_000
	MaxBytes   int64 `yaml:"max_bytes" json:"max_bytes"`     // default 256 MiB, 1 MiB..64 GiB
}

// IntakeMemory is the file-backed test log (intake.type: memory).
type IntakeMemory struct {
	// Path is the log directory; it may live outside node.data_dir so that it
	// outlives the "host" in drills. Default <data_dir>/intake.
	Path string `yaml:"path" json:"path"`
	// ConfirmLatencyMs is an injected wait before each confirm. Default 0, 0..60_000.
	ConfirmLatencyMs int `yaml:"confirm_latency_ms" json:"confirm_latency_ms"`
}

// DispatchConfig bounds delivery.
type DispatchConfig struct {
	// Concurrency is how many deliveries run at once. Default 256, 1..1024.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// MaxInflight bounds claimed (inflight) rows. Default 1_000, 1..100_000; >= concurrency.
	MaxInflight int `yaml:"max_inflight" json:"max_inflight"`
	// MaxInflightBytes bounds the bodies held by claimed rows. Default 64 MiB, 1 MiB..16 GiB.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes" json:"max_inflight_bytes"`
	// AttemptTimeoutMs kills one attempt. Default 30_000, 100..600_000.
	AttemptTimeoutMs int `yaml:"attempt_timeout_ms" json:"attempt_timeout_ms"`
	// ScanBatch is how many due rows one scan claims. Default 256, 1..10_000.
	ScanBatch int `yaml:"scan_batch" json:"scan_batch"`
	// PollMs is the idle re-scan interval (commits wake dispatch sooner). Default 1_000, 10..60_000.
	PollMs int `yaml:"poll_ms" json:"poll_ms"`
	// BreakerFailures consecutive failures open a sink's breaker. Default 5, 1..1_000.
	BreakerFailures int `yaml:"breaker_failures" json:"breaker_failures"`
	// BreakerCooldownMs is how long an open breaker parks rows before one probe. Default 10_000, 100..3_600_000.
	BreakerCooldownMs int `yaml:"breaker_cooldown_ms" json:"breaker_cooldown_ms"`
}

// RetryConfig is the delivery retry policy:
// delay = min(max_ms, base_ms * 2^(attempt-1)) * jitter in [0.5, 1.0].
type RetryConfig struct {
	BaseMs      int `yaml:"base_ms" json:"base_ms"`           // default 100, 1..3_600_000
	MaxMs       int `yaml:"max_ms" json:"max_ms"`             // default 300_000, 1..86_400_000; >= base_ms
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"` // default 84, 1..10_000
}

// RetentionConfig is how long delivered hooks stay readable (GET
// /v1/hooks, resend) before the background sweep removes them.
type RetentionConfig struct {
	// Delivered is a duration ("72h", "7d", "90m"); "0" (the default)
	// removes a hook as soon as every delivery succeeded. Use
	// DeliveredDuration. At most 365d.
	Delivered Duration `yaml:"delivered" json:"delivered"`
	// MaxBytes bounds the bodies of the delivered hooks kept; past it the
	// oldest delivered hooks are removed first, before their retention
	// ends. Default 1 GiB, 1 MiB..16 TiB.
	MaxBytes int64 `yaml:"max_bytes" json:"max_bytes"`
	// SweepIntervalMs is how often the sweep runs. Default 1_000, 100..3_600_000.
	SweepIntervalMs int `yaml:"sweep_interval_ms" json:"sweep_interval_ms"`
}

// DeliveredDuration is Delivered parsed; 0 when it does not parse (Validate
// refuses such a config).
func (r RetentionConfig) DeliveredDuration() time.Duration {
	d, _ := parseRetention(string(r.Delivered))
	return d
}

// Duration is a duration written as a string ("72h", "7d"), or a bare 0.
type Duration string

// parseRetention reads a Go duration, or a whole number of days ("7d").
func parseRetention(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return 0, fmt.Errorf("bad day count %q", n)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// NodeConfig identifies the instance and where it keeps its data.
type NodeConfig struct {
	// Instance names this node in logs, /health and /v1/wal. Default: the hostname.
	Instance string `yaml:"instance" json:"instance"`
	// DataDir holds the store (<data_dir>/store). Default "./data".
	DataDir string `yaml:"data_dir" json:"data_dir"`
	// Roles this node plays. Default ["ingest", "dispatch"].
	Roles []string `yaml:"roles" json:"roles"`
	// FDReserve is how many file descriptors are kept for the store, sinks
	// and logs: the connection caps never use them. Default 1_024,
	// 64..1_000_000.
	FDReserve int `yaml:"fd_reserve" json:"fd_reserve"`
}

// HTTPConfig is the ingest listener that providers talk to.
type HTTPConfig struct {
	IP   string `yaml:"ip" json:"ip"`     // default "0.0.0.0"
	Port int    `yaml:"port" json:"port"` // default 4000, 1..65535 (0 = pick a free port, tests only)
	// Routing is "path" (POST {prefix}/{source}) or "tenant_path"
	// (POST {prefix}/{tenant}/{source}). Default "path".
	Routing string `yaml:"routing" json:"routing"`
	// Prefix of the ingest routes. Default "/webhooks"; must start with "/" and not end with "/".
	Prefix string `yaml:"prefix" json:"prefix"`
	// MaxBodyBytes bounds a hook's body. Default 8_000_000, 1..100_000_000.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxHeaderBytes bounds the request headers. Default 65_536, 1_024..1_048_576.
	MaxHeaderBytes int `yaml:"max_header_bytes" json:"max_header_bytes"`
	// ReadTimeoutMs bounds reading one request. Default 30_000, 100..600_000.
	ReadTimeoutMs int `yaml:"read_timeout_ms" json:"read_timeout_ms"`
	// MaxInflightBodyBytes bounds the bytes of request bodies being read or
	// held by the edge, across all connections; past it a request is
	// answered 503 overload before its body is read. Default 256 MiB,
	// http.max_body_bytes..16 GiB.
	MaxInflightBodyBytes int64 `yaml:"max_inflight_body_bytes" json:"max_inflight_body_bytes"`
	// MaxConns caps the open ingest connections; the effective cap is also
	// kept under the descriptor limit (node.fd_reserve). Default 10_000,
	// 1..1_000_000.
	MaxConns int `yaml:"max_conns" json:"max_conns"`
	// MaxConnsPerIP caps one client IP's open ingest connections. Default 0
	// (off), 0..1_000_000.
	MaxConnsPerIP int `yaml:"max_conns_per_ip" json:"max_conns_per_ip"`
	// IdleTimeoutMs closes a keep-alive connection idle that long (at once
	// under connection pressure). Default 60_000, 1_000..3_600_000.
	IdleTimeoutMs int `yaml:"idle_timeout_ms" json:"idle_timeout_ms"`
	// ShutdownTimeoutMs bounds the drain on SIGTERM. Default 20_000,
	// 100..600_000.
	ShutdownTimeoutMs int `yaml:"shutdown_timeout_ms" json:"shutdown_timeout_ms"`
	// TLS, when its files are set, serves ingest over HTTPS.
	TLS ListenerTLS `yaml:"tls" json:"tls"`
}

// ListenerTLS is a listener's certificate: PEM files, both or neither,
// read at start and again on SIGHUP.
type ListenerTLS struct {
	CertFile string `yaml:"cert_file" json:"cert_file"`
	KeyFile  string `yaml:"key_file" json:"key_file"`
}

// Enabled reports whether the listener serves TLS.
func (t ListenerTLS) Enabled() bool { return t.CertFile != "" }

// AdminTLS is ListenerTLS plus client certificates for the operator API.
type AdminTLS struct {
	CertFile string `yaml:"cert_file" json:"cert_file"`
	KeyFile  string `yaml:"key_file" json:"key_file"`
	// ClientCAFile, when set, makes the admin listener require a client
	// certificate signed by one of these PEM CAs (mutual TLS). Tokens still
	// decide the role. Needs cert_file and key_file.
	ClientCAFile string `yaml:"client_ca_file" json:"client_ca_file"`
}

// Listener is the certificate pair of the admin listener.
func (t AdminTLS) Listener() ListenerTLS {
	return ListenerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile}
}

// AdminConfig is the operator API listener.
type AdminConfig struct {
	IP   string `yaml:"ip" json:"ip"`     // default "127.0.0.1"
	Port int    `yaml:"port" json:"port"` // default 4002, 0..65535 (0 = pick a free port)
	// ReadTimeoutMs bounds reading one request's headers and body. Default
	// 10_000, 100..600_000.
	ReadTimeoutMs int `yaml:"read_timeout_ms" json:"read_timeout_ms"`
	// IdleTimeoutMs closes a keep-alive connection idle that long. Default
	// 60_000, 1_000..3_600_000.
	IdleTimeoutMs int `yaml:"idle_timeout_ms" json:"idle_timeout_ms"`
	// MaxConns caps the open admin connections. Default 256, 1..100_000.
	MaxConns int `yaml:"max_conns" json:"max_conns"`
	// Tokens are the bearer tokens of the operator API. Empty: the API is
	// open, which is allowed only on a loopback admin.ip.
	Tokens []AdminToken `yaml:"tokens" json:"tokens"`
	// Open lists the routes served without a token, for probes and
	// scrapers: a subset of health, ready, metrics. Default all three.
	Open []string `yaml:"open" json:"open"`
	// TLS, when its files are set, serves the operator API over HTTPS.
	TLS AdminTLS `yaml:"tls" json:"tls"`
}

// AdminToken is one operator credential. Exactly one of Token and
// TokenSHA256 is set.
type AdminToken struct {
	// Name identifies the holder in the audit trail; [A-Za-z0-9_.@-]{1,64}, unique.
	Name string `yaml:"name" json:"name"`
	// Token is the secret itself (give it as ${VAR}); at least 16 bytes.
	Token string `yaml:"token" json:"token"`
	// TokenSHA256 is the hex SHA-256 of the token, so the file need not
	// hold the secret.
	TokenSHA256 string `yaml:"token_sha256" json:"token_sha256"`
	// Role is read or operate (AdminRoleRead, AdminRoleOperate).
	Role string `yaml:"role" json:"role"`
}

// Operator API roles: read sees state, operate may also change it and
// read hook bodies.
const (
	AdminRoleRead    = "read"
	AdminRoleOperate = "operate"
)

// AdminOpenRoutes returns the names admin.open may list (and its default).
func AdminOpenRoutes() []string { return []string{"health", "ready", "metrics"} }

// LogConfig controls log/slog output.
type LogConfig struct {
	Level  string `yaml:"level" json:"level"`   // debug|info|warn|error, default info
	Format string `yaml:"format" json:"format"` // text|json, default text
}

// BatcherConfig bounds the queue in front of the writer (group commit).
type BatcherConfig struct {
	Partitions    int   `yaml:"partitions" json:"partitions"`           // default 2, 1..64
	MaxBatch      int   `yaml:"max_batch" json:"max_batch"`             // default 256, 1..10_000
	MaxDelayMs    int   `yaml:"max_delay_ms" json:"max_delay_ms"`       // default 0, 0..1_000
	MaxQueue      int   `yaml:"max_queue" json:"max_queue"`             // default 10_000, 1..1_000_000 (records, whole batcher)
	MaxQueueBytes int64 `yaml:"max_queue_bytes" json:"max_queue_bytes"` // default 256 MiB, 1 MiB..16 GiB
	// DeadlineMs is how long a record may wait to start committing. Default 15_000, 100..120_000.
	DeadlineMs int `yaml:"deadline_ms" json:"deadline_ms"`
}

// WALConfig chooses what a 2xx means.
type WALConfig struct {
	// Type: "disk" (default; fsynced in the local store) or "dual" (fsynced
	// locally AND confirmed by the intake log) or "none" (no local hook
	// store: a 201 once every sink confirmed).
	Type string `yaml:"type" json:"type"`
}

// DedupeConfig holds the node-wide dedupe settings.
type DedupeConfig struct {
	// Scope: "node" (default; the store's rows) or "fleet" (Redis claims
	// shared by every node, fleet.*).
	Scope string `yaml:"scope" json:"scope"`
	// SweepIntervalMs is how often expired dedupe keys are swept. Default 60_000, 1_000..3_600_000.
	SweepIntervalMs int `yaml:"sweep_interval_ms" json:"sweep_interval_ms"`
	// SweepBatch bounds one sweep pass. Default 1_000, 1..100_000.
	SweepBatch int `yaml:"sweep_batch" json:"sweep_batch"`
}

// SourceConfig is one catch URL.
type SourceConfig struct {
	// Tenant is used when the URL names none. Default "" (then "default").
	Tenant string `yaml:"tenant" json:"tenant"`
	// Tenants, for a source without Tenant under http.routing tenant_path,
	// lists the only tenants its URL may name; empty: any.
	Tenants []string     `yaml:"tenants" json:"tenants,omitempty"`
	Verify  VerifyConfig `yaml:"verify" json:"verify"`
	// OnVerifyFailure: reject (default; 401, nothing stored) | quarantine
	// (202, held in the quarantine pen) | accept_flag (committed with
	// flagged: true, no dedupe key). "" means reject (for configs built in
	// Go); use VerifyFailurePolicy. Only reject is allowed under verify
	// type none, where nothing fails.
	OnVerifyFailure string        `yaml:"on_verify_failure" json:"on_verify_failure"`
	Dedupe          *SourceDedupe `yaml:"dedupe" json:"dedupe,omitempty"`
	// Handshake: which provider handshake the catch URL answers. "" or
	// auto (default): the one of verify.type (slack, zoom, meta, discord,
	// dropbox; none for the others); none: no handshake; msgraph:
	// Microsoft Graph's ?validationToken= (Graph does not sign, so any
	// verify.type).
	Handshake string `yaml:"handshake" json:"handshake,omitempty"`
	// Sinks: at least one.
	Sinks []SinkConfig `yaml:"sinks" json:"sinks"`
}

// Handshake values (SourceConfig.Handshake).
const (
	HandshakeAuto    = "auto"
	HandshakeNone    = "none"
	HandshakeMSGraph = "msgraph"
)

// HandshakeProvider is the provider handshake the source answers: slack,
// zoom, meta, discord, dropbox (from verify.type under auto), msgraph, or
// "" for none.
func (s SourceConfig) HandshakeProvider() string {
	switch s.Handshake {
	case HandshakeNone:
		return ""
	case HandshakeMSGraph:
		return "msgraph"
	}
	switch s.Verify.Type {
	case "slack", "zoom", "meta", "discord", "dropbox":
		return s.Verify.Type
	}
	return ""
}

// On-verify-failure policies (SourceConfig.OnVerifyFailure).
const (
	OnVerifyFailureReject     = "reject"
	OnVerifyFailureQuarantine = "quarantine"
	OnVerifyFailureAcceptFlag = "accept_flag"
)

// VerifyFailurePolicy is OnVerifyFailure with "" read as reject.
func (s SourceConfig) VerifyFailurePolicy() string {
	if s.OnVerifyFailure == "" {
		return OnVerifyFailureReject
	}
	return s.OnVerifyFailure
}

// VerifyConfig is the signature scheme of a source: the YAML of
// verify.Spec (see Spec). Validate builds the verifier once to check it, so
// a loaded config always yields one.
type VerifyConfig struct {
	// Type: none (default) | hmac | a named scheme (verify.Types()).
	Type string `yaml:"type" json:"type"`
	// Secret: newest first, 1..8 entries, required unless type is none (and
	// refused there). YAML takes a single string or a list.
	Secret StringList `yaml:"secret" json:"secret,omitempty"`
	// ToleranceSeconds bounds |now - timestamp| on timestamped schemes
	// (stripe, slack, standard_webhooks, hmac with a timestamp). Default
	// 300, 1..86_400. nil (a config built in Go) means the default.
	ToleranceSeconds *int `yaml:"tolerance_seconds" json:"tolerance_seconds"`
	// PublicKey: the provider's public keys for the asymmetric schemes
	// (discord: hex Ed25519; sendgrid: PEM or base64 DER ECDSA P-256;
	// standard_webhooks / svix v1a: "whpk_" + base64 Ed25519), newest
	// first, 1..8; refused by the symmetric schemes. Not secret.
	PublicKey StringList `yaml:"public_key" json:"public_key,omitempty"`
	// PublicURL: the URL the provider calls, as it sees it; required by
	// twilio and square (they sign it), refused elsewhere.
	PublicURL string `yaml:"public_url" json:"public_url,omitempty"`
	// VerifyToken: type meta only, optional: the token Meta's subscription
	// handshake (GET ?hub.mode=subscribe&hub.verify_token=…) must carry.
	// Without it that GET is refused.
	VerifyToken string `yaml:"verify_token" json:"verify_token,omitempty"`

	// The keys below apply to type hmac only; a preset fixes them and
	// refuses them, as does type none. "" means the engine default.

	SignatureHeader string `yaml:"signature_header" json:"signature_header,omitempty"` // required for hmac
	Parse           string `yaml:"parse" json:"parse,omitempty"`                       // whole (default) | csv_pairs | space_versions
	SigPrefix       string `yaml:"sig_prefix" json:"sig_prefix,omitempty"`
	SigKey          string `yaml:"sig_key" json:"sig_key,omitempty"`             // csv_pairs / space_versions only, required there
	TimestampKey    string `yaml:"timestamp_key" json:"timestamp_key,omitempty"` // csv_pairs only
	Signed          string `yaml:"signed" json:"signed,omitempty"`               // template, default "{body}"
	Hash            string `yaml:"hash" json:"hash,omitempty"`                   // sha256 (default) | sha512 | sha1
	Encoding        string `yaml:"encoding" json:"encoding,omitempty"`           // hex (default) | base64
	SecretDecode    string `yaml:"secret_decode" json:"secret_decode,omitempty"` // none (default) | base64 | whsec_base64
	TimestampHeader string `yaml:"timestamp_header" json:"timestamp_header,omitempty"`
}

// Spec maps the block onto the verification engine's Spec; verify.New of
// it is what the edge runs (Validate has already run it once, so on a
// loaded config it does not fail).
func (v VerifyConfig) Spec() verify.Spec {
	s := verify.Spec{
		Type:            v.Type,
		Secrets:         slices.Clone([]string(v.Secret)),
		PublicKeys:      slices.Clone([]string(v.PublicKey)),
		PublicURL:       v.PublicURL,
		SignatureHeader: v.SignatureHeader,
		Parse:           v.Parse,
		SigPrefix:       v.SigPrefix,
		SigKey:          v.SigKey,
		TimestampKey:    v.TimestampKey,
		Signed:          v.Signed,
		Hash:            v.Hash,
		Encoding:        v.Encoding,
		SecretDecode:    v.SecretDecode,
		TimestampHeader: v.TimestampHeader,
	}
	if v.ToleranceSeconds != nil {
		s.ToleranceSeconds = *v.ToleranceSeconds
	}
	return s
}

// hmacFields lists the hmac-only keys of v that are set, in YAML order.
func (v VerifyConfig) hmacFields() []string {
	var set []string
	for _, f := range []struct{ key, val string }{
		{"signature_header", v.SignatureHeader}, {"parse", v.Parse}, {"sig_prefix", v.SigPrefix},
		{"sig_key", v.SigKey}, {"timestamp_key", v.TimestampKey}, {"signed", v.Signed},
		{"hash", v.Hash}, {"encoding", v.Encoding}, {"secret_decode", v.SecretDecode},
		{"timestamp_header", v.TimestampHeader},
	} {
		if f.val != "" {
			set = append(set, f.key)
		}
	}
	return set
}

// StringList is a list of strings that YAML may also give as one string,
// which becomes a one-element list (secret: "x" is secret: ["x"]).
type StringList []string

// UnmarshalYAML implements yaml.InterfaceUnmarshaler for goccy/go-yaml.
// checkShape has already refused every other shape with a better message.
func (l *StringList) UnmarshalYAML(unmarshal func(any) error) error {
	var one string
	if err := unmarshal(&one); err == nil {
		*l = StringList{one}
		return nil
	}
	var many []string
	if err := unmarshal(&many); err != nil {
		return err
	}
	*l = many
	return nil
}

// SourceDedupe says where a source's dedupe key comes from: exactly one of
// Preset, Header, JSON.
type SourceDedupe struct {
	// Preset: github | standard_webhooks | svix | shopify | stripe.
	Preset string `yaml:"preset" json:"preset,omitempty"`
	Header string `yaml:"header" json:"header,omitempty"`
	JSON   string `yaml:"json" json:"json,omitempty"` // dotted path, e.g. "data.id"
	// TTLSeconds: default 259_200 (72 h), 1..31_536_000.
	TTLSeconds int `yaml:"ttl_seconds" json:"ttl_seconds"`
}

// SinkConfig is one delivery target of a source. Exactly the block named
// by Type may be set (log has none): each sink type declares its own keys.
type SinkConfig struct {
	// ID is unique within the source, [a-z0-9_-]{1,32}. Default: the type.
	ID string `yaml:"id" json:"id"`
	// Type: log | http | kafka | nats | rabbitmq.
	Type     string        `yaml:"type" json:"type"`
	HTTP     *HTTPSink     `yaml:"http" json:"http,omitempty"`
	Kafka    *KafkaSink    `yaml:"kafka" json:"kafka,omitempty"`
	NATS     *NATSSink     `yaml:"nats" json:"nats,omitempty"`
	RabbitMQ *RabbitMQSink `yaml:"rabbitmq" json:"rabbitmq,omitempty"`
}

// HTTPSink POSTs the raw body to a URL.
type HTTPSink struct {
	URL       string            `yaml:"url" json:"url"`               // required, http or https
	TimeoutMs int               `yaml:"timeout_ms" json:"timeout_ms"` // default 5_000, 100..600_000
	Headers   map[string]string `yaml:"headers" json:"headers,omitempty"`
	// Secret, when set, signs outgoing requests the Standard Webhooks way
	// (webhook-id, webhook-timestamp, webhook-signature): "whsec_<base64>" or raw.
	// The HMAC key is the decoded base64 or the raw bytes, at least 16 bytes
	// either way; use SigningKey rather than decoding it again.
	Secret string `yaml:"secret" json:"secret,omitempty"`
}

// KafkaSink produces to an existing topic (never created by Ankusa).
type KafkaSink struct {
	Brokers   []string `yaml:"brokers" json:"brokers"` // required, host:port
	Topic     string   `yaml:"topic" json:"topic"`     // required
	TimeoutMs int      `yaml:"timeout_ms" json:"timeout_ms"`
	SASL      *SASL    `yaml:"sasl" json:"sasl,omitempty"`
	TLS       *TLS     `yaml:"tls" json:"tls,omitempty"`
	// DropHeaders: request headers left out of the message's headers, any
	// case, at most 64. nil (absent) means the sink package's default
	// (authorization, cookie, proxy-authorization); [] carries every one.
	DropHeaders []string `yaml:"drop_headers" json:"drop_headers"`
}

// SASL credentials for Kafka.
type SASL struct {
	Mechanism string `yaml:"mechanism" json:"mechanism"` // plain | scram-sha-256 | scram-sha-512
	Username  string `yaml:"username" json:"username"`
	Password  string `yaml:"password" json:"password"`
}

// TLS client settings. The files and InsecureSkipVerify require Enabled
// (Validate refuses them with TLS off, where they would be ignored).
type TLS struct {
	Enabled            bool   `yaml:"enabled" json:"enabled"`
	CAFile             string `yaml:"ca_file" json:"ca_file,omitempty"`
	CertFile           string `yaml:"cert_file" json:"cert_file,omitempty"`
	KeyFile            string `yaml:"key_file" json:"key_file,omitempty"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" json:"insecure_skip_verify"`
}

// NATSSink publishes to a JetStream stream that already covers Subject.
type NATSSink struct {
	URL       string `yaml:"url" json:"url"`         // required, nats://host:port[,…]
	Subject   string `yaml:"subject" json:"subject"` // required
	TimeoutMs int    `yaml:"timeout_ms" json:"timeout_ms"`
	User      string `yaml:"user" json:"user,omitempty"`
	Password  string `yaml:"password" json:"password,omitempty"`
	Token     string `yaml:"token" json:"token,omitempty"`
	CredsFile string `yaml:"creds_file" json:"creds_file,omitempty"`
	NKeyFile  string `yaml:"nkey_file" json:"nkey_file,omitempty"`
	// DropHeaders: request headers left out of the message's headers, any
	// case, at most 64. nil (absent) means the sink package's default
	// (authorization, cookie, proxy-authorization); [] carries every one.
	DropHeaders []string `yaml:"drop_headers" json:"drop_headers"`
}

// RabbitMQSink publishes with confirms to an existing exchange.
type RabbitMQSink struct {
	URL        string `yaml:"url" json:"url"`                 // required, amqp:// or amqps://
	Exchange   string `yaml:"exchange" json:"exchange"`       // "" = the default exchange
	RoutingKey string `yaml:"routing_key" json:"routing_key"` // required
	TimeoutMs  int    `yaml:"timeout_ms" json:"timeout_ms"`
	// DropHeaders: request headers left out of the message's headers, any
	// case, at most 64. nil (absent) means the sink package's default
	// (authorization, cookie, proxy-authorization); [] carries every one.
	DropHeaders []string `yaml:"drop_headers" json:"drop_headers"`
}
