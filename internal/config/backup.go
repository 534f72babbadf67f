package config

import (
	"net/url"
	"strings"
)

// BackupConfig: checkpoints of the store uploaded to an object store, and
// the restore a node with an empty data dir runs at boot. Required under
// wal.type: dual (ADR section 9: the backup plus the log since its offset is
// the recovery point).
type BackupConfig struct {
	Enabled bool `yaml:"enabled" json:"enabled"`
	// IntervalMs between backups. Default 60_000, 1_000..86_400_000.
	IntervalMs int `yaml:"interval_ms" json:"interval_ms"`
	// MaxAgeMs: a backup older than this is stale (and the intake log's
	// retention must cover twice it). Default 3_600_000, >= interval_ms, ..604_800_000.
	MaxAgeMs int `yaml:"max_age_ms" json:"max_age_ms"`
	// Keep this many backups. Default 3, 1..1_000.
	Keep int `yaml:"keep" json:"keep"`
	// Primary and Secondary are blob URLs: file:///path or s3://bucket?region=….
	Primary   string `yaml:"primary" json:"primary"`
	Secondary string `yaml:"secondary" json:"secondary,omitempty"`
	// Prefix inside the bucket. Default: intake.node_id under dual, else node.instance.
	Prefix string `yaml:"prefix" json:"prefix"`
	// SigningKey signs every manifest (HMAC-SHA256); at least 16 bytes.
	SigningKey string `yaml:"signing_key" json:"signing_key,omitempty"`
}

func applyBackupDefaults(c *Config, given func(string) bool) {
	b := &c.Backup
	def(given, "backup.interval_ms", &b.IntervalMs, 60_000)
	def(given, "backup.max_age_ms", &b.MaxAgeMs, 3_600_000)
	def(given, "backup.keep", &b.Keep, 3)
}

// BackupPrefix is the effective prefix: stable across a host replacement,
// which is what lets the replacement find its predecessor's backups.
func (c *Config) BackupPrefix() string {
	switch {
	case c.Backup.Prefix != "":
		return c.Backup.Prefix
	case c.WAL.Type == "dual" && c.Intake.NodeID != "":
		return c.Intake.NodeID
	}
	return c.Node.Instance
}

func (c *Config) validateBackup(v *validator) {
	b := c.Backup
	intRange(v, "backup.interval_ms", b.IntervalMs, 1_000, 86_400_000)
	intRange(v, "backup.max_age_ms", b.MaxAgeMs, 1_000, 604_800_000)
	intRange(v, "backup.keep", b.Keep, 1, 1_000)
	if v.ok("backup.interval_ms", "backup.max_age_ms") && b.MaxAgeMs < b.IntervalMs {
		v.add("backup.max_age_ms", "must be at least backup.interval_ms (%d), got %d", b.IntervalMs, b.MaxAgeMs)
	}
	for _, k := range []struct{ key, val string }{{"backup.primary", b.Primary}, {"backup.secondary", b.Secondary}} {
		if k.val == "" {
			continue
		}
		u, err := url.Parse(k.val)
		if err != nil || (u.Scheme != "file" && u.Scheme != "s3") {
			v.add(k.key, "must be a file:// or s3:// URL")
			continue
		}
		if u.Scheme == "file" && u.Path == "" {
			v.add(k.key, "a file:// URL needs an absolute path, e.g. file:///var/backups/ankusa")
		}
	}
	if b.Prefix != "" && (strings.HasPrefix(b.Prefix, "/") || strings.Contains(b.Prefix, "..")) {
		v.add("backup.prefix", "must be a relative path without '..'")
	}
	if b.Enabled {
		if b.Primary == "" {
			v.add("backup.primary", "required when backup.enabled is true")
		}
		if len(b.SigningKey) < 16 {
			v.add("backup.signing_key", "required when backup.enabled is true, at least 16 bytes (every manifest is signed with it)")
		}
	}
	if b.Secondary != "" && b.Primary == "" {
		v.add("backup.secondary", "only allowed with backup.primary")
	}
	if c.WAL.Type == "dual" && !b.Enabled {
		// ADR section 11: under dual the backup plus the log since its
		// offset is the recovery point; the log alone only reaches back as
		// far as its retention.
		v.add("backup.enabled", "must be true when wal.type is dual (the backup and the intake log since its offset are the recovery point)")
	}
}
