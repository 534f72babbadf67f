// Package direct is the commit path of wal.type: none: no local hook store.
// A hook is delivered to every one of its sinks while the provider waits,
// and the provider gets its 201 only once every sink confirmed. The
// promise is the sinks' own durability; the provider's retry schedule is
// the retry queue.
//
// Invariants:
//  1. A 201 is sent only after every sink of the hook returned nil from
//     Deliver within the deadline. Any failure, timeout or overload is a
//     503 with Retry-After, and nothing is kept on this node.
//  2. Nothing is stored: a crash at any point loses no acked hook, because
//     an acked hook is already at every sink.
//
// The cost: a sink that confirmed before another failed has the hook, and
// the provider's retry delivers it there again (at-least-once, with the
// same idempotency key when the source dedupes).
package direct

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
)

// ErrSinkUnavailable: a sink did not confirm (503 sink_unavailable).
var ErrSinkUnavailable = errors.New("direct: sink did not confirm")

// Options configure a Committer.
type Options struct {
	// Sinks maps a stored sink number to its sink.
	Sinks map[uint16]sink.Sink
	// Deadline bounds the whole delivery of one hook (batcher.deadline_ms).
	Deadline time.Duration
	// MaxInflight bounds hooks being delivered at once (batcher.max_queue);
	// past it Submit answers queue.ErrOverload at once.
	MaxInflight int
	Now         func() time.Time
}

// Committer implements the edge's Committer for wal.type: none.
type Committer struct {
	o     Options
	slots chan struct{}
}

// New builds a Committer.
func New(o Options) *Committer {
	if o.Deadline <= 0 {
		o.Deadline = 15 * time.Second
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 10_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Committer{o: o, slots: make(chan struct{}, o.MaxInflight)}
}

// Submit delivers rec to every sink and succeeds only when all confirmed
// (invariant 1). Seq is always 0: nothing is sequenced on this node.
func (c *Committer) Submit(ctx context.Context, rec *queue.Record) (queue.Result, error) {
	select {
	case c.slots <- struct{}{}:
		defer func() { <-c.slots }()
	default:
		return queue.Result{}, queue.ErrOverload
	}
	id := rec.ID
	if id == ([16]byte{}) {
		u, err := uuid.NewV7()
		if err != nil {
			return queue.Result{}, fmt.Errorf("%w: mint id: %w", queue.ErrStoreUnavailable, err)
		}
		id = u
	}
	// The provider's disconnect does not cut a delivery short: a sink must
	// not see half a request because a client gave up.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.Deadline)
	defer cancel()
	errs := make([]error, len(rec.Sinks))
	var wg sync.WaitGroup
	for i, ref := range rec.Sinks {
		s, ok := c.o.Sinks[ref.Num]
		if !ok {
			errs[i] = fmt.Errorf("sink %s is not configured", ref.ID)
			continue
		}
		m := &sink.Message{
			ID: uuid.UUID(id), Tenant: rec.Tenant, Source: rec.Source, ReceivedAt: rec.ReceivedAt,
			ContentType: rec.ContentType, Headers: rec.Headers, Body: rec.Body, Size: len(rec.Body), SHA256: sha256.Sum256(rec.Body),
			DedupeKey: rec.DedupeKey, Flagged: rec.Flagged, Attempt: 1,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Deliver(ctx, m); err != nil {
				errs[i] = fmt.Errorf("sink %s: %w", ref.ID, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return queue.Result{}, fmt.Errorf("%w: %w", ErrSinkUnavailable, err)
	}
	return queue.Result{ID: id}, nil
}
