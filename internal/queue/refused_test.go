package queue_test

// A record the log refuses Permanent on its own (larger than the log takes:
// a topology that intake.verify_topic: false let through). The simulator's
// `poison` class found both defects these tests pin: boot recovery failed
// for ever on such a record, so the node never booted again after a crash;
// and a reconciler chunk holding it was refused whole, so every record
// batched with it stayed carried for ever.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// logMax is the test log's record limit; bigBody's record is over it.
const logMax = 2048

var bigBody = strings.Repeat("x", 3000)

func openSmallLog(t *testing.T) *memory.Log {
	t.Helper()
	lg, err := memory.Open(memory.Options{Dir: filepath.Join(t.TempDir(), "intake"), Node: "node-a", MaxRecordBytes: logMax, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	return lg
}

func logSeqs(lg *memory.Log) []uint64 {
	var seqs []uint64
	for _, r := range lg.Records() {
		seqs = append(seqs, r.Seq)
	}
	return seqs
}

// The store holds six hooks above the watermark, the third too large for
// the log: the boot's republish places the other five, reports the third
// refused, and leaves the watermark below it — the boot goes on.
func TestRecovery_ARecordTheLogRefusesIsCarriedNotABootFailure(t *testing.T) {
	lg := openSmallLog(t)
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	var bigSeq uint64
	for i := range 6 {
		body, key := fmt.Sprint(i), ""
		if i == 2 {
			body, key = bigBody, "evt_big"
		}
		res, err := q.Submit(context.Background(), rec(body, key))
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			bigSeq = res.Seq
		}
	}
	q.Close()

	sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting })
	if err != nil {
		t.Fatalf("boot recovery failed on one record the log refuses: %v", err)
	}
	if len(sum.Refused) != 1 || sum.Refused[0] != bigSeq || sum.Republished != 5 {
		t.Fatalf("refused %v, republished %d; want [%d] and 5", sum.Refused, sum.Republished, bigSeq)
	}
	if got := fmt.Sprint(logSeqs(lg)); got != fmt.Sprint([]uint64{1, 2, 4, 5, 6}) {
		t.Fatalf("log holds seqs %s, want every hook but the refused one", got)
	}
	if wm, _, _ := st.IntakeSeq(); wm != bigSeq-1 {
		t.Fatalf("watermark %d, want %d: below the refused record, so the next boot republishes it", wm, bigSeq-1)
	}
	if !strings.Contains(sum.String(), "refused=1") {
		t.Fatalf("summary %q does not say refused=1", sum)
	}
}

