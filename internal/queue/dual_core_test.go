package queue_test

// Defects of the dual commit path found by audit (issue 10), each proved
// by a case that failed before its fix, and the ADR cases of the ack path
// that were missing. docs/testing.md maps each one.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
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

// openGate makes the breaker open (one failed publish with
// BreakerFailures 1), unless a failed publish already opened it.
func openGate(t *testing.T, e *dualEnv) {
	t.Helper()
	if e.dual(t).GateOpen {
		return
	}
	e.log.FailNext(1, intake.Unavailable)
	if s := answer(t, submitAsync(e.q, rec("opens the gate", ""))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("failing publish: %+v %v, want intake_unavailable", s.res, s.err)
	}
	if !e.dual(t).GateOpen {
		t.Fatal("gate closed after breaker_failures failed publishes")
	}
}

// ADR ack-path case "breaker opens after breaker_failures, half-opens one
// batch, closes on confirm and a down intake never degrades to disk-only",
// with the clock under the test's control: several requests while open get
// zero 201 and consume no seq; a probe that fails reopens the gate for
// another probe_ms; a probe that is confirmed closes it; and (defect B) a
// probe group that writes nothing — every record a duplicate, refused as
// pending, too large — releases the probe so the next real group probes.
// Before the fix such a probe left the gate half-open for ever: every later
// hook was refused with 503.
func TestDual_BreakerOpensHalfOpensOneBatchAndClosesOnConfirm(t *testing.T) {
	const probe = time.Second
	newEnv := func(t *testing.T) (*dualEnv, *rcClock) {
		clock := newRCClock()
		e, _ := newRCDual(t, queue.Options{Now: clock.now}, func(d *queue.DualOptions) {
			// No background reconciler: a confirmed republish also closes
			// the gate, and these cases are about the commit path's probe.
			d.ReconcileEvery = -1
			d.BreakerFailures = 1
			d.Probe = probe
			d.MaxRecordBytes = 1024
		})
		return e, clock
	}

	t.Run("open refuses, failed probe reopens, confirmed probe closes", func(t *testing.T) {
		e, clock := newEnv(t)
		openGate(t, e)
		next, published := e.q.Stats().NextSeq, e.log.Published()
		for i := range 5 {
			clock.advance(probe / 10)
			if s := answer(t, submitAsync(e.q, rec("while open", ""))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
				t.Fatalf("request %d while open: %+v %v, want intake_unavailable (zero 201)", i, s.res, s.err)
			}
		}
		if e.q.Stats().NextSeq != next || e.log.Published() != published {
			t.Fatal("an open gate consumed a seq or published")
		}
		// Half-open: the probe fails, so the gate reopens for a full probe_ms.
		clock.advance(probe)
		e.log.FailNext(1, intake.Unavailable)
		if s := answer(t, submitAsync(e.q, rec("probe 1", ""))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
			t.Fatalf("failing probe: %+v %v, want intake_unavailable", s.res, s.err)
		}
		if !e.dual(t).GateOpen {
			t.Fatal("a failed probe did not reopen the gate")
		}
		clock.advance(probe / 2)
		if s := answer(t, submitAsync(e.q, rec("too early", ""))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
			t.Fatalf("half a probe_ms after a failed probe: %+v %v, want intake_unavailable", s.res, s.err)
		}
		clock.advance(probe / 2)
		s := answer(t, submitAsync(e.q, rec("probe 2", "")))
		if s.err != nil {
			t.Fatalf("confirmed probe: %v, want 201", s.err)
		}
		if e.dual(t).GateOpen {
			t.Fatal("gate still open after a confirmed probe")
		}
		if e.inLog(s.res.ID) != 1 {
			t.Fatal("the probe's 201 has no record in the log")
		}
		if s := answer(t, submitAsync(e.q, rec("after", ""))); s.err != nil {
			t.Fatalf("after the gate closed: %v", s.err)
		}
	})

	writesNothing := []struct {
		name  string
		setup func(t *testing.T, e *dualEnv) // runs before the gate opens
		probe *queue.Record
		want  error // the probe record's own answer; nil = 201 duplicate
	}{
		{"every record a duplicate", func(t *testing.T, e *dualEnv) {
			if s := answer(t, submitAsync(e.q, rec("body", "evt_dup"))); s.err != nil {
				t.Fatal(s.err)
			}
		}, rec("body", "evt_dup"), nil},
		{"every record refused as pending", func(t *testing.T, e *dualEnv) {
			e.log.FailNext(1, intake.Unavailable)
			if s := answer(t, submitAsync(e.q, rec("body", "evt_pend"))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
				t.Fatal(s.err)
			}
		}, rec("body", "evt_pend"), queue.ErrIntakePending},
		{"every record too large", nil, rec(string(make([]byte, 2048)), ""), queue.ErrIntakeUnavailable},
	}
	for _, tc := range writesNothing {
		t.Run("probe group that "+tc.name+" does not wedge the gate", func(t *testing.T) {
			e, clock := newEnv(t)
			if tc.setup != nil {
				tc.setup(t, e)
			}
			openGate(t, e)
			clock.advance(probe)
			next := e.q.Stats().NextSeq
			s := answer(t, submitAsync(e.q, tc.probe))
			if tc.want == nil && (s.err != nil || !s.res.Duplicate) {
				t.Fatalf("probe group: %+v %v, want 201 duplicate", s.res, s.err)
			}
			if tc.want != nil && !errors.Is(s.err, tc.want) {
				t.Fatalf("probe group: %+v %v, want %v", s.res, s.err, tc.want)
			}
			if e.q.Stats().NextSeq != next {
				t.Fatal("the probe group wrote a record; this case needs one that writes nothing")
			}
			// The next real group is the probe; the log is up, so it closes the gate.
			r := answer(t, submitAsync(e.q, rec("next real group", "")))
			if r.err != nil {
				t.Fatalf("the group after a probe that wrote nothing: %v, want 201 (the gate is wedged)", r.err)
			}
			if e.dual(t).GateOpen || e.inLog(r.res.ID) != 1 {
				t.Fatalf("gate open %v, record in the log %d; want closed and 1", e.dual(t).GateOpen, e.inLog(r.res.ID))
			}
		})
	}
}

