package dedupe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Claimer is the dedupe claim store as the edge sees it (ADR section 3,
// the two-phase claim). One claim per {tenant, source, dedupe key}:
//
//	Claim   → a Claim held pending (this request may commit the hook), or
//	          Committed (the key already names a durable hook), or an error.
//	Promote → the claim becomes committed under the hook id for ttl.
//	Release → the claim is deleted, only if it is still this claim's own
//	          pending entry.
//
// Error contract:
//   - ErrPending: another request (on any node) holds the key pending; the
//     provider is answered 409 dedupe_pending with Retry-After.
//   - ErrUnavailable (wrapped): the claim store did not answer in time or
//     failed. Nothing is known, so nothing may be stored: 503 + Retry-After.
//   - Promote and Release errors are reported but never change the answer
//     already decided: a lost promote leaves the key pending until its TTL
//     (a delay, then at worst a duplicate hook); a lost release leaves it
//     pending until its TTL (a delay). Neither can lose a hook.
type Claimer interface {
	Claim(ctx context.Context, tenant, source, key string) (Claim, error)
	Promote(ctx context.Context, c Claim, id [16]byte, ttl time.Duration) error
	Release(ctx context.Context, c Claim) error
}

// Claim is one held claim, or the committed hook a key already names.
type Claim struct {
	// Key is the claim store's key; "" for a claim that needs no settle
	// (node scope).
	Key string
	// Token identifies this claim's pending entry, so a release or promote
	// never touches an entry another request wrote after ours expired.
	Token string
	// Committed is set when the key already names a durable hook: ID is its
	// id, and the request is answered 201 duplicate without a commit.
	Committed bool
	ID        [16]byte
}

// Errors of the Claimer contract.
var (
	ErrPending     = errors.New("dedupe: claim pending on another request")
	ErrUnavailable = errors.New("dedupe: claim store unavailable")
)

// NodeClaims is dedupe.scope: node. Every claim is granted: the writer's
// store rows are the dedupe (they ride in the hook's own batch), so there is
// nothing to settle.
type NodeClaims struct{}

func (NodeClaims) Claim(context.Context, string, string, string) (Claim, error) {
	return Claim{}, nil
}
func (NodeClaims) Promote(context.Context, Claim, [16]byte, time.Duration) error { return nil }
func (NodeClaims) Release(context.Context, Claim) error                          { return nil }

// claimValue encodes a pending or committed entry. Pending entries carry
// the claim's token; committed ones the hook id.
func pendingValue(token string) string { return "p:" + token }
func committedValue(id [16]byte) string {
	return "c:" + uuid.UUID(id).String()
}

// parseValue decodes an entry read back from the store.
func parseValue(v string) (committed bool, id [16]byte, err error) {
	switch {
	case len(v) > 2 && v[:2] == "c:":
		u, perr := uuid.Parse(v[2:])
		if perr != nil {
			return false, id, fmt.Errorf("dedupe: committed claim %q: %w", v, perr)
		}
		return true, u, nil
	case len(v) > 2 && v[:2] == "p:":
		return false, id, nil
	}
	return false, id, fmt.Errorf("dedupe: unknown claim value %q", v)
}

// Settler runs promotes and releases off the goroutine that decides them
// (the queue's reconciler holds the pending set's lock when a held claim
// settles). Bounded: when its queue is full a settle is dropped and
// counted — a lost settle costs a delay or a duplicate, never a hook.
type Settler struct {
	cl      Claimer
	ch      chan settleJob
	done    chan struct{}
	dropped atomic.Uint64
	log     *slog.Logger
	mu      sync.RWMutex // guards closed against a send on a closed ch
	closed  bool
	started bool
}

type settleJob struct {
	c       Claim
	promote bool
	id      [16]byte
	ttl     time.Duration
}

// NewSettler builds a settler; settles queue up until Start runs them.
func NewSettler(cl Claimer, size int, log *slog.Logger) *Settler {
	return &Settler{cl: cl, ch: make(chan settleJob, max(size, 1)), done: make(chan struct{}), log: log.With("component", "settler")}
}

// Start runs the settler's goroutine until Stop.
func (s *Settler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started && !s.closed {
		s.started = true
		go s.run()
	}
}

func (s *Settler) run() {
	defer close(s.done)
	for j := range s.ch {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		if j.promote {
			err = s.cl.Promote(ctx, j.c, j.id, j.ttl)
		} else {
			err = s.cl.Release(ctx, j.c)
		}
		cancel()
		if err != nil {
			s.log.Warn("held claim not settled; it expires after fleet.pending_ttl_ms", "promote", j.promote, "err", err)
		}
	}
}

func (s *Settler) enqueue(j settleJob) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.dropped.Add(1)
		return
	}
	select {
	case s.ch <- j:
	default:
		s.dropped.Add(1)
	}
}

// Promote queues a promote; it never blocks.
func (s *Settler) Promote(c Claim, id [16]byte, ttl time.Duration) {
	s.enqueue(settleJob{c: c, promote: true, id: id, ttl: ttl})
}

// Release queues a release; it never blocks.
func (s *Settler) Release(c Claim) { s.enqueue(settleJob{c: c}) }

// Dropped counts settles lost to a full queue.
func (s *Settler) Dropped() uint64 { return s.dropped.Load() }

// Stop settles what is queued and ends the goroutine; a settle asked for
// later is dropped (counted).
func (s *Settler) Stop() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.ch)
	started := s.started
	s.mu.Unlock()
	if started {
		<-s.done
	}
}
