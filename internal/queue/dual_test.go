package queue_test

// The ack path of wal.type: dual, named after the ADR's queue_dual_test
// cases (docs/testing.md maps each one). Every case drives the file-backed
// memory log's fault injection or the WAL sync gate, and asserts on what a
// consumer would count: hook ids per dedupe key, records in the log, hooks
// in the store.

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

type dualEnv struct {
	st   *store.Store
	q    *queue.Queue
	log  *memory.Log
	gate *testutil.WALSyncGate
	sig  *groupSignal
}

func newDual(t *testing.T, mod func(*queue.DualOptions)) *dualEnv {
	t.Helper()
	return newDualWith(t, mod, nil)
}

// newDualWith is newDual with the queue's own options changed by qmod.
func newDualWith(t *testing.T, mod func(*queue.DualOptions), qmod func(*queue.Options)) *dualEnv {
	t.Helper()
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	lg, err := memory.Open(memory.Options{Dir: filepath.Join(t.TempDir(), "intake"), Node: "node-a", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	d := &queue.DualOptions{
		Intake: lg, Node: "node-a", PublishTimeout: 500 * time.Millisecond,
		BreakerFailures: 3, Probe: time.Hour, ReconcileEvery: 5 * time.Millisecond,
	}
	if mod != nil {
		mod(d)
	}
	sig := newGroupSignal()
	qo := queue.Options{Dual: d, Observer: sig}
	if qmod != nil {
		qmod(&qo)
	}
	q := testutil.StartQueue(t, st, qo)
	// Registered after the queue, so it runs first: a failing test never
	// leaves the syncer held or a publish hung.
	t.Cleanup(func() { gate.ReleaseAll(); lg.Unhang() })
	return &dualEnv{st: st, q: q, log: lg, gate: gate, sig: sig}
}

// inLog counts the log's records for a hook id.
func (e *dualEnv) inLog(id [16]byte) int {
	n := 0
	for _, r := range e.log.Records() {
		if r.ID == id {
			n++
		}
	}
	return n
}

func (e *dualEnv) hooks(t *testing.T) uint64 {
	t.Helper()
	n, err := e.st.Count([]byte{store.PrefixHook})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *dualEnv) pendingEmpty(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "pending set drained", func() bool {
		s, _ := e.q.Dual()
		return s.Pending.Records == 0
	})
}

func TestDual_NoAckWithoutIntakeConfirm(t *testing.T) {
	e := newDual(t, nil)
	e.log.Hang()
	ch := submitAsync(e.q, rec("x", "evt"))
	if err := e.log.WaitHung(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	// The local half is applied and synced meanwhile; the reply waits.
	e.sig.wait(t)
	testutil.Eventually(t, 5*time.Second, "local fsync", func() bool { return e.q.Durable() >= 1 })
	notYet(t, ch, "record whose publish is held")
	e.log.Unhang()
	s := answer(t, ch)
	if s.err != nil {
		t.Fatalf("after the confirm: %v", s.err)
	}
	if e.inLog(s.res.ID) != 1 {
		t.Fatal("acked hook has no record in the log")
	}
}

func TestDual_NoAckBeforeLocalFsyncEvenWhenLogConfirmedFirst(t *testing.T) {
	e := newDual(t, nil)
	e.gate.Hold()
	ch := submitAsync(e.q, rec("x", ""))
	release := e.gate.Held(t)
	// The publish runs in parallel with the held fsync and confirms first:
	// both halves were in progress at once (the max, not the sum).
	testutil.Eventually(t, 5*time.Second, "record in the log while the fsync is held", func() bool { return e.log.Published() == 1 })
	notYet(t, ch, "record whose fsync is held")
	e.gate.Open()
	close(release)
	if s := answer(t, ch); s.err != nil {
		t.Fatalf("after the fsync: %v", s.err)
	}
}

func TestDual_PublishFailsAfterLocalCommit(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1 })
	e.log.FailNext(1, intake.Unavailable)
	first := answer(t, submitAsync(e.q, rec("body", "evt_1")))
	if !errors.Is(first.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("first attempt: %v, want intake_unavailable", first.err)
	}
	// The hook is in the store (carried), not in the log yet. A retry meets
	// the unconfirmed original: 503 intake_pending, never 201.
	if e.hooks(t) != 1 {
		t.Fatalf("hooks in store = %d, want the carried one", e.hooks(t))
	}
	retry := answer(t, submitAsync(e.q, rec("body", "evt_1")))
	if !errors.Is(retry.err, queue.ErrIntakePending) {
		t.Fatalf("retry before reconcile: %+v %v, want intake_pending", retry.res, retry.err)
	}
	e.q.Reconcile(context.Background())
	e.pendingEmpty(t)
	after := answer(t, submitAsync(e.q, rec("body", "evt_1")))
	if after.err != nil || !after.res.Duplicate {
		t.Fatalf("retry after reconcile: %+v %v, want 201 duplicate", after.res, after.err)
	}
	if e.hooks(t) != 1 {
		t.Fatalf("hook ids for one dedupe key = %d, want 1", e.hooks(t))
	}
	if n := e.inLog(after.res.ID); n != 1 {
		t.Fatalf("records of the hook in the log = %d, want 1", n)
	}
}

