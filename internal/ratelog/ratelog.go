// Package ratelog keeps a repeated warning or error from flooding the log:
// a failing disk makes every write path report the same failure thousands
// of times a second.
//
// Invariant: for each message shape (its level and its text with digits
// removed, so "[JOB 7] flush error" and "[JOB 8] flush error" are one
// shape), at most one record per Interval reaches the next handler; the
// first one after a quiet spell carries "suppressed": how many of that
// shape were dropped since the last one passed. Records below Warn always
// pass.
package ratelog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
)

// maxShapes bounds the table; past it, shapes not seen for an interval
// are forgotten (their pending count is lost, never a record that would
// pass).
const maxShapes = 1024

// Handler wraps another slog.Handler.
type Handler struct {
	next     slog.Handler
	interval time.Duration
	now      func() time.Time
	st       *state // shared by the handlers WithAttrs/WithGroup derive
}

type state struct {
	mu     sync.Mutex
	shapes map[string]*shape // guarded by mu
}

type shape struct {
	last       time.Time // when one last passed
	suppressed int
}

// New returns a handler letting one record per shape per interval through
// to next; now is the clock (nil: time.Now).
func New(next slog.Handler, interval time.Duration, now func() time.Time) *Handler {
	if now == nil {
		now = time.Now
	}
	return &Handler{next: next, interval: interval, now: now, st: &state{shapes: map[string]*shape{}}}
}

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	key := r.Level.String() + " " + strings.Map(func(c rune) rune {
		if unicode.IsDigit(c) {
			return -1
		}
		return c
	}, r.Message)
	now := h.now()
	s := h.st
	s.mu.Lock()
	sh := s.shapes[key]
	if sh == nil {
		if len(s.shapes) >= maxShapes {
			for k, o := range s.shapes {
				if now.Sub(o.last) >= h.interval {
					delete(s.shapes, k)
				}
			}
		}
		sh = &shape{}
		s.shapes[key] = sh
	} else if now.Sub(sh.last) < h.interval {
		sh.suppressed++
		s.mu.Unlock()
		return nil
	}
	n := sh.suppressed
	sh.last, sh.suppressed = now, 0
	s.mu.Unlock()
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", n), slog.Duration("suppressed_over", h.interval))
	}
	return h.next.Handle(ctx, r)
}

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	cp := *h
	cp.next = h.next.WithAttrs(as)
	return &cp
}

func (h *Handler) WithGroup(name string) slog.Handler {
	cp := *h
	cp.next = h.next.WithGroup(name)
	return &cp
}
