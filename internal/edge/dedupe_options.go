package edge

import (
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dedupe"
)

// dedupeOptions translates a source's dedupe block into the extractor's
// own Options (dedupe does not import config); nil stays nil, no dedupe.
func dedupeOptions(c *config.SourceDedupe) *dedupe.Options {
	if c == nil {
		return nil
	}
	return &dedupe.Options{Preset: c.Preset, Header: c.Header, JSON: c.JSON,
		TTL: time.Duration(c.TTLSeconds) * time.Second}
}
