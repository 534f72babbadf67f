package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// H2 (hot.go): a hand-over that reaches the dispatcher after a claim read
// the hook's row from the store describes a row that is no longer fresh.
// Taken anyway, the next claim would start the delivery's attempt count
// again: a failing delivery would never run out of attempts.
func TestHot_AHandOverAfterAStoreClaimIsNotTaken(t *testing.T) {
	s := newScripted()
	s.fallback = errors.New("503")
	e := setupWith(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, dispatch.Options{
		// The second attempt waits at least 500 ms: the late hand-over
		// below lands before it.
		Retry: dispatch.RetryPolicy{Base: time.Second, Max: time.Second, MaxAttempts: 2},
	}, false)
	res := e.submit(t, "late", "")
	if m := s.next(t); m.Attempt != 1 {
		t.Fatalf("first attempt numbered %d", m.Attempt)
	}
	testutil.Eventually(t, 10*time.Second, "first attempt recorded", func() bool {
		dl := e.delivery(t, res.Seq)
		return dl != nil && dl.Attempts == 1 && dl.State == store.StateDue
	})
	// The hook as the commit path wrote it (no attempt yet), handed over late.
	e.d.Committed([]store.Committed{{Seq: res.Seq, DueAtMs: time.Now().UnixMilli(), Size: 4, Sinks: []store.HookSink{{Num: 0, ID: "out"}}}})
	if m := s.next(t); m.Attempt != 2 {
		t.Fatalf("second attempt numbered %d, want 2 (the late hand-over's fresh row was taken)", m.Attempt)
	}
	testutil.Eventually(t, 10*time.Second, "dead-lettered after its 2 attempts", func() bool {
		dl := e.delivery(t, res.Seq)
		return dl != nil && dl.State == store.StateDead && dl.Attempts == 2
	})
}

// H1 (hot.go): a resend rewrites a delivery row behind the cache's back, so
// it forgets the hook. Otherwise the other sink's delivery, recorded while
// the resend is in flight, finds every sink delivered in the cache and
// removes the hook under it: the resend's retry then finds no hook, and the
// resend the operator was told is queued is never made.
func TestHot_AResendWhileAnotherSinkIsPendingIsDelivered(t *testing.T) {
	boom := errors.New("connection reset")
	a, b := newScripted(nil, boom, nil), newScripted()
	b.block = make(chan struct{})
	e := setupWith(t, map[uint16]dispatch.Target{0: {ID: "a", Sink: a}, 1: {ID: "b", Sink: b}}, dispatch.Options{}, true)
	r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", ContentType: "text/plain",
		Body: []byte("two"), Sinks: []queue.SinkRef{{Num: 0, ID: "a"}, {Num: 1, ID: "b"}}}
	res, err := e.q.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	a.next(t)
	<-b.entered // b's attempt is in flight, held
	testutil.Eventually(t, 10*time.Second, "a's delivery recorded", func() bool {
		dl := e.delivery(t, res.Seq)
		return dl != nil && dl.State == store.StateDelivered
	})
	a.mu.Lock()
	a.block = make(chan struct{})
	a.mu.Unlock()
	rs, err := e.d.Resend(t.Context(), res.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	<-a.entered // the resend's attempt is in flight, held
	close(b.block)
	b.next(t)
	testutil.Eventually(t, 10*time.Second, "b's outcome recorded", func() bool {
		v, err := e.st.Get(store.DeliveryKey(res.Seq, 1))
		if err != nil {
			t.Fatal(err)
		}
		if v == nil {
			return true // the hook went (the defect)
		}
		dl, err := store.DecodeDelivery(v)
		return err == nil && dl.State == store.StateDelivered
	})
	a.mu.Lock()
	close(a.block)
	a.block = nil
	a.mu.Unlock()
	for i := 0; i < 2; i++ { // the failed try, then its retry
		if m := a.next(t); m.ReplayID != rs.ResendID {
			t.Fatalf("a's resend attempt %d has replay id %q, want %q", i+1, m.ReplayID, rs.ResendID)
		}
	}
	testutil.Eventually(t, 10*time.Second, "hook reclaimed once both are delivered", func() bool {
		return count(t, e.st, store.PrefixHook) == 0
	})
	if n := count(t, e.st, store.PrefixDelivery) + count(t, e.st, store.PrefixDue) + count(t, e.st, store.PrefixInflight) + count(t, e.st, store.PrefixAttempt) + count(t, e.st, store.PrefixDead); n != 0 {
		t.Fatalf("%d delivery/due/inflight/attempt/dead rows left", n)
	}
}

// H2 covers every write of a delivery row by the dispatcher, not only a
// claim's read (found in review): a hook dead-lettered and resent while its
// hand-over still waits to be taken must not come back as fresh, or its
// delivery loses the resend's replay id (and the hook counts as plain).
func TestHot_AHandOverAfterADeadLetterAndResendIsNotTaken(t *testing.T) {
	boom := errors.New("connection refused")
	s := newScripted(boom) // the first attempt fails and opens the breaker
	e := setupWith(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, dispatch.Options{
		BreakerFailures: 1, BreakerCooldown: 2 * time.Second,
	}, false)
	first := e.submit(t, "opens the breaker", "")
	s.next(t)
	testutil.Eventually(t, 10*time.Second, "first attempt recorded", func() bool {
		dl := e.delivery(t, first.Seq)
		return dl != nil && dl.Attempts == 1
	})
	// Parked behind the open breaker: due, never claimed.
	res := e.submit(t, "parked", "")
	if n, err := e.d.DeadLetterDue(t.Context(), map[uint16]bool{0: true}, "operator"); err != nil || n != 2 {
		t.Fatalf("dead-lettered %d rows, err %v; want 2", n, err)
	}
	rs, err := e.d.Resend(t.Context(), res.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.d.Committed([]store.Committed{{Seq: res.Seq, DueAtMs: time.Now().UnixMilli(), Size: 6, Sinks: []store.HookSink{{Num: 0, ID: "out"}}}})
	m := s.next(t) // the half-open probe, after the cooldown
	if m.Seq != res.Seq || m.ReplayID != rs.ResendID {
		t.Fatalf("probe delivered seq %d with replay id %q; want seq %d with %q", m.Seq, m.ReplayID, res.Seq, rs.ResendID)
	}
}
