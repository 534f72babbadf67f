package queue_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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

// A carried record's answer names its hook id; the held claim is promoted
// once, when both halves are confirmed, and never released.
func TestHold_PromotedWhenBothHalvesConfirmed(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1 })
	e.log.FailNext(1, intake.Unavailable)
	got := answer(t, submitAsync(e.q, rec("body", "evt_h")))
	id, carried := queue.Carried(got.err)
	if !carried || !errors.Is(got.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("answer %v: want a carried intake_unavailable", got.err)
	}
	h := &holderLog{}
	if !e.q.Hold(id, h) {
		t.Fatal("Hold of a carried record returned completed")
	}
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
	got := answer(t, submitAsync(e.q, rec("body", "evt_s")))
	id, _ := queue.Carried(got.err)
	h := &holderLog{}
	if !e.q.Hold(id, h) {
		t.Fatal("not held")
	}
	testutil.Eventually(t, 5*time.Second, "claim released", func() bool { _, r, _ := h.counts(); return r == 1 })
	e.log.ClearFaults()
	e.pendingEmpty(t)
	if p, r, _ := h.counts(); p != 0 || r != 1 {
		t.Fatalf("promoted %d released %d, want 0 and 1", p, r)
	}
}
