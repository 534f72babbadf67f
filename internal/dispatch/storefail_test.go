package dispatch_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// Defect G. A failed fsync fences the queue; the fence's Store.Reopen then
// keeps failing, so for a while no DB generation is open. A delivery that
// finishes in that window must not crash the node: its outcome fails to
// record (its claim is held and the row stays due, for the next start)
// and the node stops through OnFatal — which the binary turns into exit
// status 75 — after the fence's reopen attempts. Before the fix
// Store.NewBatch returned nil in that window and the outcome's Delete on it
// panicked the process.
func TestDispatch_DeliveryFinishingWhileTheStoreCannotReopenDoesNotPanic(t *testing.T) {
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	t.Cleanup(func() { gate.FailOpens(false); gate.ReleaseAll() })
	fatal := make(chan error, 1)
	var d atomic.Pointer[dispatch.Dispatcher]
	q := testutil.StartQueue(t, st, queue.Options{
		OnFatal: func(err error) {
			select {
			case fatal <- err:
			default:
			}
		},
		OnDurable: func() {
			if p := d.Load(); p != nil {
				p.Wake()
			}
		},
	})
	rec := testutil.NewLogRecorder()
	s := newScripted()
	s.block = make(chan struct{})
	disp := dispatch.New(st, dispatch.Options{
		Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Logger: slog.New(rec),
		Poll:  10 * time.Millisecond,
		Retry: dispatch.RetryPolicy{Base: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 5},
	})
	d.Store(disp)
	if err := disp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(disp.Stop)
	e := &env{st: st, q: q, d: disp, gate: gate}

	e.submit(t, "in flight", "")
	// Wait until the sink holds the attempt, not merely until the row is
	// claimed: the attempt reads the hook from the store after the claim,
	// and under load that read could land in the window below and fail the
	// attempt before it reaches the sink.
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached the sink")
	}
	if g := disp.Gauges(); g.Inflight != 1 {
		t.Fatalf("inflight gauge while the sink holds the attempt = %d, want 1", g.Inflight)
	}

	// The next fsync fails and every reopen fails with it.
	gate.FailOpens(true)
	gate.FailNext(1)
	if !submitRefused(t, q) {
		t.FailNow()
	}
	testutil.Eventually(t, 10*time.Second, "a failed reopen (no DB generation open)", func() bool {
		return errors.Is(st.Failed(), store.ErrClosed)
	})
	// The delivery finishes in the window; recording its outcome fails
	// (the row stays due in the store, its claim held) and the loop
	// carries on.
	close(s.block)
	s.next(t)
	// The loop carries on: the outcome write is refused (and retried), no
	// panic. The delivery is still in flight, and the gauge says so.
	testutil.Eventually(t, 10*time.Second, "the outcome write refused", func() bool {
		return len(rec.Matching("recording delivery outcomes failed")) > 0
	})
	if g := disp.Gauges(); g.Inflight != 1 {
		t.Fatalf("inflight gauge while the outcome cannot be written = %d, want 1", g.Inflight)
	}
	select {
	case err := <-fatal:
		if !strings.Contains(err.Error(), "reopen store after write failure") {
			t.Fatalf("fatal: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the queue never gave up on the reopen (OnFatal, exit 75)")
	}
	// No caller gets a nil batch in the window, which lasts
	// after the fence gave up: a batch fails with an error.
	b := st.NewBatch()
	if b == nil {
		t.Fatal("NewBatch returned nil while no DB generation is open")
	}
	if err := st.Apply(b); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("apply in the window: %v, want store.ErrFailed", err)
	}
	_ = b.Close()
}

