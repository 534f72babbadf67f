package config

import (
	"net/url"
)

// ArchiveConfig: delivered hooks past retention.delivered are written to an
// object store in signed segments before the sweep deletes them, and can be
// replayed from there (POST /v1/replays kind archive).
type ArchiveConfig struct {
	Enabled bool `yaml:"enabled" json:"enabled"`
	// URL is a blob location like backup.primary: file:///abs/dir or
	// s3://bucket?region=…. Objects go under <backup prefix>/archive/.
	URL string `yaml:"url" json:"url"`
	// SegmentBytes bounds the bodies of one segment (a segment holds at
	// most 512 hooks either way). Default 8 MiB, 64 KiB..1 GiB.
	SegmentBytes int64 `yaml:"segment_bytes" json:"segment_bytes"`
	// SigningKey signs segments and the catalogue; empty means
	// backup.signing_key. At least 16 bytes.
	SigningKey string `yaml:"signing_key" json:"signing_key,omitempty"`
}

// ArchiveSigningKey is the key archive objects are signed with.
func (c *Config) ArchiveSigningKey() string {
	if c.Archive.SigningKey != "" {
		return c.Archive.SigningKey
	}
	return c.Backup.SigningKey
}

func applyArchiveDefaults(c *Config, given func(string) bool) {
	def(given, "archive.segment_bytes", &c.Archive.SegmentBytes, int64(8<<20))
}

func (c *Config) validateArchive(v *validator) {
	a := c.Archive
	intRange(v, "archive.segment_bytes", a.SegmentBytes, 64<<10, 1<<30)
	if a.URL != "" {
		u, err := url.Parse(a.URL)
		switch {
		case err != nil || (u.Scheme != "file" && u.Scheme != "s3"):
			v.add("archive.url", "must be a file:// or s3:// URL")
		case u.Scheme == "file" && u.Path == "":
			v.add("archive.url", "a file:// URL needs an absolute path, e.g. file:///var/lib/ankusa-archive")
		}
	}
	if !a.Enabled {
		return
	}
	if a.URL == "" {
		v.add("archive.url", "required when archive.enabled is true")
	}
	if d, err := parseRetention(string(c.Retention.Delivered)); err == nil && d == 0 {
		v.add("retention.delivered", "must be more than 0 when archive.enabled is true (the archive takes hooks as their retention ends)")
	}
	switch {
	case a.SigningKey != "" && len(a.SigningKey) < 16:
		v.add("archive.signing_key", "must be at least 16 bytes")
	case a.SigningKey == "" && len(c.Backup.SigningKey) < 16:
		v.add("archive.signing_key", "required when archive.enabled is true and backup.signing_key is not set, at least 16 bytes (every segment is signed with it)")
	}
}