// The refused record, carried into a dual queue at boot: it is pending and
// stuck, a retry of its key is refused as pending (its stored dedupe row
// must not answer 201 duplicate: the log lacks it), new hooks are acked,
// and the watermark the writer writes stays below it.
func TestDual_ACarriedRefusedRecordHoldsItsKeyAndTheWatermark(t *testing.T) {
	lg := openSmallLog(t)
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	first, err := q.Submit(context.Background(), rec("small", ""))
	if err != nil {
		t.Fatal(err)
	}
	big, err := q.Submit(context.Background(), rec(bigBody, "evt_big"))
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting })
	if err != nil || len(sum.Refused) != 1 {
		t.Fatalf("recovery: refused %v, %v; want one refused", sum.Refused, err)
	}

	dq, err := queue.New(st, queue.Options{Logger: testutil.Logger(t), Dual: &queue.DualOptions{
		Intake: lg, Node: "node-a", PublishTimeout: time.Second, BreakerFailures: 100, Probe: time.Hour,
		ReconcileEvery: -1, ReconcileDeadline: time.Hour,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dq.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := dq.Carry(sum.Refused, true); err != nil {
		t.Fatal(err)
	}
	dq.Start()
	t.Cleanup(dq.Close)

	s, _ := dq.Dual()
	if s.Pending.Records != 1 || s.Pending.Stuck != 1 {
		t.Fatalf("after Carry: pending %d stuck %d, want 1 and 1", s.Pending.Records, s.Pending.Stuck)
	}
	if _, err := dq.Submit(context.Background(), rec(bigBody, "evt_big")); !errors.Is(err, queue.ErrIntakePending) {
		t.Fatalf("a retry of the carried record's key: %v, want intake_pending (the log does not hold it)", err)
	}
	next, err := dq.Submit(context.Background(), rec("after", ""))
	if err != nil {
		t.Fatalf("a new hook next to the carried one: %v", err)
	}
	dq.Reconcile(context.Background()) // retried, refused again, kept
	dq.Close()
	s, _ = dq.Dual()
	if s.Pending.Records != 1 || s.Pending.Stuck != 1 {
		t.Fatalf("after a pass: pending %d stuck %d, want 1 and 1 (never dropped)", s.Pending.Records, s.Pending.Stuck)
	}
	if wm, _, _ := st.IntakeSeq(); wm != big.Seq-1 || next.Seq <= big.Seq || first.Seq >= big.Seq {
		t.Fatalf("watermark %d after the writer ran, want %d (below the carried seq %d; new hook at %d)", wm, big.Seq-1, big.Seq, next.Seq)
	}
	if v, _ := st.Get(store.HookKey(big.Seq)); v == nil {
		t.Fatal("the carried hook is gone from the store")
	}
}

// Three records are carried after a log outage, one of them too large for
// the log: the reconciler's pass places the two others and keeps only the
// large one stuck.
func TestReconciler_APermanentRecordDoesNotHoldBackTheOthersInItsChunk(t *testing.T) {
	lg := openSmallLog(t)
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{Logger: testutil.Logger(t), Dual: &queue.DualOptions{
		Intake: lg, Node: "node-a", PublishTimeout: time.Second, BreakerFailures: 100, Probe: time.Hour,
		ReconcileEvery: -1, ReconcileDeadline: time.Hour,
	}})
	lg.FailNext(100, intake.Unavailable)
	for _, r := range []*queue.Record{rec("a", "evt_a"), rec(bigBody, "evt_big"), rec("b", "evt_b")} {
		if _, err := q.Submit(context.Background(), r); !errors.Is(err, queue.ErrIntakeUnavailable) {
			t.Fatalf("during the outage: %v, want intake_unavailable", err)
		}
	}
	lg.ClearFaults()
	q.Reconcile(context.Background())
	s, _ := q.Dual()
	if s.Pending.Records != 1 || s.Pending.Stuck != 1 || lg.Published() != 2 {
		t.Fatalf("after a pass: pending %d stuck %d, log %d; want 1, 1, 2 (only the large record held back)",
			s.Pending.Records, s.Pending.Stuck, lg.Published())
	}
	for _, k := range []string{"evt_a", "evt_b"} {
		res, err := q.Submit(context.Background(), rec("retry", k))
		if err != nil || !res.Duplicate {
			t.Fatalf("a retry of %s after the pass: %+v %v, want 201 duplicate", k, res, err)
		}
	}
}

// countingIntake counts PublishBatch calls.
type countingIntake struct {
	intake.Intake
	calls int
}

func (c *countingIntake) PublishBatch(ctx context.Context, recs []intake.Record) (intake.Position, error) {
	c.calls++
	return c.Intake.PublishBatch(ctx, recs)
}

// A Permanent refusal of the log itself (no record named: authorization)
// is not split into one publish per record: the boot fails after one
// publish, as before, naming the class.
func TestRecovery_ALogThatRefusesEveryRecordFailsTheBootUnsplit(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	for i := range 300 {
		if _, err := q.Submit(context.Background(), rec(fmt.Sprint(i), "")); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	lg.FailNext(1000, intake.Permanent)
	ci := &countingIntake{Intake: lg}
	sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting; o.Intake = ci })
	if c, _ := intake.ClassOf(err); err == nil || c != intake.Permanent {
		t.Fatalf("recovery over a log refusing everything: %v (refused %d), want a Permanent error", err, len(sum.Refused))
	}
	if ci.calls != 1 {
		t.Fatalf("publishes = %d, want 1: a refusal of the log is not split", ci.calls)
	}
}

