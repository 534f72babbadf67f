// Package sink defines how a hook leaves Ankusa: the Sink interface every
// delivery target implements, the classified errors that tell the
// dispatcher whether to retry, and the message format the queue sinks
// (Kafka, JetStream, RabbitMQ) share.
//
// Retryability is data: a sink only reports what happened; the dispatcher
// alone decides when to try again and when to dead-letter.
package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/hook"
)

// Message is one hook as one sink delivers it.
type Message struct {
	ID          uuid.UUID
	Seq         uint64
	Tenant      string
	Source      string
	ReceivedAt  time.Time
	ContentType string
	Headers     []hook.Header
	// Body is the raw body, nil for a BodyFree sink when the dispatcher
	// would have had to read it back from the store.
	Body []byte
	// Size is the body's length in bytes: len(Body) whenever Body is set.
	Size      int
	SHA256    [32]byte
	DedupeKey string // "" when the hook has none
	ReplayID  string // "" unless delivered by a replay job
	Flagged   bool
	Attempt   int // 1 for the first attempt
}

// IdempotencyKey is what a consumer dedupes on: <tenant>:<source>:<dedupe
// key> when the provider gave one (so a provider's retry that was stored
// twice across a crash still collapses downstream), else the hook id.
func (m *Message) IdempotencyKey() string {
	if m.DedupeKey != "" {
		return m.Tenant + ":" + m.Source + ":" + m.DedupeKey
	}
	return m.ID.String()
}

// Sink is one delivery target.
type Sink interface {
	// Deliver sends m and returns nil only when the target confirmed it
	// (an HTTP 2xx, a broker ack). Any other return is a failed attempt:
	// wrap it with Permanent for errors a retry cannot fix, or Retry to
	// suggest a delay (a Retry-After); an unwrapped error is transient.
	// ctx carries the attempt deadline; when it ends Deliver must return
	// promptly, and the attempt counts as failed (transient). Deliver keeps
	// nothing of m (the struct, its Headers slice) after it returns: the
	// dispatcher fills the same Message for its next attempt.
	Deliver(ctx context.Context, m *Message) error
	// Close releases connections. Deliver is not called after Close.
	Close() error
}

// Bounded is a Sink that bounds every Deliver itself (its timeout_ms).
// The dispatcher then gives each attempt one deadline, the earlier of
// AttemptBound and dispatch.attempt_timeout_ms, instead of nesting the
// sink's own under its own; Deliver adds its bound only when ctx ends
// later than it.
type Bounded interface {
	AttemptBound() time.Duration
}

// NoIO is a Sink whose Deliver waits on nothing a deadline could end: the
// log sink hands a line to the process's logger, and no slog handler reads
// its context. The dispatcher gives its attempts no deadline of their own
// (a timer armed and stopped per attempt that nothing waits on cost about
// 1.3 µs a hook, 2 % of a delivered hook's CPU, issue 14), and runs them
// one after another on one worker of their own, outside the delivery pool
// (handing each to a pool worker cost about 3.5 µs). So Deliver must be
// quick: a slow one delays every NoIO sink's deliveries, though no other
// sink's (the NoIO sinks' claims in flight have a bound of their own). A
// sink that talks to a target never implements it; the contract suite
// (sinktest.Target.DoesIO) checks both ways.
type NoIO interface {
	NoIO()
}

// BodyFree is a Sink whose Deliver never reads m.Body: the log sink logs
// the body's size and checksum, never the body. For it the dispatcher does
// not copy a stored body out of the store, and hands it a Message whose
// Body may be nil (Size and SHA256 are always set): at 256 KiB that copy
// was 90 % of the bytes allocated per hook (issue 14). A sink whose target
// receives the body never implements it; the contract suite
// (sinktest.Target.Carries) checks both ways.
type BodyFree interface {
	BodyFree()
}

// Error is a classified delivery failure.
type Error struct {
	Permanent  bool
	RetryAfter time.Duration // > 0: the target asked for at least this delay
	Err        error
}

func (e *Error) Error() string {
	switch {
	case e.Permanent:
		return "permanent: " + e.Err.Error()
	case e.RetryAfter > 0:
		return fmt.Sprintf("retry after %s: %v", e.RetryAfter, e.Err)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as one a retry cannot fix (a 4xx, an unroutable or
// oversized message, an authorization failure): the row dead-letters at once.
func Permanent(err error) error { return &Error{Permanent: true, Err: err} }

// Retry marks err as transient with a requested minimum delay.
func Retry(err error, after time.Duration) error { return &Error{RetryAfter: after, Err: err} }

// Classify reads a Deliver error.
func Classify(err error) (permanent bool, retryAfter time.Duration) {
	var e *Error
	if errors.As(err, &e) {
		return e.Permanent, e.RetryAfter
	}
	return false, 0
}
