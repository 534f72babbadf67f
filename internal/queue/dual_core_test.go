package queue_test

// Defects of the dual commit path found by audit (issue 10), each proved
// by a case that failed before its fix, and the ADR cases of the ack path
// that were missing. docs/testing.md maps each one.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/queue"
)

// Defect A. ADR section 3: a 201 duplicate is only ever sent for a hook
// confirmed in both places. Past intake.reconcile_deadline_ms a stuck
// original releases its claim, and the provider's retry is admitted as a
// new hook with the same idempotency key (a second hook id, never an acked
// loss). Before the fix the retry found the stuck original's local dedupe
// row and was answered 201 duplicate on the local fsync alone.
func TestDual_RetryPastTheReconcileDeadlineIsAdmittedAsANewHook(t *testing.T) {
	clock := newRCClock()
	const deadline = time.Second
	e, _ := newRCDual(t, queue.Options{Now: clock.now}, func(d *queue.DualOptions) {
		d.ReconcileEvery = -1
		d.ReconcileDeadline = deadline
		d.BreakerFailures = 100
	})
	// The permanent class: the log refuses this record (as a JetStream
	// stream whose max message size is below the body would).
	e.log.FailNext(1, intake.Permanent)
	first := answer(t, submitAsync(e.q, rec("body", "evt_stuck")))
	if !errors.Is(first.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("first attempt: %+v %v, want intake_unavailable", first.res, first.err)
	}
	orig := e.dual(t)
	if orig.Pending.Records != 1 || e.hooks(t) != 1 {
		t.Fatalf("after the refused publish: pending %d hooks %d, want the carried original (1, 1)", orig.Pending.Records, e.hooks(t))
	}

	// Within the deadline the original still holds the key.
	clock.advance(deadline / 2)
	if r := answer(t, submitAsync(e.q, rec("body", "evt_stuck"))); !errors.Is(r.err, queue.ErrIntakePending) {
		t.Fatalf("retry within the deadline: %+v %v, want intake_pending", r.res, r.err)
	}

	// 1.5 s after the original: past the deadline, the claim is released.
	clock.advance(deadline)
	retry := answer(t, submitAsync(e.q, rec("body", "evt_stuck")))
	if retry.err != nil || retry.res.Duplicate {
		t.Fatalf("retry past the deadline: %+v %v, want a new 201 (not a duplicate of the unconfirmed original)", retry.res, retry.err)
	}
	if e.inLog(retry.res.ID) != 1 {
		t.Fatalf("the admitted retry %x has %d records in the log, want 1", retry.res.ID, e.inLog(retry.res.ID))
	}
	if e.hooks(t) != 2 {
		t.Fatalf("hooks = %d, want 2 (the stuck original and the retry, same idempotency key)", e.hooks(t))
	}
	// The original is never dropped: once the log takes it, it completes.
	if s := e.dual(t); s.Pending.Records != 1 || s.Pending.Stuck != 1 {
		t.Fatalf("the stuck original: pending %d stuck %d, want 1 and 1", s.Pending.Records, s.Pending.Stuck)
	}
	e.q.Reconcile(context.Background())
	e.pendingEmpty(t)
	// Now every hook holding the key is confirmed: a later retry is a
	// duplicate, and what it names is in the log.
	again := answer(t, submitAsync(e.q, rec("body", "evt_stuck")))
	if again.err != nil || !again.res.Duplicate {
		t.Fatalf("retry once both are confirmed: %+v %v, want 201 duplicate", again.res, again.err)
	}
	if e.inLog(again.res.ID) != 1 {
		t.Fatalf("the duplicate names %x, which has %d records in the log", again.res.ID, e.inLog(again.res.ID))
	}
	e.foldMatches(t)
}
