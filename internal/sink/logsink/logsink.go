// Package logsink delivers a hook by writing one structured log line: the
// default sink of the demo source, and a way to watch traffic before any
// real target exists. It never logs the body or its headers' values.
package logsink

import (
	"context"
	"encoding/hex"
	"log/slog"

	"github.com/ankusa/ankusa/internal/sink"
)

// Sink logs each delivery.
type Sink struct {
	log *slog.Logger
}

var _ sink.Sink = (*Sink)(nil)

// New returns a log sink writing to log.
func New(log *slog.Logger) *Sink { return &Sink{log: log.With("component", "sink.log")} }

// Deliver logs m's metadata; it cannot fail.
func (s *Sink) Deliver(ctx context.Context, m *sink.Message) error {
	attrs := []any{
		"id", m.ID.String(), "seq", m.Seq, "tenant", m.Tenant, "source", m.Source,
		"content_type", m.ContentType, "size", len(m.Body), "sha256", hex.EncodeToString(m.SHA256[:]),
		"attempt", m.Attempt,
	}
	if m.DedupeKey != "" {
		attrs = append(attrs, "dedupe_key", m.DedupeKey)
	}
	if m.ReplayID != "" {
		attrs = append(attrs, "replay_id", m.ReplayID)
	}
	s.log.InfoContext(ctx, "hook delivered", attrs...)
	return nil
}

// Close does nothing.
func (s *Sink) Close() error { return nil }