// The same refusal met by the reconciler: the chunk is marked stuck and the
// pass stops after one publish.
func TestReconciler_ALogRefusalIsNotSplit(t *testing.T) {
	e, obs := newRCDual(t, queue.Options{}, func(d *queue.DualOptions) {
		d.ReconcileEvery = -1
		d.ReconcileDeadline = time.Hour
		d.BreakerFailures = 100
	})
	e.log.FailNext(100, intake.Unavailable)
	for _, k := range []string{"evt_a", "evt_b", "evt_c"} {
		if s := answer(t, submitAsync(e.q, rec("body", k))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
			t.Fatalf("during the outage: %v, want intake_unavailable", s.err)
		}
	}
	e.log.ClearFaults()
	e.log.FailNext(100, intake.Permanent)
	e.q.Reconcile(context.Background())
	s := e.dual(t)
	if s.Pending.Records != 3 || s.Pending.Stuck != 3 {
		t.Fatalf("after the pass: pending %d stuck %d, want 3 and 3", s.Pending.Records, s.Pending.Stuck)
	}
	if got := obs.class(intake.Permanent.String()); got != 1 {
		t.Fatalf("publishes refused Permanent in the pass = %d, want 1 (unsplit)", got)
	}
}

// On the commit path: one group holds a record the log refuses and two it
// takes. Only the refused record's caller is answered 503 (carried, stuck);
// the two others are acked, and the log is not counted down for it.
func TestDual_ARecordTheLogRefusesFailsOnlyItsOwnCaller(t *testing.T) {
	lg := openSmallLog(t)
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{Logger: testutil.Logger(t), MaxBatch: 3, MaxDelay: 10 * time.Second,
		Dual: &queue.DualOptions{
			Intake: lg, Node: "node-a", PublishTimeout: time.Second, BreakerFailures: 1, Probe: time.Hour,
			ReconcileEvery: -1, ReconcileDeadline: time.Hour,
		}})
	a := submitAsync(q, rec("a", "evt_a"))
	big := submitAsync(q, rec(bigBody, "evt_big"))
	b := submitAsync(q, rec("b", "evt_b"))
	for _, c := range []chan submitted{a, b} {
		if s := answer(t, c); s.err != nil {
			t.Fatalf("a record the log takes, grouped with one it refuses: %v, want 201", s.err)
		}
	}
	if s := answer(t, big); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("the refused record: %+v %v, want intake_unavailable", s.res, s.err)
	}
	st2, _ := q.Dual()
	if st2.Pending.Records != 1 || st2.Pending.Stuck != 1 || lg.Published() != 2 {
		t.Fatalf("pending %d stuck %d log %d; want 1, 1, 2", st2.Pending.Records, st2.Pending.Stuck, lg.Published())
	}
	// A refused record is not the log's outage: with breaker_failures 1 the
	// gate would be open now if it had counted.
	if _, err := q.Submit(context.Background(), rec("c", "")); err != nil {
		t.Fatalf("the next hook: %v, want 201 (the breaker must not count a refused record)", err)
	}
}

// refusingLog refuses a record over logMax on its own, before anything
// reaches the log, as every adapter does with its own size check; while
// down it answers every other publish Unavailable.
type refusingLog struct {
	intake.Intake
	down atomic.Bool
}

func (l *refusingLog) PublishBatch(ctx context.Context, recs []intake.Record) (intake.Position, error) {
	for i, r := range recs {
		if len(r.Value) > logMax {
			return -1, intake.Errorf(intake.Permanent, "test log: record %d is %d bytes: %w", i, len(r.Value), intake.ErrRecordRefused)
		}
	}
	if l.down.Load() {
		return -1, intake.Errorf(intake.Unavailable, "test log: down")
	}
	return l.Intake.PublishBatch(ctx, recs)
}

