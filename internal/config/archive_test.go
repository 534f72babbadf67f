package config_test

import (
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

func TestArchiveRules(t *testing.T) {
	const key16 = "0123456789abcdef"
	tests := []struct {
		name      string
		set       func(c *config.Config)
		key, rule string // "" = valid
	}{
		{"off by default", func(*config.Config) {}, "", ""},
		{"on, with backup's key", func(c *config.Config) {
			c.Archive = config.ArchiveConfig{Enabled: true, URL: "file:///var/lib/ankusa-archive", SegmentBytes: 8 << 20}
			c.Backup.SigningKey, c.Retention.Delivered = key16, "72h"
		}, "", ""},
		{"on, own key, s3", func(c *config.Config) {
			c.Archive = config.ArchiveConfig{Enabled: true, URL: "s3://bucket?region=eu-west-1", SegmentBytes: 8 << 20, SigningKey: key16}
			c.Retention.Delivered = "7d"
		}, "", ""},
		{"no url", func(c *config.Config) {
			c.Archive = config.ArchiveConfig{Enabled: true, SegmentBytes: 8 << 20, SigningKey: key16}
			c.Retention.Delivered = "72h"
		}, "archive.url", "required when archive.enabled"},
		{"bad scheme", func(c *config.Config) { c.Archive.URL = "gs://bucket" }, "archive.url", "file:// or s3://"},
		{"file without path", func(c *config.Config) { c.Archive.URL = "file://" }, "archive.url", "absolute path"},
		{"retention 0", func(c *config.Config) {
			c.Archive = config.ArchiveConfig{Enabled: true, URL: "file:///a", SegmentBytes: 8 << 20, SigningKey: key16}
		}, "retention.delivered", "more than 0 when archive.enabled"},
		{"no key anywhere", func(c *config.Config) {
			c.Archive = config.ArchiveConfig{Enabled: true, URL: "file:///a", SegmentBytes: 8 << 20}
			c.Retention.Delivered = "72h"
		}, "archive.signing_key", "at least 16 bytes"},
		{"short own key", func(c *config.Config) {
			c.Archive = config.ArchiveConfig{Enabled: true, URL: "file:///a", SegmentBytes: 8 << 20, SigningKey: "hunter2"}
			c.Backup.SigningKey, c.Retention.Delivered = key16, "72h"
		}, "archive.signing_key", "at least 16 bytes"},
		{"segment too small", func(c *config.Config) { c.Archive.SegmentBytes = 1024 }, "archive.segment_bytes", "between"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			tt.set(c)
			err := c.Validate()
			if tt.key == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantViolation(t, err, tt.key, tt.rule)
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error repeats the secret: %v", err)
			}
		})
	}
}

func TestArchiveDefaults(t *testing.T) {
	c := mustLoad(t, minimal, noEnv)
	if c.Archive.Enabled || c.Archive.SegmentBytes != 8<<20 {
		t.Fatalf("archive defaults = %+v", c.Archive)
	}
}
