package testutil

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// LogRecorder is a slog.Handler that keeps every record's level, message
// and attributes (as key=value text), for tests that assert an operator
// sees a warning. Safe for concurrent use; the handlers it derives share
// its records.
type LogRecorder struct {
	mu      *sync.Mutex
	records *[]string
	attrs   []slog.Attr
}

// NewLogRecorder returns an empty recorder.
func NewLogRecorder() *LogRecorder {
	return &LogRecorder{mu: &sync.Mutex{}, records: new([]string)}
}

func (r *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *LogRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	for _, a := range r.attrs {
		b.WriteString(" " + a.String())
	}
	rec.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	r.mu.Lock()
	*r.records = append(*r.records, b.String())
	r.mu.Unlock()
	return nil
}

func (r *LogRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	cp := *r
	cp.attrs = append(append([]slog.Attr{}, r.attrs...), as...)
	return &cp
}

func (r *LogRecorder) WithGroup(string) slog.Handler { return r }

// Matching returns the records containing every one of subs.
func (r *LogRecorder) Matching(subs ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
next:
	for _, rec := range *r.records {
		for _, s := range subs {
			if !strings.Contains(rec, s) {
				continue next
			}
		}
		out = append(out, rec)
	}
	return out
}