// A refusal keeps its cause: a caller (the edge, a log line, a test) can
// ask errors.Is(err, store.ErrFailed) or errors.As for the intake's class
// through the queue's own sentinel. Before the fix the queue wrapped causes
// as "%w: %v", which flattened them to text.
func TestQueue_RefusalsKeepTheirCause(t *testing.T) {
	tests := []struct {
		name   string
		dual   bool
		inject func(e *dualEnv)
		want   error
		check  func(error) bool
		what   string
	}{
		{"disk: failed fsync", false, func(e *dualEnv) { e.gate.FailNext(1) }, queue.ErrStoreUnavailable,
			func(err error) bool { return errors.Is(err, store.ErrFailed) }, "errors.Is(err, store.ErrFailed)"},
		{"dual: failed local fsync", true, func(e *dualEnv) { e.gate.FailNext(1) }, queue.ErrStoreUnavailable,
			func(err error) bool { return errors.Is(err, store.ErrFailed) }, "errors.Is(err, store.ErrFailed)"},
		{"dual: failed publish", true, func(e *dualEnv) { e.log.FailNext(1, intake.Throttled) }, queue.ErrIntakeUnavailable,
			func(err error) bool { c, _ := intake.ClassOf(err); return c == intake.Throttled }, "intake.ClassOf(err) == throttled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var e *dualEnv
			if tc.dual {
				e, _ = newRCDual(t, queue.Options{}, manual)
			} else {
				gate := testutil.NewWALSyncGate()
				st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
				e = &dualEnv{st: st, q: testutil.StartQueue(t, st, queue.Options{}), gate: gate}
			}
			tc.inject(e)
			s := answer(t, submitAsync(e.q, rec("body", "")))
			if !errors.Is(s.err, tc.want) {
				t.Fatalf("err = %v, want %v", s.err, tc.want)
			}
			if !tc.check(s.err) {
				t.Fatalf("err = %v: %s is false, the cause was flattened", s.err, tc.what)
			}
		})
	}
}

// newClockedDualDispatch is newRCDualDispatch on a clock the test moves
// (the queue, the dual commit and dispatch share it).
func newClockedDualDispatch(t *testing.T, clock *rcClock) (*dualEnv, *countingSink) {
	t.Helper()
	var disp atomic.Pointer[dispatch.Dispatcher]
	e, _ := newRCDual(t, queue.Options{Now: clock.now, OnDurable: func() {
		if d := disp.Load(); d != nil {
			d.Wake()
		}
	}}, manual)
	cs := newCountingSink()
	d := dispatch.New(e.st, dispatch.Options{
		Targets:   map[uint16]dispatch.Target{sinks[0].Num: {ID: sinks[0].ID, Sink: cs}},
		Durable:   e.q.Durable,
		OnReclaim: e.q.Reclaimed,
		Poll:      20 * time.Millisecond,
		Retry:     dispatch.RetryPolicy{Base: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 5},
		Logger:    testutil.Logger(t),
		Now:       clock.now,
	})
	disp.Store(d)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return e, cs
}