// A store that refuses writes (Pebble recorded a failed WAL fsync; the
// store comes back by Reopen, as the queue's fence does it) does not hold
// up the attempts of rows already durable: a claim writes nothing. Their
// outcomes wait, claims held, until the store is back, and are recorded
// then: the hooks are reclaimed. (Until the claim moved to memory it was a
// write, refused here; a refused claim let the scan cursor pass its rows,
// fixed then and moot now.)
func TestDispatch_AStoreRefusingWritesHoldsUpOnlyTheOutcomes(t *testing.T) {
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	// Two hooks due at two distinct milliseconds in the past.
	var clock atomic.Int64
	base := time.Now().Add(-time.Minute)
	clock.Store(base.UnixNano())
	q := testutil.StartQueue(t, st, queue.Options{Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	e := &env{st: st, q: q}
	first := e.submit(t, "first", "")
	clock.Store(base.Add(50 * time.Millisecond).UnixNano())
	second := e.submit(t, "second", "")

	// The next write fails: Scan still reads, every Apply is refused.
	gate.FailNext(1)
	if err := st.SyncWAL(); err == nil {
		t.Fatal("the injected fsync failure did not fail SyncWAL")
	}
	if st.Failed() == nil {
		t.Fatal("the store did not record the failed fsync")
	}

	rec := testutil.NewLogRecorder()
	s := newScripted()
	d := dispatch.New(st, dispatch.Options{
		Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Logger: slog.New(rec),
		Poll: 10 * time.Millisecond,
	})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	got := map[uint64]bool{}
	deadline := time.After(10 * time.Second)
	for !got[first.Seq] || !got[second.Seq] {
		select {
		case m := <-s.seen:
			got[m.Seq] = true
		case <-deadline:
			t.Fatalf("delivered seqs %v while the store refuses writes, want %d and %d", got, first.Seq, second.Seq)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the outcomes refused by the failed store", func() bool {
		return len(rec.Matching("recording delivery outcomes failed")) > 0
	})
	if g := d.Gauges(); g.Inflight != 2 {
		t.Fatalf("inflight gauge while the outcomes wait = %d, want 2", g.Inflight)
	}
	if err := st.Reopen(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the outcomes recorded once the store is back", func() bool {
		hooks, err := st.Count([]byte{store.PrefixHook})
		return err == nil && hooks == 0
	})
	if g := d.Gauges(); g.Inflight != 0 || g.Pending != 0 {
		t.Fatalf("gauges after the outcomes: inflight %d pending %d, want 0 and 0", g.Inflight, g.Pending)
	}
}

// An outcome that cannot be written (the store is being reopened by the
// queue's fence) leaves its row due in the store, its claim held. A fence that
// recovers never restarts the node, so the outcome must be written once the
// store is back: the hook is then reclaimed, with no restart and no row
// left due. (Before main's 24a3cbb the row stayed inflight until the
// next start.)
func TestDispatch_OutcomeLostToAStoreFaultIsRecordedOnceTheStoreIsBack(t *testing.T) {
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	t.Cleanup(func() { gate.FailOpens(false); gate.ReleaseAll() })
	var d atomic.Pointer[dispatch.Dispatcher]
	q := testutil.StartQueue(t, st, queue.Options{
		// Slow enough retries that the fence is still trying (not given up)
		// when the disk comes back below.
		FenceRetry: time.Second,
		OnDurable: func() {
			if p := d.Load(); p != nil {
				p.Wake()
			}
		},
	})
	rec := testutil.NewLogRecorder()
	s := newScripted()
	block := make(chan struct{})
	s.block = block
	disp := dispatch.New(st, dispatch.Options{
		Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Logger: slog.New(rec),
		Poll: 10 * time.Millisecond,
	})
	d.Store(disp)
	if err := disp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(disp.Stop)
	e := &env{st: st, q: q, d: disp, gate: gate}
	res := e.submit(t, "stranded", "")
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached the sink")
	}

	// A failed fsync fences the queue and its reopens fail for a while.
	gate.FailOpens(true)
	gate.FailNext(1)
	if !submitRefused(t, q) {
		t.FailNow()
	}
	testutil.Eventually(t, 10*time.Second, "a failed reopen (no DB generation open)", func() bool {
		return errors.Is(st.Failed(), store.ErrClosed)
	})
	// The attempt ends in the window; its outcome cannot be written.
	close(block)
	if m := s.next(t); m.Seq != res.Seq {
		t.Fatalf("first attempt for seq %d, want %d", m.Seq, res.Seq)
	}
	testutil.Eventually(t, 10*time.Second, "the outcome write refused by the failed store", func() bool {
		return len(rec.Matching("recording delivery outcomes failed")) > 0
	})

	// The disk comes back; the fence reopens and lifts. The outcome is
	// written and the delivered hook reclaimed, with no restart.
	gate.FailOpens(false)
	testutil.Eventually(t, 10*time.Second, "the hook reclaimed once the store is back", func() bool {
		// The fence may still be reopening: an error is "not yet".
		hooks, herr := st.Count([]byte{store.PrefixHook})
		due, derr := st.Count([]byte{store.PrefixDue})
		return herr == nil && derr == nil && hooks == 0 && due == 0
	})
	if g := disp.Gauges(); g.Inflight != 0 {
		t.Fatalf("inflight gauge after the outcome was written = %d, want 0", g.Inflight)
	}
}
