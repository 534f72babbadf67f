package config

import (
	"net/url"
	"regexp"
)

// keyPrefixRE: the prefix is the first token of every claim key.
var keyPrefixRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// FleetConfig is the fleet's shared state (dedupe.scope: fleet): the Redis
// that holds the dedupe claims.
type FleetConfig struct {
	Redis FleetRedisConfig `yaml:"redis" json:"redis"`
	// PendingTTLMs is how long a pending claim lives when its request never
	// settles it (a node that died mid-commit). Default 30_000, 1_000..600_000.
	PendingTTLMs int `yaml:"pending_ttl_ms" json:"pending_ttl_ms"`
	// KeyPrefix starts every claim key. Default "ankusa".
	KeyPrefix string `yaml:"key_prefix" json:"key_prefix"`
}

// FleetRedisConfig is the claim store's connection.
type FleetRedisConfig struct {
	// URL: redis:// or rediss://; a password in it is redacted in /v1/config.
	URL string `yaml:"url" json:"url"`
	// TimeoutMs bounds every claim call; past it the provider gets 503.
	// Default 500, 10..10_000.
	TimeoutMs int `yaml:"timeout_ms" json:"timeout_ms"`
}

const (
	defaultFleetPendingTTLMs = 30_000
	defaultFleetKeyPrefix    = "ankusa"
	defaultFleetTimeoutMs    = 500
)

func applyFleetDefaults(c *Config, given func(string) bool) {
	def(given, "fleet.pending_ttl_ms", &c.Fleet.PendingTTLMs, defaultFleetPendingTTLMs)
	def(given, "fleet.key_prefix", &c.Fleet.KeyPrefix, defaultFleetKeyPrefix)
	def(given, "fleet.redis.timeout_ms", &c.Fleet.Redis.TimeoutMs, defaultFleetTimeoutMs)
}

func (c *Config) validateFleet(v *validator) {
	if !v.oneOf("dedupe.scope", c.Dedupe.Scope, []string{"node", "fleet"}, nil, "") || c.Dedupe.Scope != "fleet" {
		return
	}
	intRange(v, "fleet.pending_ttl_ms", c.Fleet.PendingTTLMs, 1_000, 600_000)
	intRange(v, "fleet.redis.timeout_ms", c.Fleet.Redis.TimeoutMs, 10, 10_000)
	if !keyPrefixRE.MatchString(c.Fleet.KeyPrefix) {
		v.add("fleet.key_prefix", "must match %s, got %q", keyPrefixRE, c.Fleet.KeyPrefix)
	}
	switch u, err := url.Parse(c.Fleet.Redis.URL); {
	case c.Fleet.Redis.URL == "":
		v.add("fleet.redis.url", "required when dedupe.scope is fleet")
	case err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "":
		// The URL may hold a password: the message never repeats it.
		v.add("fleet.redis.url", "must be a redis:// or rediss:// URL with a host")
	}
	// ADR section 3: a carried record's claim must outlive the reconcile
	// deadline, or it would expire (and admit a retry as a second hook)
	// before the record is even called stuck.
	if c.WAL.Type == "dual" && v.ok("intake.reconcile_deadline_ms", "fleet.pending_ttl_ms") &&
		c.Intake.ReconcileDeadlineMs >= c.Fleet.PendingTTLMs {
		v.add("intake.reconcile_deadline_ms", "must be less than fleet.pending_ttl_ms (%d) when dedupe.scope is fleet, got %d",
			c.Fleet.PendingTTLMs, c.Intake.ReconcileDeadlineMs)
	}
}
