package sources

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ankusa/ankusa/internal/sink"
)

// errRetired answers an attempt that picked a sink up just as it was
// replaced or removed. It is transient on purpose: the retry finds the
// current target (the new sink, or none, which dead-letters the row).
var errRetired = errors.New("sink was reconfigured or removed through the operator API as the attempt started")

// guarded wraps an API source's sink so that it can be retired while
// dispatch workers may still hold it: the dispatcher hands a target to a
// worker before the worker calls Deliver, so a replaced sink can be called
// after SetTarget returned. Close marks the sink retired and closes the
// inner sink once no attempt uses it, which keeps the sink.Sink contract
// (Deliver is never called after Close). Close is idempotent.
type guarded struct {
	id    string // the sink id within its source
	inner sink.Sink
	log   *slog.Logger

	mu      sync.Mutex
	active  int
	retired bool
	closed  bool
}

func newGuarded(id string, s sink.Sink, log *slog.Logger) *guarded {
	return &guarded{id: id, inner: s, log: log}
}

// guardedNoIO is a guarded sink whose inner sink does no I/O (sink.NoIO):
// the guard adds none, so the dispatcher may treat it as the inner one.
type guardedNoIO struct{ *guarded }

func (guardedNoIO) NoIO() {}

// guardedLog is a guarded sink whose inner sink does no I/O and reads no
// body (sink.NoIO, sink.BodyFree: the log sink). The log sink is the only
// BodyFree sink, so no other combination has a wrapper: a BodyFree sink
// that did I/O would reach the dispatcher without BodyFree (delivered
// correctly, its body copied out of the store all the same) until one is
// added here.
type guardedLog struct{ *guarded }

func (guardedLog) NoIO()     {}
func (guardedLog) BodyFree() {}

// guardedBounded is a guarded sink whose inner sink bounds its attempts
// itself (sink.Bounded, an http sink's timeout_ms): the dispatcher then
// gives them that one deadline, and its error names the sink's timeout.
type guardedBounded struct {
	*guarded
	b sink.Bounded
}

func (g guardedBounded) AttemptBound() time.Duration { return g.b.AttemptBound() }

// target is g as the dispatcher's target, with what the dispatcher asks
// of its inner sink: no I/O and no body (an API source's log sink), or its
// own bound (an API source's http sink).
func (g *guarded) target() sink.Sink {
	_, bodyFree := g.inner.(sink.BodyFree)
	switch in := g.inner.(type) {
	case sink.NoIO:
		if bodyFree {
			return guardedLog{g}
		}
		return guardedNoIO{g}
	case sink.Bounded:
		return guardedBounded{g, in}
	}
	return g
}

func (g *guarded) Deliver(ctx context.Context, m *sink.Message) error {
	g.mu.Lock()
	if g.retired {
		g.mu.Unlock()
		return errRetired
	}
	g.active++
	g.mu.Unlock()

	err := g.inner.Deliver(ctx, m)

	g.mu.Lock()
	g.active--
	last := g.retired && g.active == 0 && !g.closed
	if last {
		g.closed = true
	}
	g.mu.Unlock()
	if last {
		if cerr := g.inner.Close(); cerr != nil {
			g.log.Warn("closing a retired sink failed", "sink", g.id, "err", cerr)
		}
	}
	return err
}

// Close retires the sink; the inner sink is closed now if idle, else when
// its last attempt returns.
func (g *guarded) Close() error {
	g.mu.Lock()
	if g.retired {
		g.mu.Unlock()
		return nil
	}
	g.retired = true
	now := g.active == 0
	if now {
		g.closed = true
	}
	g.mu.Unlock()
	if now {
		return g.inner.Close()
	}
	return nil
}