// Defect E. The reconciler completes the local half of a log-only record
// with its held ops, whose due key carries the original commit time. By
// then dispatch's forward-only scan cursor has moved past that time (later
// hooks were delivered), so before the fix the hook was durable, its retry
// answered 201 duplicate, and it was never delivered until a restart.
func TestDual_CompletedLocalHalfBehindTheScanCursorIsDelivered(t *testing.T) {
	clock := newRCClock()
	e, cs := newClockedDualDispatch(t, clock)
	e.gate.FailNext(1)
	if s := answer(t, submitAsync(e.q, rec("late", "evt_e"))); !errors.Is(s.err, queue.ErrStoreUnavailable) {
		t.Fatalf("first attempt: %v, want store_unavailable", s.err)
	}
	waitFences(t, e.q, 1)
	orig := e.onlyRecord(t) // in the log only (half_log)

	// Later hooks are committed and delivered: the cursor passes the
	// original's commit time.
	for i := range 3 {
		clock.advance(time.Second)
		s := answer(t, submitAsync(e.q, rec("later", "")))
		if s.err != nil {
			t.Fatalf("later hook %d: %v", i, s.err)
		}
		if id := e.waitDelivered(t, cs); id != s.res.ID {
			t.Fatalf("delivered %x, want the later hook %x", id, s.res.ID)
		}
	}

	e.q.Reconcile(context.Background())
	// Not read back from the store: once delivered, the hook is reclaimed.
	if e.dual(t).Pending.Records != 0 {
		t.Fatal("the reconciler did not complete the local half")
	}
	select {
	case id := <-cs.seen:
		if id != orig.ID {
			t.Fatalf("delivered %x, want the completed hook %x", id, orig.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the completed local half was not delivered (its due row is behind the scan cursor)")
	}
	if after := answer(t, submitAsync(e.q, rec("late", "evt_e"))); after.err != nil || !after.res.Duplicate || after.res.ID != orig.ID {
		t.Fatalf("retry: %+v %v, want 201 duplicate of %x", after.res, after.err, orig.ID)
	}
}

// ADR ack-path case "ack waits for both halves and costs the max, not the
// sum": the local fsync stalled 30 ms and the publish confirmed after 30 ms
// give an ack within 45 ms (the sequential figure is 60 ms). Each ack is
// also at least 30 ms: it waited for both. The bound is asserted on the
// best of several sequential commits, because this machine is shared: a
// scheduling hiccup can slow one commit, but no run of a commit that pays
// the sum can ever come in under 60 ms.
func TestDual_AckWaitsForBothHalvesAndCostsTheMaxNotTheSum(t *testing.T) {
	const half, bound, rounds = 30 * time.Millisecond, 45 * time.Millisecond, 7
	e, _ := newRCDual(t, queue.Options{}, manual)
	e.gate.StallSyncs(half)
	e.log.SetConfirmLatency(half)
	if s := answer(t, submitAsync(e.q, rec("warm-up", ""))); s.err != nil {
		t.Fatal(s.err)
	}
	best := time.Hour
	var all []time.Duration
	for i := range rounds {
		start := time.Now()
		res, err := e.q.Submit(context.Background(), rec("timed", ""))
		took := time.Since(start)
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if e.inLog(res.ID) != 1 || !hookPresent(t, e.st, res.ID) {
			t.Fatalf("commit %d acked without both halves", i)
		}
		if took < half {
			t.Fatalf("commit %d acked after %s, before one half's %s could have passed", i, took, half)
		}
		best = min(best, took)
		all = append(all, took)
	}
	t.Logf("ack latencies with a %s fsync and a %s confirm: %v (best %s)", half, half, all, best)
	if best > bound {
		t.Fatalf("best ack of %d took %s, want ≤ %s (the halves did not overlap: the sum is %s)", rounds, best, bound, 2*half)
	}
}

// ADR ack-path case "both halves fail: the record is carried and completes
// when either recovers", the order the other tests do not cover: the LOG
// recovers first while the store still fails. The log half is completed at
// once (the hook is safe in the log even though the node cannot write
// locally), and the local half once the store is back. Before the fix the
// reconciler waited on the fenced writer and republished nothing until
// the store recovered.
func TestDual_BothHalvesFailAndTheLogRecoversFirstWhileTheStoreStillFails(t *testing.T) {
	e, obs := newRCDual(t, queue.Options{}, manual)
	e.gate.FailNext(1 << 20) // the store keeps failing until StopFailing
	e.log.FailNext(1, intake.Unavailable)
	s := answer(t, submitAsync(e.q, rec("body", "evt_bl")))
	if !errors.Is(s.err, queue.ErrStoreUnavailable) {
		t.Fatalf("both failed: %v, want store_unavailable", s.err)
	}
	if d := e.dual(t); d.Pending.Records != 1 || e.log.Published() != 0 {
		t.Fatalf("after both failed: pending %d log %d, want the carried record and an empty log", d.Pending.Records, e.log.Published())
	}
	// The log is back (its one fault is used up); the store still fails.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.q.Reconcile(ctx)
	if ctx.Err() != nil {
		t.Fatal("the reconciler pass blocked on the failing store")
	}
	r := e.onlyRecord(t)
	if d := e.dual(t); d.Pending.Records != 1 || obs.reconciledHalf("log") != 1 {
		t.Fatalf("log recovered first: pending %d, log halves reconciled %d; want the record still carried (local half owed) and 1", d.Pending.Records, obs.reconciledHalf("log"))
	}
	if e.gate.Failed() == 0 || !e.q.Stats().Fenced {
		t.Fatal("the store was meant to be still failing")
	}
	if retry := answer(t, submitAsync(e.q, rec("body", "evt_bl"))); retry.err == nil {
		t.Fatalf("retry while the local half is owed: %+v, want a 503", retry.res)
	}
	// The store recovers: the fence lifts and the local half completes.
	e.gate.StopFailing()
	testutil.Eventually(t, 10*time.Second, "the fence lifted", func() bool { return !e.q.Stats().Fenced })
	e.q.Reconcile(context.Background())
	e.pendingEmpty(t)
	if env, _ := e.stored(t, r.Seq); env == nil || env.ID != r.ID {
		t.Fatal("the local half was not completed with the log record's seq and id")
	}
	if after := answer(t, submitAsync(e.q, rec("body", "evt_bl"))); after.err != nil || !after.res.Duplicate || after.res.ID != r.ID {
		t.Fatalf("retry after both halves: %+v %v, want 201 duplicate of %x", after.res, after.err, r.ID)
	}
	if e.hooks(t) != 1 || e.log.Published() != 1 {
		t.Fatalf("hooks %d, log records %d; want 1 and 1", e.hooks(t), e.log.Published())
	}
	e.foldMatches(t)
}

// The reconciler asks an unfenced writer for a local half, and that very
// write fails: the writer must answer the pass and fence afterwards, not
// inside the request. Before the fix completeLocal ran the whole fence
// (reopen, cleanup, retry for as long as the disk fails) before replying,
// and the pass waited on the reply without its ctx: the pass, and the log
// halves after it, were held for as long as the store failed (seen as a
// 10-minute hang of the test above under -race load, when the pass won
// the race with the first fence).
func TestDual_LocalHalfFailingInsideTheRequestDoesNotHoldThePass(t *testing.T) {
	e, _ := newRCDual(t, queue.Options{}, manual)
	// Both halves fail once; the fence that follows recovers.
	e.gate.FailNext(1)
	e.log.FailNext(1, intake.Unavailable)
	s := answer(t, submitAsync(e.q, rec("body", "evt_in")))
	if !errors.Is(s.err, queue.ErrStoreUnavailable) {
		t.Fatalf("both failed: %v, want store_unavailable", s.err)
	}
	id, ok := queue.Carried(s.err)
	if !ok {
		t.Fatalf("both failed: %v, want a carried record", s.err)
	}
	testutil.Eventually(t, 10*time.Second, "the first fence lifted", func() bool {
		st := e.q.Stats()
		return st.Fences == 1 && !st.Fenced
	})
	// Now the store fails again, under an unfenced writer.
	e.gate.FailNext(1 << 20)
	t.Cleanup(e.gate.StopFailing) // runs before the queue's Close
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.q.Reconcile(ctx)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the reconciler pass is held by a fence that began inside its local-half request")
	}
	if d := e.dual(t); d.Pending.Records != 1 || e.log.Published() != 1 {
		t.Fatalf("after the pass: pending %d log %d, want the record carried (local half owed) and its log half done", d.Pending.Records, e.log.Published())
	}
	e.gate.StopFailing()
	testutil.Eventually(t, 20*time.Second, "the local half completed once the store is back", func() bool {
		e.q.Reconcile(context.Background())
		return e.dual(t).Pending.Records == 0 && hookPresent(t, e.st, id)
	})
}
