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

var (
	_ sink.Sink     = (*Sink)(nil)
	_ sink.NoIO     = (*Sink)(nil)
	_ sink.BodyFree = (*Sink)(nil)
)

// NoIO: Deliver hands one line to the logger and waits on nothing a
// deadline could end, so its attempts carry none (sink.NoIO).
func (*Sink) NoIO() {}

// BodyFree: the line carries the body's size and sha256, never the body,
// so none is read back from the store to deliver it (sink.BodyFree).
func (*Sink) BodyFree() {}

// New returns a log sink writing to log.
func New(log *slog.Logger) *Sink { return &Sink{log: log.With("component", "sink.log")} }

// Deliver logs m's metadata at INFO; it cannot fail. The line is built only
// when the logger takes INFO (log.level warn or error, or a discarding
// handler, costs one Enabled call per hook), and then with typed attributes
// and no boxing: a delivered hook costs its id and sha256 strings plus
// whatever the handler spends writing the line.
func (s *Sink) Deliver(ctx context.Context, m *sink.Message) error {
	if !s.log.Enabled(ctx, slog.LevelInfo) {
		return nil
	}
	var sum [64]byte
	hex.Encode(sum[:], m.SHA256[:])
	var buf [10]slog.Attr
	attrs := append(buf[:0],
		slog.String("id", m.ID.String()), slog.Uint64("seq", m.Seq), slog.String("tenant", m.Tenant),
		slog.String("source", m.Source), slog.String("content_type", m.ContentType), slog.Int("size", m.Size),
		slog.String("sha256", string(sum[:])), slog.Int("attempt", m.Attempt))
	if m.DedupeKey != "" {
		attrs = append(attrs, slog.String("dedupe_key", m.DedupeKey))
	}
	if m.ReplayID != "" {
		attrs = append(attrs, slog.String("replay_id", m.ReplayID))
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "hook delivered", attrs...)
	return nil
}

// Close does nothing.
func (s *Sink) Close() error { return nil }