func TestDual_LocalCommitFailsAfterPublish(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1 })
	e.gate.FailNext(1)
	first := answer(t, submitAsync(e.q, rec("body", "evt_2")))
	if !errors.Is(first.err, queue.ErrStoreUnavailable) {
		t.Fatalf("first attempt: %v, want store_unavailable", first.err)
	}
	waitFences(t, e.q, 1)
	// The fence removed the local rows; the record is in the log (half_log).
	if e.hooks(t) != 0 || e.log.Published() != 1 {
		t.Fatalf("after the failure: hooks %d, log %d; want 0 and 1", e.hooks(t), e.log.Published())
	}
	retry := answer(t, submitAsync(e.q, rec("body", "evt_2")))
	if !errors.Is(retry.err, queue.ErrIntakePending) {
		t.Fatalf("retry before reconcile: %+v %v, want intake_pending", retry.res, retry.err)
	}
	e.q.Reconcile(context.Background())
	e.pendingEmpty(t)
	// The reconciler wrote the local half with the original seq and id.
	rec0 := e.log.Records()[0]
	v, err := e.st.Get(store.HookKey(rec0.Seq))
	if err != nil || v == nil {
		t.Fatalf("local half not completed at seq %d: %v", rec0.Seq, err)
	}
	if env, _ := store.DecodeEnvelope(v); env.ID != rec0.ID {
		t.Fatalf("completed hook id %x, log record id %x", env.ID, rec0.ID)
	}
	after := answer(t, submitAsync(e.q, rec("body", "evt_2")))
	if after.err != nil || !after.res.Duplicate || after.res.ID != rec0.ID {
		t.Fatalf("retry after reconcile: %+v %v, want 201 duplicate of %x", after.res, after.err, rec0.ID)
	}
	if e.hooks(t) != 1 {
		t.Fatalf("hook ids = %d, want 1", e.hooks(t))
	}
}

func TestDual_BothHalvesFailAreCarried(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1 })
	e.gate.FailNext(1)
	e.log.FailNext(1, intake.Unavailable)
	s := answer(t, submitAsync(e.q, rec("body", "evt_3")))
	if !errors.Is(s.err, queue.ErrStoreUnavailable) {
		t.Fatalf("both failed: %v, want store_unavailable", s.err)
	}
	waitFences(t, e.q, 1)
	e.q.Reconcile(context.Background())
	e.pendingEmpty(t)
	if e.hooks(t) != 1 || e.log.Published() != 1 {
		t.Fatalf("after reconcile: hooks %d, log records %d; want 1 and 1", e.hooks(t), e.log.Published())
	}
}

func TestDual_PublishTimeoutIsAFailureAndRepublishAppliesOnce(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1 })
	e.log.TimeoutAfterAppendNext(1)
	s := answer(t, submitAsync(e.q, rec("body", "evt_4")))
	if !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("lost ack: %v, want intake_unavailable", s.err)
	}
	e.q.Reconcile(context.Background())
	e.pendingEmpty(t)
	// The log holds the record twice (the lost ack and the republish); the
	// store holds one hook.
	if e.log.Published() != 2 || e.hooks(t) != 1 {
		t.Fatalf("log records %d, hooks %d; want 2 and 1", e.log.Published(), e.hooks(t))
	}
	// A replay of that log (the host lost, a fresh store) applies exactly
	// one hook: the second record of the same (node, seq) is present.
	recs := e.log.Records()
	if len(recs) != 2 || recs[0].ID != recs[1].ID || recs[0].Seq != recs[1].Seq {
		t.Fatalf("the two records are not one hook: %x/%d and %x/%d", recs[0].ID, recs[0].Seq, recs[1].ID, recs[1].Seq)
	}
	fresh := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	sum, err := recoverInto(t, fresh, e.log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != 2 || sum.Applied != 1 || sum.Present != 1 {
		t.Fatalf("replay summary %s, want records=2 applied=1 present=1", sum)
	}
	if n, err := fresh.Count([]byte{store.PrefixHook}); err != nil || n != 1 {
		t.Fatalf("hooks after the replay = %d (%v), want 1", n, err)
	}
	if !hookPresent(t, fresh, recs[0].ID) {
		t.Fatal("the replayed hook is not the published one")
	}
}

