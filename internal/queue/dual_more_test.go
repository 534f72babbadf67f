package queue_test

// The reconciler of wal.type: dual, named after the ADR's
// reconciler_test.exs cases (docs/testing.md maps each one), plus the
// watermark and offset rows and the per-item results of a mixed group.
// Like dual_test.go, every case is driven by the memory log's fault
// injection or the WAL sync gate, one half at a time, and asserts on what a
// consumer would count (hook and delivery rows, records in the log, the
// pending set), not only on return values.

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// rcClock is a clock that moves only when the test says so: the age of a
// pending entry and a Retry-After hold are then exact, with no sleep.
type rcClock struct{ ns atomic.Int64 }

func newRCClock() *rcClock {
	c := &rcClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *rcClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *rcClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// rcObserver records the dual commit's measurements and announces every
// publish outcome (the commit's and the reconciler's) on a channel.
type rcObserver struct {
	mu         sync.Mutex
	classes    map[string]int
	reconciled map[string]int
	refused    map[string]int
	publishes  chan string
}

func newRCObserver() *rcObserver {
	return &rcObserver{
		classes: map[string]int{}, reconciled: map[string]int{}, refused: map[string]int{},
		publishes: make(chan string, 1024),
	}
}

func (o *rcObserver) IntakePublish(_ time.Duration, class string) {
	o.mu.Lock()
	o.classes[class]++
	o.mu.Unlock()
	select {
	case o.publishes <- class:
	default:
	}
}

func (o *rcObserver) IntakeRefused(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refused[reason]++
}

func (o *rcObserver) IntakeReconciled(half string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reconciled[half]++
}

func (o *rcObserver) reconciledHalf(half string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reconciled[half]
}

func (o *rcObserver) class(c string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.classes[c]
}

// nextPublish waits for the next publish outcome.
func (o *rcObserver) nextPublish(t *testing.T) string {
	t.Helper()
	return testutil.Receive(t, o.publishes, "no publish attempt")
}

// noPublish fails if a publish is attempted within a short window. Like
// notYet it can only miss a bug, never fail a correct run: it is used
// where the code under test must not publish at all until the test moves
// the clock.
func (o *rcObserver) noPublish(t *testing.T, what string) {
	t.Helper()
	select {
	case c := <-o.publishes:
		t.Fatalf("%s: a publish was attempted (outcome %s)", what, c)
	case <-time.After(50 * time.Millisecond):
	}
}

// newRCDual is newDual with the queue's own options too (a clock, group
// sizing). The observer of the dual commit is always an rcObserver.
func newRCDual(t *testing.T, qopts queue.Options, mod func(*queue.DualOptions)) (*dualEnv, *rcObserver) {
	t.Helper()
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	lg, err := memory.Open(memory.Options{Dir: filepath.Join(t.TempDir(), "intake"), Node: "node-a", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	obs := newRCObserver()
	d := &queue.DualOptions{
		Intake: lg, Node: "node-a", PublishTimeout: 500 * time.Millisecond,
		BreakerFailures: 3, Probe: time.Hour, ReconcileEvery: 5 * time.Millisecond,
		Observer: obs,
	}
	if mod != nil {
		mod(d)
	}
	qopts.Dual = d
	sig := newGroupSignal()
	if qopts.Observer == nil {
		qopts.Observer = sig
	}
	q := testutil.StartQueue(t, st, qopts)
	t.Cleanup(func() { gate.ReleaseAll(); lg.Unhang() })
	return &dualEnv{st: st, q: q, log: lg, gate: gate, sig: sig}, obs
}

func manual(d *queue.DualOptions) { d.ReconcileEvery = -1 }

func (e *dualEnv) dual(t *testing.T) queue.DualStats {
	t.Helper()
	s, ok := e.q.Dual()
	if !ok {
		t.Fatal("Dual() reports wal.type: disk")
	}
	return s
}

func (e *dualEnv) rows(t *testing.T, prefix byte) uint64 {
	t.Helper()
	n, err := e.st.Count([]byte{prefix})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// foldMatches checks that the queue's counters equal a count of the rows
// (the ADR's "counters equal a fold"): nothing was applied twice and
// nothing counted that is not there.
func (e *dualEnv) foldMatches(t *testing.T) {
	t.Helper()
	s := e.q.Stats()
	if h, d := e.rows(t, store.PrefixHook), e.rows(t, store.PrefixDelivery); s.Hooks != h || s.Deliveries != d {
		t.Fatalf("counters hooks=%d deliveries=%d, rows hooks=%d deliveries=%d", s.Hooks, s.Deliveries, h, d)
	}
}

// stored reads the envelope at seq; nil when there is no hook row.
func (e *dualEnv) stored(t *testing.T, seq uint64) (*store.Envelope, []byte) {
	t.Helper()
	v, err := e.st.Get(store.HookKey(seq))
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return nil, nil
	}
	env, err := store.DecodeEnvelope(v)
	if err != nil {
		t.Fatalf("hook at seq %d: %v", seq, err)
	}
	return env, v
}

// onlyRecord returns the log's one record (there must be exactly one).
func (e *dualEnv) onlyRecord(t *testing.T) intake.Record {
	t.Helper()
	recs := e.log.Records()
	if len(recs) != 1 {
		t.Fatalf("records in the log = %d, want 1", len(recs))
	}
	return recs[0]
}

func TestReconciler_CompletesLogHalfAfterIntakeReturns(t *testing.T) {
	e, obs := newRCDual(t, queue.Options{}, manual)
	// The commit's publish and the first republish fail: the log is down.
	e.log.FailNext(2, intake.Unavailable)
	first := answer(t, submitAsync(e.q, rec("body", "evt_log")))
	if !errors.Is(first.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("first attempt: %v, want intake_unavailable", first.err)
	}
	if e.hooks(t) != 1 || e.log.Published() != 0 || e.dual(t).Pending.Records != 1 {
		t.Fatalf("half_local: hooks %d, log %d, pending %d; want 1, 0, 1", e.hooks(t), e.log.Published(), e.dual(t).Pending.Records)
	}

	e.q.Reconcile(context.Background())
	if e.log.Published() != 0 || e.dual(t).Pending.Records != 1 || e.hooks(t) != 1 {
		t.Fatal("a republish the log refused completed or dropped the record")
	}

	// The log is back: one pass completes the log half.
	e.q.Reconcile(context.Background())
	if n := e.dual(t).Pending.Records; n != 0 {
		t.Fatalf("pending after the log returned = %d, want 0", n)
	}
	r := e.onlyRecord(t)
	env, raw := e.stored(t, r.Seq)
	if env == nil || env.ID != r.ID {
		t.Fatalf("the log's record (seq %d, id %x) is not the stored hook", r.Seq, r.ID)
	}
	if !bytes.Equal(r.Value, raw) || r.Node != "node-a" || r.Kind != intake.KindHook || r.Version != intake.RecordVersion {
		t.Fatalf("the republished record is not the stored envelope: %+v", r)
	}
	if got := obs.reconciledHalf("log"); got != 1 {
		t.Fatalf("reconciled{half=log} = %d, want 1", got)
	}
	if got := obs.reconciledHalf("local"); got != 0 {
		t.Fatalf("reconciled{half=local} = %d, want 0 (the local half never failed)", got)
	}

	// Completed means done: another pass publishes nothing.
	e.q.Reconcile(context.Background())
	if e.log.Published() != 1 {
		t.Fatalf("log records after an idle pass = %d, want 1", e.log.Published())
	}
	after := answer(t, submitAsync(e.q, rec("body", "evt_log")))
	if after.err != nil || !after.res.Duplicate || after.res.ID != r.ID {
		t.Fatalf("retry after the reconcile: %+v %v, want 201 duplicate of %x", after.res, after.err, r.ID)
	}
	if e.hooks(t) != 1 {
		t.Fatalf("hook ids for one dedupe key = %d, want 1", e.hooks(t))
	}
	e.foldMatches(t)
}

func TestReconciler_CompletesLocalHalfOnceStoreWriteSucceeds(t *testing.T) {
	e, obs := newRCDual(t, queue.Options{}, manual)
	e.gate.FailNext(1)
	first := answer(t, submitAsync(e.q, rec("body", "evt_local")))
	if !errors.Is(first.err, queue.ErrStoreUnavailable) {
		t.Fatalf("first attempt: %v, want store_unavailable", first.err)
	}
	waitFences(t, e.q, 1)
	r := e.onlyRecord(t) // half_log: in the log, not in the store
	if env, _ := e.stored(t, r.Seq); env != nil || e.hooks(t) != 0 {
		t.Fatal("the fence left the failed group's hook in the store")
	}

	// The reconciler's synced write is held at its fsync: until it
	// returns, the local half is not confirmed and the record stays
	// pending (the watermark stays below it).
	e.gate.Hold()
	done := make(chan struct{})
	go func() { defer close(done); e.q.Reconcile(context.Background()) }()
	release := e.gate.Held(t)
	if s := e.dual(t); s.Pending.Records != 1 || s.Watermark >= r.Seq {
		t.Fatalf("while the local write syncs: pending %d, watermark %d; want 1 and < %d", s.Pending.Records, s.Watermark, r.Seq)
	}
	e.gate.Open()
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Reconcile did not return after the fsync")
	}

	s := e.dual(t)
	if s.Pending.Records != 0 || s.Watermark != r.Seq {
		t.Fatalf("after the write: pending %d, watermark %d; want 0 and %d", s.Pending.Records, s.Watermark, r.Seq)
	}
	// Written with the original seq and id, once.
	env, raw := e.stored(t, r.Seq)
	if env == nil || env.ID != r.ID || !bytes.Equal(raw, r.Value) {
		t.Fatalf("local half at seq %d is not the log's record", r.Seq)
	}
	if got := obs.reconciledHalf("local"); got != 1 {
		t.Fatalf("reconciled{half=local} = %d, want 1", got)
	}
	if e.rows(t, store.PrefixHook) != 1 || e.rows(t, store.PrefixDelivery) != uint64(len(sinks)) {
		t.Fatalf("rows: hooks %d deliveries %d; want 1 and %d", e.rows(t, store.PrefixHook), e.rows(t, store.PrefixDelivery), len(sinks))
	}
	e.foldMatches(t)
	if e.log.Published() != 1 {
		t.Fatalf("log records = %d, want 1 (the log half was never redone)", e.log.Published())
	}
	after := answer(t, submitAsync(e.q, rec("body", "evt_local")))
	if after.err != nil || !after.res.Duplicate || after.res.ID != r.ID || after.res.Seq != r.Seq {
		t.Fatalf("retry after the reconcile: %+v %v, want 201 duplicate of %x at seq %d", after.res, after.err, r.ID, r.Seq)
	}
}

// The reconciler's own synced write fails at its fsync after the rows
// reached the file, so the reopened store shows them while the record is
// still marked local-missing. The next pass must find them with its point
// read and write nothing.
func TestReconciler_DoesNotReapplyALocalHalfThatLanded(t *testing.T) {
	e, obs := newRCDual(t, queue.Options{}, manual)
	e.gate.FailNext(1)
	if s := answer(t, submitAsync(e.q, rec("body", "evt_landed"))); !errors.Is(s.err, queue.ErrStoreUnavailable) {
		t.Fatalf("first attempt: %v, want store_unavailable", s.err)
	}
	waitFences(t, e.q, 1)
	r := e.onlyRecord(t)

	e.gate.FailNext(1)
	e.q.Reconcile(context.Background()) // the write fails; the writer fences and reopens (after replying)
	waitFences(t, e.q, 2)
	if st := e.q.Stats(); st.Fences != 2 || st.Fenced {
		t.Fatalf("after the failed local write: %+v, want a second, lifted fence", st)
	}
	if s := e.dual(t); s.Pending.Records != 1 {
		t.Fatalf("pending after a failed local write = %d, want the record kept", s.Pending.Records)
	}
	if env, _ := e.stored(t, r.Seq); env == nil || env.ID != r.ID {
		t.Fatal("precondition: the failed synced write's rows are not visible after the reopen " +
			"(errorfs fails the sync after the write reached the file); this case no longer constructs a landed local half")
	}

	e.q.Reconcile(context.Background())
	e.q.Reconcile(context.Background())
	if s := e.dual(t); s.Pending.Records != 0 || s.Watermark != r.Seq {
		t.Fatalf("after reconcile: pending %d, watermark %d; want 0 and %d", s.Pending.Records, s.Watermark, r.Seq)
	}
	if got := obs.reconciledHalf("local"); got != 0 {
		t.Fatalf("reconciled{half=local} = %d, want 0: the point read found the rows, nothing is re-applied", got)
	}
	if e.rows(t, store.PrefixHook) != 1 || e.rows(t, store.PrefixHookID) != 1 || e.rows(t, store.PrefixDelivery) != uint64(len(sinks)) {
		t.Fatalf("rows: hooks %d ids %d deliveries %d; want 1, 1 and %d",
			e.rows(t, store.PrefixHook), e.rows(t, store.PrefixHookID), e.rows(t, store.PrefixDelivery), len(sinks))
	}
	e.foldMatches(t)
	after := answer(t, submitAsync(e.q, rec("body", "evt_landed")))
	if after.err != nil || !after.res.Duplicate || after.res.ID != r.ID {
		t.Fatalf("retry: %+v %v, want 201 duplicate of %x", after.res, after.err, r.ID)
	}
}

func TestReconciler_PermanentClassGoesStraightToStuckAndIsNotDropped(t *testing.T) {
	for _, class := range []intake.Class{intake.Permanent, intake.NotFound} {
		t.Run(class.String(), func(t *testing.T) {
			// The deadline is far away: only the class can make it stuck.
			e, obs := newRCDual(t, queue.Options{}, func(d *queue.DualOptions) {
				d.ReconcileEvery = -1
				d.ReconcileDeadline = time.Hour
				d.BreakerFailures = 100
			})
			e.log.FailNext(3, class)
			if s := answer(t, submitAsync(e.q, rec("body", "evt_perm"))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
				t.Fatalf("first attempt: %v, want intake_unavailable", s.err)
			}
			e.q.Reconcile(context.Background())
			s := e.dual(t)
			if s.Pending.Stuck < 1 {
				t.Fatalf("after one refused republish: stuck %d, want ≥ 1 (deadline is 1h away)", s.Pending.Stuck)
			}
			// Never dropped: retried on every pass, the hook still in the store.
			e.q.Reconcile(context.Background())
			s = e.dual(t)
			if s.Pending.Records != 1 || s.Pending.Stuck != 1 || e.hooks(t) != 1 || e.log.Published() != 0 {
				t.Fatalf("stuck record: pending %d stuck %d hooks %d log %d; want 1, 1, 1, 0",
					s.Pending.Records, s.Pending.Stuck, e.hooks(t), e.log.Published())
			}
			if got := obs.class(class.String()); got != 3 {
				t.Fatalf("publishes with outcome %s = %d, want 3 (the commit and two passes)", class, got)
			}
			// The log accepts it again: the stuck record completes.
			e.log.ClearFaults()
			e.q.Reconcile(context.Background())
			s = e.dual(t)
			if s.Pending.Records != 0 || s.Pending.Stuck != 0 {
				t.Fatalf("after the log accepted it: pending %d stuck %d, want 0 and 0", s.Pending.Records, s.Pending.Stuck)
			}
			r := e.onlyRecord(t)
			if env, _ := e.stored(t, r.Seq); env == nil || env.ID != r.ID {
				t.Fatal("the completed record is not the stored hook")
			}
		})
	}
}

func TestReconciler_EntryPastDeadlineIsStuck(t *testing.T) {
	clock := newRCClock()
	const deadline = time.Millisecond
	e, _ := newRCDual(t, queue.Options{Now: clock.now}, func(d *queue.DualOptions) {
		d.ReconcileEvery = -1
		d.ReconcileDeadline = deadline
	})
	e.log.FailNext(2, intake.Unavailable)
	if s := answer(t, submitAsync(e.q, rec("body", "evt_old"))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("first attempt: %v, want intake_unavailable", s.err)
	}
	if s := e.dual(t); s.Pending.Records != 1 || s.Pending.Stuck != 0 {
		t.Fatalf("a fresh carried record: pending %d stuck %d, want 1 and 0", s.Pending.Records, s.Pending.Stuck)
	}
	clock.advance(deadline + time.Millisecond)
	s := e.dual(t)
	if s.Pending.Stuck != 1 || s.Pending.OldestAge <= deadline {
		t.Fatalf("past the deadline: stuck %d oldest %s, want 1 and > %s", s.Pending.Stuck, s.Pending.OldestAge, deadline)
	}
	// Stuck is a gauge, not a verdict: the reconciler keeps retrying.
	e.q.Reconcile(context.Background())
	if s := e.dual(t); s.Pending.Records != 1 || s.Pending.Stuck != 1 || e.hooks(t) != 1 {
		t.Fatalf("stuck record after a failed pass: %+v hooks %d", s.Pending, e.hooks(t))
	}
	e.q.Reconcile(context.Background())
	if s := e.dual(t); s.Pending.Records != 0 || s.Pending.Stuck != 0 {
		t.Fatalf("after the log returned: %+v, want empty", s.Pending)
	}
	if e.log.Published() != 1 {
		t.Fatalf("log records = %d, want 1", e.log.Published())
	}
}

// The background reconciler honours a Throttled answer to its own
// republish: nothing is published again before RetryAfter has passed.
func TestReconciler_ThrottledHonoursRetryAfter(t *testing.T) {
	clock := newRCClock()
	const retryAfter = 200 * time.Millisecond
	e, obs := newRCDual(t, queue.Options{Now: clock.now}, nil) // background reconciler every 5 ms
	e.log.FailNext(1, intake.Unavailable)
	e.log.FailNextError(1, &intake.Error{Class: intake.Throttled, RetryAfter: retryAfter, Err: errors.New("slow down")})
	if s := answer(t, submitAsync(e.q, rec("body", "evt_thr"))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("first attempt: %v, want intake_unavailable", s.err)
	}
	if c := obs.nextPublish(t); c != "unavailable" {
		t.Fatalf("the commit's publish: %s, want unavailable", c)
	}
	if c := obs.nextPublish(t); c != "throttled" {
		t.Fatalf("the reconciler's first republish: %s, want throttled", c)
	}
	// The clock has not moved: the hold must not end, however many ticks pass.
	obs.noPublish(t, "before any of the Retry-After passed")
	clock.advance(retryAfter - time.Millisecond)
	obs.noPublish(t, "1 ms before the Retry-After ends")
	if e.log.Published() != 0 || e.dual(t).Pending.Records != 1 {
		t.Fatal("the record was republished during the hold")
	}
	clock.advance(time.Millisecond)
	if c := obs.nextPublish(t); c != "ok" {
		t.Fatalf("the republish after the hold: %s, want ok", c)
	}
	e.pendingEmpty(t)
	if e.log.Published() != 1 {
		t.Fatalf("log records = %d, want 1", e.log.Published())
	}
}

// A Throttled answer to the commit's own publish carries a RetryAfter too;
// the reconciler that picks the carried record up must honour it.
func TestReconciler_ThrottledCommitPublishHonoursRetryAfter(t *testing.T) {
	clock := newRCClock()
	e, obs := newRCDual(t, queue.Options{Now: clock.now}, nil)
	e.log.FailNextError(1, &intake.Error{Class: intake.Throttled, RetryAfter: 200 * time.Millisecond, Err: errors.New("slow down")})
	if s := answer(t, submitAsync(e.q, rec("body", "evt_thr2"))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("first attempt: %v, want intake_unavailable", s.err)
	}
	if c := obs.nextPublish(t); c != "throttled" {
		t.Fatalf("the commit's publish: %s, want throttled", c)
	}
	obs.noPublish(t, "before the commit's Retry-After passed")
	clock.advance(200 * time.Millisecond)
	e.pendingEmpty(t)
}

// checkMarks asserts the two invariants of the marks (ADR section 5):
// every seq ≤ watermark is in the log, and the record at every position
// ≤ offset is in the store.
func (e *dualEnv) checkMarks(t *testing.T, s queue.DualStats) {
	t.Helper()
	recs := e.log.Records()
	inLog := map[uint64]bool{}
	for _, r := range recs {
		inLog[r.Seq] = true
	}
	for seq := uint64(1); seq <= s.Watermark; seq++ {
		if !inLog[seq] {
			t.Fatalf("watermark %d ran ahead: seq %d is not in the log", s.Watermark, seq)
		}
	}
	if s.Offset >= int64(len(recs)) {
		t.Fatalf("offset %d is past the log's last position %d", s.Offset, len(recs)-1)
	}
	for pos := int64(0); pos <= s.Offset; pos++ {
		v, err := e.st.Get(store.HookIDKey(recs[pos].ID))
		if err != nil || v == nil {
			t.Fatalf("offset %d ran ahead: the record at position %d (seq %d) is not in the store", s.Offset, pos, recs[pos].Seq)
		}
	}
}

func TestDual_WatermarkAndOffsetAdvanceOnlyFromConfirmedState(t *testing.T) {
	e, _ := newRCDual(t, queue.Options{}, func(d *queue.DualOptions) {
		d.ReconcileEvery = -1
		d.PublishTimeout = time.Minute // the held publish must not time out
	})
	marks := func(wantWM uint64, wantOff int64, when string) {
		t.Helper()
		s := e.dual(t)
		e.checkMarks(t, s)
		if s.Watermark != wantWM || s.Offset != wantOff {
			t.Fatalf("%s: watermark %d offset %d, want %d and %d", when, s.Watermark, s.Offset, wantWM, wantOff)
		}
	}
	ok := func(body string) queue.Result {
		t.Helper()
		s := answer(t, submitAsync(e.q, rec(body, "")))
		if s.err != nil {
			t.Fatalf("%s: %v", body, s.err)
		}
		return s.res
	}
	marks(0, -1, "empty")
	ok("one") // seq 1 at position 0
	marks(1, 0, "one confirmed")

	// seq 2: half_local, carried. Nothing above it moves the watermark.
	e.log.FailNext(1, intake.Unavailable)
	if s := answer(t, submitAsync(e.q, rec("two", ""))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("two: %v", s.err)
	}
	ok("three") // seq 3 at position 1
	marks(1, 1, "seq 2 in the store only, seq 3 confirmed")

	// seq 4: half_log (its fsync failed, the fence removed its rows) at
	// position 2: the offset may not pass a record the store lacks.
	e.gate.FailNext(1)
	if s := answer(t, submitAsync(e.q, rec("four", ""))); !errors.Is(s.err, queue.ErrStoreUnavailable) {
		t.Fatalf("four: %v", s.err)
	}
	waitFences(t, e.q, 1)
	marks(1, 1, "seq 4 in the log only")

	e.q.Reconcile(context.Background()) // local half of 4, then republish 2 at position 3
	marks(4, 3, "everything confirmed")

	// seq 5 in flight: applied and fsynced, its publish held. Not
	// confirmed, so neither mark moves.
	e.log.Hang()
	ch := submitAsync(e.q, rec("five", ""))
	if err := e.log.WaitHung(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "seq 5 fsynced", func() bool { return e.q.Durable() >= 5 })
	marks(4, 3, "seq 5 local only, publish in flight")
	e.log.Unhang()
	if s := answer(t, ch); s.err != nil {
		t.Fatalf("five: %v", s.err)
	}
	marks(5, 4, "seq 5 confirmed")

	// A clean stop writes the final marks to the store: the watermark at
	// the last seq, the offset at the log head.
	e.q.Close()
	row := func(k []byte) uint64 {
		t.Helper()
		v, err := e.st.Get(k)
		if err != nil || v == nil {
			t.Fatalf("row %s: %v (present %v)", k, err, v != nil)
		}
		n, okk := store.ParseU64(v)
		if !okk {
			t.Fatalf("row %s: bad value %x", k, v)
		}
		return n
	}
	for _, when := range []string{"after Close", "after a reopen"} {
		if wm := row(store.KeyIntakeSeq); wm != 5 {
			t.Fatalf("%s: %s = %d, want 5", when, store.KeyIntakeSeq, wm)
		}
		if off := row(store.KeyIntakeOffset); off != uint64(e.log.Last()) {
			t.Fatalf("%s: %s = %d, want the log head %d", when, store.KeyIntakeOffset, off, e.log.Last())
		}
		if err := e.st.Reopen(); err != nil {
			t.Fatal(err)
		}
	}
}

// A group that mixes a refused record and an accepted one answers each
// caller with its own result (the ADR's "Batcher passes per-item intake
// results through").
func TestDual_GroupPassesPerItemIntakeResults(t *testing.T) {
	// The writer waits for two records (the delay is only an upper bound),
	// so both land in one group.
	e, obs := newRCDual(t, queue.Options{MaxBatch: 2, MaxDelay: 10 * time.Second}, func(d *queue.DualOptions) {
		d.MaxRecordBytes = 800 // "small" is under it with its envelope and framing (intake.RecordBound: about 700), the other is over
	})
	big := submitAsync(e.q, rec(strings.Repeat("x", 400), ""))
	small := submitAsync(e.q, rec("small", ""))
	if n := e.sig.wait(t); n != 1 {
		t.Fatalf("group wrote %d records, want 1 of 2", n)
	}
	if s := answer(t, big); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("oversized record: %+v %v, want intake_unavailable", s.res, s.err)
	}
	s := answer(t, small)
	if s.err != nil {
		t.Fatalf("the other record of the group: %v, want 201", s.err)
	}
	if e.inLog(s.res.ID) != 1 || e.log.Published() != 1 || e.hooks(t) != 1 {
		t.Fatalf("log %d, hooks %d; want only the accepted record in both", e.log.Published(), e.hooks(t))
	}
	obs.mu.Lock()
	refused := obs.refused["record_too_large"]
	obs.mu.Unlock()
	if refused != 1 {
		t.Fatalf("refused{reason=record_too_large} = %d, want 1", refused)
	}
}

// Queue.Close must stay safe to call again after the store is closed (app
// shutdown paths close in that order after a failed Start).
func TestDual_CloseAfterStoreClosedDoesNotPanic(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	lg, err := memory.Open(memory.Options{Dir: t.TempDir(), Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	q, err := queue.New(st, queue.Options{Dual: &queue.DualOptions{Intake: lg, Node: "node-a"}, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	q.Start()
	if _, err := q.Submit(context.Background(), rec("x", "")); err != nil {
		t.Fatal(err)
	}
	q.Close()
	_ = st.Close()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("second Close panicked: %v", r)
		}
	}()
	q.Close()
}

// Both halves failed and the log is still down at the first pass: the
// local half is completed first (the hook becomes durable and
// deliverable), the record stays carried, and the log half completes when
// the log returns (the ADR's "both halves fail: the record is carried and
// completes when either recovers", and section 5's "local first").
func TestReconciler_BothPendingCompletesLocalFirst(t *testing.T) {
	e, obs := newRCDual(t, queue.Options{}, manual)
	e.gate.FailNext(1)
	e.log.FailNext(2, intake.Unavailable) // the commit's publish and the first pass's
	if s := answer(t, submitAsync(e.q, rec("body", "evt_both"))); !errors.Is(s.err, queue.ErrStoreUnavailable) {
		t.Fatalf("first attempt: %v, want store_unavailable", s.err)
	}
	waitFences(t, e.q, 1)
	if e.hooks(t) != 0 || e.log.Published() != 0 {
		t.Fatalf("both failed: hooks %d log %d, want 0 and 0", e.hooks(t), e.log.Published())
	}
	seq := e.q.Stats().NextSeq - 1

	e.q.Reconcile(context.Background())
	if env, _ := e.stored(t, seq); env == nil || e.q.Durable() < seq {
		t.Fatalf("the store recovered but the local half at seq %d is not written and durable (durable %d)", seq, e.q.Durable())
	}
	s := e.dual(t)
	if s.Pending.Records != 1 || e.log.Published() != 0 || s.Watermark >= seq {
		t.Fatalf("log still down: pending %d log %d watermark %d; want 1, 0, < %d", s.Pending.Records, e.log.Published(), s.Watermark, seq)
	}
	if obs.reconciledHalf("local") != 1 || obs.reconciledHalf("log") != 0 {
		t.Fatalf("reconciled local %d log %d, want 1 and 0", obs.reconciledHalf("local"), obs.reconciledHalf("log"))
	}
	retry := answer(t, submitAsync(e.q, rec("body", "evt_both")))
	if !errors.Is(retry.err, queue.ErrIntakePending) {
		t.Fatalf("retry with only the local half done: %+v %v, want intake_pending", retry.res, retry.err)
	}

	e.q.Reconcile(context.Background())
	r := e.onlyRecord(t)
	if s := e.dual(t); s.Pending.Records != 0 || s.Watermark != seq || r.Seq != seq {
		t.Fatalf("after the log returned: pending %d watermark %d record seq %d; want 0, %d, %d", s.Pending.Records, s.Watermark, r.Seq, seq, seq)
	}
	if after := answer(t, submitAsync(e.q, rec("body", "evt_both"))); after.err != nil || !after.res.Duplicate || after.res.ID != r.ID {
		t.Fatalf("retry after both halves: %+v %v, want 201 duplicate of %x", after.res, after.err, r.ID)
	}
	if e.hooks(t) != 1 {
		t.Fatalf("hooks = %d, want 1", e.hooks(t))
	}
	e.foldMatches(t)
}

// A retry is never answered 201 while its original is unconfirmed: not
// while the original's publish is in flight (a different group), and not
// as a duplicate inside the original's own group, which shares its fate.
func TestDual_RetryMeetingAnUnconfirmedOriginalIsNeverAcked(t *testing.T) {
	t.Run("original in flight", func(t *testing.T) {
		e, obs := newRCDual(t, queue.Options{}, func(d *queue.DualOptions) { d.PublishTimeout = time.Minute })
		e.log.Hang()
		orig := submitAsync(e.q, rec("body", "evt_fly"))
		if err := e.log.WaitHung(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		retry := answer(t, submitAsync(e.q, rec("body", "evt_fly")))
		if !errors.Is(retry.err, queue.ErrIntakePending) {
			t.Fatalf("retry while the original's publish is in flight: %+v %v, want intake_pending", retry.res, retry.err)
		}
		obs.mu.Lock()
		refused := obs.refused["pending_dedupe"]
		obs.mu.Unlock()
		if refused != 1 {
			t.Fatalf("refused{reason=pending_dedupe} = %d, want 1", refused)
		}
		e.log.Unhang()
		o := answer(t, orig)
		if o.err != nil {
			t.Fatalf("original: %v", o.err)
		}
		if again := answer(t, submitAsync(e.q, rec("body", "evt_fly"))); again.err != nil || !again.res.Duplicate || again.res.ID != o.res.ID {
			t.Fatalf("retry after the confirm: %+v %v, want 201 duplicate of %x", again.res, again.err, o.res.ID)
		}
	})
	t.Run("duplicate in the original's group", func(t *testing.T) {
		e, _ := newRCDual(t, queue.Options{MaxBatch: 2, MaxDelay: 10 * time.Second}, manual)
		e.log.FailNext(1, intake.Unavailable)
		a := submitAsync(e.q, rec("body", "evt_grp"))
		b := submitAsync(e.q, rec("body", "evt_grp"))
		if n := e.sig.wait(t); n != 1 {
			t.Fatalf("group wrote %d records, want 1 (an original and its duplicate)", n)
		}
		for _, ch := range []chan submitted{a, b} {
			if s := answer(t, ch); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
				t.Fatalf("original or in-group duplicate of a failed publish: %+v %v, want intake_unavailable", s.res, s.err)
			}
		}
		if e.hooks(t) != 1 {
			t.Fatalf("hooks = %d, want the one carried original", e.hooks(t))
		}
	})
}

// A record refused before either half (here by the open breaker) leaves
// nothing behind, its dedupe key included: once the gate admits again, the
// retry is stored as a new hook, not refused as pending and not a
// duplicate of anything.
func TestDual_RefusedBeforeEitherHalfReleasesTheKey(t *testing.T) {
	clock := newRCClock()
	const probe = time.Second
	e, _ := newRCDual(t, queue.Options{Now: clock.now}, func(d *queue.DualOptions) {
		d.ReconcileEvery = -1
		d.Probe = probe
	})
	e.log.SetReady(false)
	if s := answer(t, submitAsync(e.q, rec("body", "evt_ref"))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("breaker open: %v, want intake_unavailable", s.err)
	}
	if e.hooks(t) != 0 || e.dual(t).Pending.Records != 0 || e.q.Stats().NextSeq != 1 {
		t.Fatal("a refused record left something behind")
	}
	e.log.SetReady(true)
	clock.advance(probe) // half-open: the next group is the probe
	s := answer(t, submitAsync(e.q, rec("body", "evt_ref")))
	if s.err != nil || s.res.Duplicate {
		t.Fatalf("retry after the refusal: %+v %v, want a new 201", s.res, s.err)
	}
	if e.inLog(s.res.ID) != 1 || e.hooks(t) != 1 {
		t.Fatalf("log %d hooks %d, want the retry once in each", e.inLog(s.res.ID), e.hooks(t))
	}
}

// countingSink records every delivery by hook id.
type countingSink struct {
	mu    sync.Mutex
	byID  map[[16]byte]int
	total int
	seen  chan [16]byte
}

func newCountingSink() *countingSink {
	return &countingSink{byID: map[[16]byte]int{}, seen: make(chan [16]byte, 64)}
}

func (s *countingSink) Deliver(_ context.Context, m *sink.Message) error {
	s.mu.Lock()
	s.byID[m.ID]++
	s.total++
	s.mu.Unlock()
	s.seen <- m.ID
	return nil
}

func (s *countingSink) Close() error { return nil }

func (s *countingSink) counts() (map[[16]byte]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.byID), s.total
}

// newRCDualDispatch is newRCDual with dispatch delivering to a counting
// sink, woken by the queue's durable mark as in the app.
func newRCDualDispatch(t *testing.T) (*dualEnv, *countingSink) {
	t.Helper()
	var disp atomic.Pointer[dispatch.Dispatcher]
	e, _ := newRCDual(t, queue.Options{OnDurable: func() {
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
	})
	disp.Store(d)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return e, cs
}

// waitDelivered waits for the next delivery and for the hook to be
// reclaimed, after which no further delivery of it is possible.
func (e *dualEnv) waitDelivered(t *testing.T, cs *countingSink) [16]byte {
	t.Helper()
	var id [16]byte
	select {
	case id = <-cs.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	testutil.Eventually(t, 10*time.Second, "the delivered hook reclaimed", func() bool { return e.hooks(t) == 0 })
	return id
}

// The consumer-visible count of the two half-commit cases: exactly one
// hook id per dedupe key and exactly one delivery to the sink.
func TestDual_HalfCommitsAreDeliveredOnce(t *testing.T) {
	t.Run("publish fails after local commit", func(t *testing.T) {
		e, cs := newRCDualDispatch(t)
		e.log.FailNext(1, intake.Unavailable)
		if s := answer(t, submitAsync(e.q, rec("body", "evt_d1"))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
			t.Fatalf("first attempt: %v, want intake_unavailable", s.err)
		}
		// The hook is in the store: it is delivered while its log half is
		// still carried.
		id := e.waitDelivered(t, cs)
		if retry := answer(t, submitAsync(e.q, rec("body", "evt_d1"))); !errors.Is(retry.err, queue.ErrIntakePending) {
			t.Fatalf("retry before the republish: %+v %v, want intake_pending", retry.res, retry.err)
		}
		e.q.Reconcile(context.Background())
		after := answer(t, submitAsync(e.q, rec("body", "evt_d1")))
		if after.err != nil || !after.res.Duplicate || after.res.ID != id {
			t.Fatalf("retry after the republish: %+v %v, want 201 duplicate of the delivered %x", after.res, after.err, id)
		}
		if by, total := cs.counts(); total != 1 || by[id] != 1 {
			t.Fatalf("deliveries %v (total %d), want exactly one, of %x", by, total, id)
		}
		if e.onlyRecord(t).ID != id {
			t.Fatal("the log's record is not the delivered hook")
		}
	})
	t.Run("local commit fails after publish", func(t *testing.T) {
		e, cs := newRCDualDispatch(t)
		e.gate.FailNext(1)
		if s := answer(t, submitAsync(e.q, rec("body", "evt_d2"))); !errors.Is(s.err, queue.ErrStoreUnavailable) {
			t.Fatalf("first attempt: %v, want store_unavailable", s.err)
		}
		waitFences(t, e.q, 1)
		if retry := answer(t, submitAsync(e.q, rec("body", "evt_d2"))); !errors.Is(retry.err, queue.ErrIntakePending) {
			t.Fatalf("retry before the local half: %+v %v, want intake_pending", retry.res, retry.err)
		}
		r := e.onlyRecord(t)
		e.q.Reconcile(context.Background())
		if id := e.waitDelivered(t, cs); id != r.ID {
			t.Fatalf("delivered %x, want the log's record %x", id, r.ID)
		}
		after := answer(t, submitAsync(e.q, rec("body", "evt_d2")))
		if after.err != nil || !after.res.Duplicate || after.res.ID != r.ID {
			t.Fatalf("retry after the local half: %+v %v, want 201 duplicate of %x", after.res, after.err, r.ID)
		}
		if by, total := cs.counts(); total != 1 || by[r.ID] != 1 {
			t.Fatalf("deliveries %v (total %d), want exactly one, of %x", by, total, r.ID)
		}
	})
}

// TestDual_OffsetLagGrowsOnlyWhileARecordHoldsTheOffsetBack: the gauge
// behind ankusa_intake_offset_lag_seconds (ADR section 11) is the time
// since the stored offset last covered every record the log confirmed. An
// offset flush (here the final one of Close) resets it on a healthy node;
// a record held in the log only keeps it growing.
func TestDual_OffsetLagGrowsOnlyWhileARecordHoldsTheOffsetBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		logOnly bool
		wantLag bool
	}{
		{"caught up at the flush", false, false},
		{"held back by a log-only record", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newRCClock()
			e, _ := newRCDual(t, queue.Options{Now: clock.now}, manual)
			if s := answer(t, submitAsync(e.q, rec("ok", ""))); s.err != nil {
				t.Fatal(s.err)
			}
			if tc.logOnly {
				e.gate.FailNext(1)
				if s := answer(t, submitAsync(e.q, rec("log only", ""))); !errors.Is(s.err, queue.ErrStoreUnavailable) {
					t.Fatalf("log only: %v", s.err)
				}
				waitFences(t, e.q, 1)
			}
			clock.advance(10 * time.Second)
			e.q.Close() // flushes the marks
			lag := e.dual(t).OffsetLag
			if got := lag >= 10*time.Second; got != tc.wantLag {
				t.Fatalf("offset lag %s after 10 s, want lagging %v", lag, tc.wantLag)
			}
		})
	}
}