// The gate's half-open probe is a group whose only record the log refuses
// on its own: that says nothing about the log, so the gate stays open (the
// probe gives its slot back) instead of closing while the log is down.
func TestDual_AProbeOfOnlyARefusedRecordDoesNotCloseTheGate(t *testing.T) {
	lg := &refusingLog{Intake: openLog(t, filepath.Join(t.TempDir(), "intake"))}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{Logger: testutil.Logger(t), MaxBatch: 1,
		Dual: &queue.DualOptions{
			Intake: lg, Node: "node-a", PublishTimeout: time.Second, BreakerFailures: 1, Probe: time.Nanosecond,
			ReconcileEvery: -1, ReconcileDeadline: time.Hour,
		}})
	lg.down.Store(true)
	if _, err := q.Submit(context.Background(), rec("a", "")); !errors.Is(err, queue.ErrIntakeUnavailable) {
		t.Fatalf("while the log is down: %v, want intake_unavailable", err)
	}
	if s, _ := q.Dual(); !s.GateOpen {
		t.Fatal("the gate is not open after a failed publish with breaker_failures 1")
	}
	if _, err := q.Submit(context.Background(), rec(bigBody, "")); !errors.Is(err, queue.ErrIntakeUnavailable) {
		t.Fatalf("the probe, one refused record: %v, want intake_unavailable", err)
	}
	if s, _ := q.Dual(); !s.GateOpen {
		t.Fatal("a probe whose only record was refused closed the gate while the log is still down")
	}
	lg.down.Store(false)
	if _, err := q.Submit(context.Background(), rec("b", "")); err != nil {
		t.Fatalf("the next probe, the log back: %v, want 201", err)
	}
	if s, _ := q.Dual(); s.GateOpen {
		t.Fatal("a confirmed probe did not close the gate")
	}
}

// The queue's record limit and the log's are the same number: every record
// the queue admits must fit the log, so a record near the limit is either
// acked or refused before either half (nothing stored), never stored and
// then refused by the log (carried, stuck, its caller a 503). Long tenant
// and source names are framing the old estimate left out.
func TestDual_TheQueueAdmitsOnlyWhatTheLogTakes(t *testing.T) {
	const limit = 4096
	lg, err := memory.Open(memory.Options{Dir: filepath.Join(t.TempDir(), "intake"), Node: "node-a", MaxRecordBytes: limit, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{Logger: testutil.Logger(t), Dual: &queue.DualOptions{
		Intake: lg, Node: "node-a", PublishTimeout: time.Second, BreakerFailures: 1000, Probe: time.Hour,
		ReconcileEvery: -1, ReconcileDeadline: time.Hour, MaxRecordBytes: limit,
	}})
	acked := 0
	for _, names := range []int{7, 64, 128} {
		for body := limit - 1200; body <= limit; body += 16 {
			r := rec(strings.Repeat("b", body), "")
			r.Tenant, r.Source = strings.Repeat("t", names), strings.Repeat("s", names)
			_, err := q.Submit(context.Background(), r)
			if _, carried := queue.Carried(err); carried {
				t.Fatalf("tenant and source of %d bytes, body %d: stored, then refused by the log: %v", names, body, err)
			}
			if err == nil {
				acked++
			}
		}
	}
	if acked == 0 {
		t.Fatal("no record within 1 200 bytes of the limit was acked: the bound refuses too much")
	}
}

// A record the log refused on its own is left for refusedRetry (30 s)
// before the reconciler tries it again: only an operator's change lets it
// in, and trying it on every pass only loads the log.
func TestReconciler_ARefusedRecordIsRetriedAfterABackoffNotEveryPass(t *testing.T) {
	clock := newRCClock()
	ci := &countingIntake{Intake: &refusingLog{Intake: openLog(t, filepath.Join(t.TempDir(), "intake"))}}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{Logger: testutil.Logger(t), Now: clock.now, Dual: &queue.DualOptions{
		Intake: ci, Node: "node-a", PublishTimeout: time.Second, BreakerFailures: 100, Probe: time.Hour,
		ReconcileEvery: -1, ReconcileDeadline: time.Hour,
	}})
	if _, err := q.Submit(context.Background(), rec(bigBody, "")); !errors.Is(err, queue.ErrIntakeUnavailable) {
		t.Fatalf("a record the log refuses: %v, want intake_unavailable", err)
	}
	calls := ci.calls
	q.Reconcile(context.Background())
	if ci.calls != calls {
		t.Fatalf("a pass right after the refusal published %d times, want 0", ci.calls-calls)
	}
	clock.advance(31 * time.Second)
	q.Reconcile(context.Background())
	if ci.calls != calls+1 {
		t.Fatalf("a pass after the backoff published %d times, want 1", ci.calls-calls)
	}
	if s, _ := q.Dual(); s.Pending.Records != 1 || s.Pending.Stuck != 1 {
		t.Fatalf("pending %d stuck %d, want 1 and 1 (never dropped)", s.Pending.Records, s.Pending.Stuck)
	}
}