func TestDual_RefusedBeforeEitherHalf(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*queue.DualOptions)
		setup func(e *dualEnv)
		body  string
	}{
		{"breaker open", nil, func(e *dualEnv) { e.log.SetReady(false) }, "x"},
		{"pending ceiling (records)", func(d *queue.DualOptions) { d.PendingMaxRecords = 1; d.ReconcileEvery = -1 }, func(e *dualEnv) {
			e.log.FailNext(1, intake.Unavailable)
			_ = answer(t, submitAsync(e.q, rec("carried", "")))
		}, "x"},
		{"pending ceiling (bytes)", func(d *queue.DualOptions) { d.PendingMaxBytes = 100 }, nil, "x"},
		{"record too large", func(d *queue.DualOptions) { d.MaxRecordBytes = 300 }, nil, string(make([]byte, 400))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newDual(t, tc.mod)
			if tc.setup != nil {
				tc.setup(e)
			}
			hooks, published, next := e.hooks(t), e.log.Published(), e.q.Stats().NextSeq
			s := answer(t, submitAsync(e.q, rec(tc.body, "evt_r")))
			if !errors.Is(s.err, queue.ErrIntakeUnavailable) {
				t.Fatalf("err = %v, want intake_unavailable", s.err)
			}
			if e.hooks(t) != hooks || e.log.Published() != published || e.q.Stats().NextSeq != next {
				t.Fatal("a refused record wrote something or consumed a seq")
			}
		})
	}
}

func TestDual_BreakerOpensHalfOpensAndNeverDegradesToDisk(t *testing.T) {
	e := newDual(t, func(d *queue.DualOptions) { d.Probe = 50 * time.Millisecond; d.ReconcileEvery = -1 })
	e.log.FailNext(3, intake.Unavailable)
	for range 3 {
		if s := answer(t, submitAsync(e.q, rec("x", ""))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
			t.Fatalf("failing publish: %v", s.err)
		}
	}
	st, _ := e.q.Dual()
	if !st.GateOpen {
		t.Fatal("gate still closed after breaker_failures failed publishes")
	}
	// Open: refused before any seq, nothing stored, zero 201.
	before := e.q.Stats().NextSeq
	if s := answer(t, submitAsync(e.q, rec("x", ""))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("while open: %v", s.err)
	}
	if e.q.Stats().NextSeq != before {
		t.Fatal("an open gate consumed a seq")
	}
	// Half-open after probe_ms: one real batch; its confirm closes the gate.
	var ok queue.Result
	testutil.Eventually(t, 5*time.Second, "half-open probe accepted", func() bool {
		s := answer(t, submitAsync(e.q, rec("probe", "")))
		ok = s.res
		return s.err == nil
	})
	if st, _ := e.q.Dual(); st.GateOpen {
		t.Fatal("gate still open after a confirmed probe")
	}
	if e.inLog(ok.ID) != 1 {
		t.Fatal("the probe's 201 has no record in the log")
	}
}

func TestDual_ReconcilerRunsByItself(t *testing.T) {
	e := newDual(t, nil)
	e.log.FailNext(1, intake.Unavailable)
	s := answer(t, submitAsync(e.q, rec("x", "evt_5")))
	if !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("%v", s.err)
	}
	e.pendingEmpty(t)
	if e.log.Published() != 1 {
		t.Fatalf("log records = %d, want 1", e.log.Published())
	}
	st, _ := e.q.Dual()
	if st.Watermark != 0 && st.Pending.Records != 0 {
		t.Fatalf("stats %+v", st)
	}
}
