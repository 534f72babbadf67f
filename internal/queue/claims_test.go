package queue_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/testutil"
)

// holderLog records what the queue did with a held claim.
type holderLog struct {
	mu       sync.Mutex
	promoted [][16]byte
	released int
}

func (h *holderLog) Promote(id [16]byte) {
	h.mu.Lock()
	h.promoted = append(h.promoted, id)
	h.mu.Unlock()
}
func (h *holderLog) Release() { h.mu.Lock(); h.released++; h.mu.Unlock() }
func (h *holderLog) counts() (int, int, [16]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var id [16]byte
	if len(h.promoted) > 0 {
		id = h.promoted[0]
	}
	return len(h.promoted), h.released, id
}

// holdCarried submits a hook under key, which the test's faults must leave
// carried (intake_unavailable, its hook id named), and holds its claim.
func holdCarried(t *testing.T, e *dualEnv, key string) ([16]byte, *holderLog) {
	t.Helper()
	got := answer(t, submitAsync(e.q, rec("body", key)))
	id, carried := queue.Carried(got.err)
	if !carried || !errors.Is(got.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("answer %v: want a carried intake_unavailable", got.err)
	}
	h := &holderLog{}
	if !e.q.Hold(id, h) {
		t.Fatal("Hold of a carried record returned completed")
	}
	return id, h
}

// A carried record's answer names its hook id; the held claim is promoted
// once, when both halves are confirmed, and never released.
func TestHold_PromotedWhenBothHalvesConfirmed(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1 })
	e.log.FailNext(1, intake.Unavailable)
	id, h := holdCarried(t, e, "evt_h")
	if p, r, _ := h.counts(); p != 0 || r != 0 {
		t.Fatalf("settled before the reconcile: promoted %d released %d", p, r)
	}
	e.q.Reconcile(context.Background())
	p, r, pid := h.counts()
	if p != 1 || r != 0 || pid != id {
		t.Fatalf("after the reconcile: promoted %d (id ok %v) released %d; want one promote of the hook id", p, pid == id, r)
	}
	e.q.Reconcile(context.Background())
	if p, r, _ := h.counts(); p != 1 || r != 0 {
		t.Fatalf("settled twice: promoted %d released %d", p, r)
	}
}

// The ADR's "completed" race: the reconciler finished before Hold.
func TestHold_ReturnsFalseOnceCompleted(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1 })
	e.log.FailNext(1, intake.Unavailable)
	got := answer(t, submitAsync(e.q, rec("body", "evt_c")))
	id, _ := queue.Carried(got.err)
	e.q.Reconcile(context.Background())
	e.pendingEmpty(t)
	if e.q.Hold(id, &holderLog{}) {
		t.Fatal("Hold after completion returned true: nobody would promote the claim")
	}
}

// Refusals before either half and successes are not carried.
func TestHold_RefusalsAreNotCarried(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1; d.MaxRecordBytes = 10 })
	got := answer(t, submitAsync(e.q, rec("a body over ten bytes", "evt_r")))
	if _, carried := queue.Carried(got.err); carried || !errors.Is(got.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("refusal %v: want intake_unavailable, not carried", got.err)
	}
}

// Past reconcile_deadline_ms the claim is released once; the record stays
// carried and, when it completes later, is not promoted a second time.
func TestHold_ReleasedOnceWhenStuck(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) {
		d.ReconcileDeadline = 100 * time.Millisecond
		d.ReconcileEvery = 5 * time.Millisecond
	})
	e.log.FailNext(1_000_000, intake.Unavailable)
	_, h := holdCarried(t, e, "evt_s")
	testutil.Eventually(t, 5*time.Second, "claim released", func() bool { _, r, _ := h.counts(); return r == 1 })
	e.log.ClearFaults()
	e.pendingEmpty(t)
	if p, r, _ := h.counts(); p != 0 || r != 1 {
		t.Fatalf("promoted %d released %d, want 0 and 1", p, r)
	}
}

// releasedIDs returns the hook ids named by the LogClaimReleased lines
// rec holds, in order.
func releasedIDs(rec *testutil.LogRecorder) []string {
	var out []string
	for _, line := range rec.Matching(queue.LogClaimReleased) {
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				out = append(out, id)
			}
		}
	}
	return out
}

// The release past the deadline is what lets a second hook id exist, so it
// is logged, once, naming the hook: the line the fleet drill (and an
// operator) tells a sanctioned second hook from a dedupe failure by. A
// claim settled in time is never named.
func TestHold_ReleaseIsLoggedOnceWithTheHookID(t *testing.T) {
	clock := newRCClock()
	const deadline = time.Second
	lg := testutil.NewLogRecorder()
	e, _ := newRCDual(t, queue.Options{Now: clock.now, Logger: slog.New(lg)}, func(d *queue.DualOptions) {
		d.ReconcileEvery = -1
		d.ReconcileDeadline = deadline
		d.BreakerFailures = 100
	})
	ctx := context.Background()
	e.log.FailNext(2, intake.Unavailable)
	stuckID, hs := holdCarried(t, e, "evt_stuck")
	e.q.Reconcile(ctx) // the second fault: still carried, within the deadline
	if got := releasedIDs(lg); len(got) != 0 {
		t.Fatalf("released within the deadline: %v", got)
	}

	clock.advance(deadline + time.Millisecond)
	e.log.FailNext(1, intake.Unavailable)
	_, hf := holdCarried(t, e, "evt_fresh")
	e.log.FailNext(1_000_000, intake.Unavailable)
	for range 3 {
		e.q.Reconcile(ctx)
	}
	want := []string{uuid.UUID(stuckID).String()}
	if got := releasedIDs(lg); !slices.Equal(got, want) {
		t.Fatalf("release lines name %v, want exactly %v (the stuck record, once; not the fresh one)", got, want)
	}
	if _, r, _ := hs.counts(); r != 1 {
		t.Fatalf("stuck claim released %d times, want 1", r)
	}
	e.log.ClearFaults()
	e.q.Reconcile(ctx)
	e.pendingEmpty(t)
	if p, r, _ := hf.counts(); p != 1 || r != 0 {
		t.Fatalf("fresh claim: promoted %d released %d, want 1 and 0", p, r)
	}
	if got := releasedIDs(lg); len(got) != 1 {
		t.Fatalf("release lines %v after completion, want still one", got)
	}
}
