package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ankusa/ankusa/internal/queue"
)

// TestDual_OffsetNeverPassesARecordWhoseConfirmIsUnknown: a record whose
// local half failed and whose publish landed but lost its ack sits in the
// log only, at a position the writer never learnt. A later group confirmed
// in both places (at a higher position, as every publish after the lost one
// lands, and as pipelined publishes confirm out of order) must not carry
// the offset past it: boot recovery replays only what lies after the
// stored offset, so a crash would leave that carried record in neither
// place the ADR lets it be (section 3: carried to completion). The offset
// stays at what was confirmed before the record's first publish until the
// reconciler completes it.
func TestDual_OffsetNeverPassesARecordWhoseConfirmIsUnknown(t *testing.T) {
	e, _ := newRCDual(t, queue.Options{}, manual)
	ok := func(body string) {
		t.Helper()
		if s := answer(t, submitAsync(e.q, rec(body, ""))); s.err != nil {
			t.Fatalf("%s: %v", body, s.err)
		}
	}
	ok("one") // seq 1 at position 0

	// seq 2: its fsync fails (the fence removes its rows) and its publish
	// lands at position 1 with the ack lost: both halves failed, the record
	// in the log.
	e.gate.FailNext(1)
	e.log.TimeoutAfterAppendNext(1)
	if s := answer(t, submitAsync(e.q, rec("two", ""))); !errors.Is(s.err, queue.ErrStoreUnavailable) {
		t.Fatalf("two: %v, want store_unavailable", s.err)
	}
	waitFences(t, e.q, 1)
	if n := e.log.Published(); n != 2 {
		t.Fatalf("log records %d, want 2 (seq 2 landed)", n)
	}

	ok("three") // seq 3 at position 2, confirmed in both places
	s := e.dual(t)
	e.checkMarks(t, s)
	if s.Offset != 0 {
		t.Fatalf("offset %d with seq 2 in the log only at position 1 and its confirm unknown, want 0", s.Offset)
	}

	e.q.Reconcile(context.Background()) // local half of 2, then its republish at position 3
	e.pendingEmpty(t)
	s = e.dual(t)
	e.checkMarks(t, s)
	if s.Watermark != 3 || s.Offset != 3 {
		t.Fatalf("after the reconciler: watermark %d offset %d, want 3 and 3", s.Watermark, s.Offset)
	}
}
