package quarantine_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// countingSink counts deliveries by hook id.
type countingSink struct {
	mu   sync.Mutex
	byID map[[16]byte]int
}

func (s *countingSink) Deliver(_ context.Context, m *sink.Message) error {
	s.mu.Lock()
	s.byID[m.ID]++
	s.mu.Unlock()
	return nil
}

func (s *countingSink) Close() error { return nil }

// countingDispatch starts a dispatcher over st that delivers sink 1 ("log")
// to a countingSink and reclaims through q, and stores it in disp (the
// queue's OnCommitted wakes it); it stops with the test.
func countingDispatch(t *testing.T, st *store.Store, q *queue.Queue, disp *atomic.Pointer[dispatch.Dispatcher]) *countingSink {
	t.Helper()
	cs := &countingSink{byID: map[[16]byte]int{}}
	d := dispatch.New(st, dispatch.Options{
		Targets:   map[uint16]dispatch.Target{1: {ID: "log", Sink: cs}},
		Durable:   q.Durable,
		OnReclaim: q.Reclaimed,
		Poll:      20 * time.Millisecond,
		Logger:    testutil.Logger(t),
	})
	disp.Store(d)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return cs
}

// memoryLog opens a memory intake log for node-a in a temp dir, closed
// with the test.
func memoryLog(t *testing.T) *memory.Log {
	t.Helper()
	lg, err := memory.Open(memory.Options{Dir: filepath.Join(t.TempDir(), "intake"), Node: "node-a", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	return lg
}

func (s *countingSink) count(id [16]byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// A release whose commit failed to the caller under wal.type: dual (the
// local fsync failed, the intake log confirmed: the record is carried, and
// the reconciler will write its local half under the same seq and id) is
// retried before the reconciler has done so. The retry must not commit the
// id a second time (ack rule 7): it is refused while the first record is
// unconfirmed, and once the reconciler completed it the next step finds the
// id in the store and only deletes the pen row. One hook, one record in the
// log, one delivery.
func TestRelease_RetriedAfterACarriedCommitUnderDualCommitsOnce(t *testing.T) {
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	lg := memoryLog(t)
	var disp atomic.Pointer[dispatch.Dispatcher]
	q := testutil.StartQueue(t, st, queue.Options{
		Dual: &queue.DualOptions{
			Intake: lg, Node: "node-a", PublishTimeout: 500 * time.Millisecond,
			BreakerFailures: 3, Probe: time.Hour,
			ReconcileEvery: -1, // the test runs the reconciler's pass itself
		},
		OnDurable: func() {
			if d := disp.Load(); d != nil {
				d.Wake()
			}
		},
	})
	t.Cleanup(gate.ReleaseAll) // registered after the queue: runs first
	cs := countingDispatch(t, st, q, &disp)

	p := newPen(t, st, quarantine.Options{})
	e := envelope(t, "a", time.Now().Add(-time.Minute), `{"k":1}`)
	hold(t, p, e)
	src := &edge.Source{ID: "a", Sinks: []queue.SinkRef{{Num: 1, ID: "log"}}} // no verifier, no dedupe
	rel := quarantine.NewRelease(p, func(string) (*edge.Source, bool) { return src, true }, q)
	until := time.Now().UnixMilli()

	// Step 1: the log confirms, the local fsync fails. The caller sees an
	// error; the record is carried (in the log, its local rows undone by
	// the fence), the pen row stays.
	gate.FailNext(1)
	moved, _, _, _, err := rel.Release(t.Context(), "", nil, until, 10)
	if !errors.Is(err, queue.ErrStoreUnavailable) || moved != 0 {
		t.Fatalf("first step = moved %d, %v; want 0 and store_unavailable", moved, err)
	}
	if _, carried := queue.Carried(err); !carried {
		t.Fatalf("first step's error %v is not a carried record's", err)
	}
	testutil.Eventually(t, 10*time.Second, "fence lifted", func() bool {
		s := q.Stats()
		return s.Fences >= 1 && !s.Fenced
	})
	if _, found, _ := st.LookupHookID(e.ID); found {
		t.Fatal("the fence left the failed group's id row: the retry below would not be the reviewer's case")
	}

	// Step 2, the retry, before the reconciler completed the local half.
	moved, _, _, _, err = rel.Release(t.Context(), "", nil, until, 10)
	if !errors.Is(err, queue.ErrIntakePending) || moved != 0 {
		t.Fatalf("retry before the reconciler: moved %d, err %v; want it refused intake_pending (ack rule 7)", moved, err)
	}

	// The reconciler writes the carried record's local half.
	q.Reconcile(t.Context())
	testutil.Eventually(t, 10*time.Second, "pending set drained", func() bool {
		s, _ := q.Dual()
		return s.Pending.Records == 0
	})
	// Step 3: whatever step 2 did, the job goes on until the pen is empty.
	if s := release(t, rel, "", nil, until, 10); !s.done {
		t.Fatalf("third step = %+v", s)
	}
	stats(t, p, 0, 0)

	inLog := 0
	for _, r := range lg.Records() {
		if r.ID == e.ID {
			inLog++
		}
	}
	// Every hook of the id delivered and reclaimed: no delivery can follow.
	testutil.Eventually(t, 10*time.Second, "the released hook delivered and reclaimed", func() bool {
		n, _ := st.Count([]byte{store.PrefixHook})
		return n == 0
	})
	if got := cs.count(e.ID); got != 1 || inLog != 1 {
		t.Fatalf("id %s after the release completed: delivered %d times, %d records in the log; want one of each",
			idOf(e), got, inLog)
	}
}

// A hook released under wal.type: dual is in the intake log, and the
// store that held it is lost: the node is restored from a backup taken
// before the release, in which the hook is still held. Boot recovery
// replays the released record into that store, and dispatch delivers and
// reclaims it (retention.delivered: 0). The release job then runs its
// next step over the restored pen. The hook must not be committed a
// second time (ack rule 7): recovery writes the hook and takes its pen
// row in one batch, so the step finds nothing to release. One hook, one
// record in the log, one delivery.
func TestRelease_AfterBootRecoveryReplayedTheReleaseCommitsOnce(t *testing.T) {
	src := &edge.Source{ID: "a", Sinks: []queue.SinkRef{{Num: 1, ID: "log"}}} // no verifier, no dedupe
	sources := func(string) (*edge.Source, bool) { return src, true }
	dual := func(lg *memory.Log) *queue.DualOptions {
		return &queue.DualOptions{Intake: lg, Node: "node-a", PublishTimeout: 5 * time.Second, Probe: time.Hour}
	}
	lg := memoryLog(t)

	// The lost host: the hook is held, a backup is taken, then it is released.
	lost := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, lost, queue.Options{Dual: dual(lg)})
	p := newPen(t, lost, quarantine.Options{})
	e := envelope(t, "a", time.Now().Add(-time.Minute), `{"k":1}`)
	hold(t, p, e)
	backupDir := filepath.Join(t.TempDir(), "backup")
	if err := lost.Checkpoint(backupDir); err != nil {
		t.Fatal(err)
	}
	until := time.Now().UnixMilli()
	if s := release(t, quarantine.NewRelease(p, sources, q), "", nil, until, 10); s.moved != 1 || !s.done {
		t.Fatalf("release on the lost host = %+v, want one moved", s)
	}
	q.Close()

	// The replacement: the backup restored, boot recovery replays the log.
	st := testutil.OpenStore(t, backupDir, nil)
	route := func(string) (queue.Route, bool) { return queue.Route{Sinks: src.Sinks}, true }
	sum, err := queue.RecoverNode(t.Context(), st, queue.NodeOptions{Replay: true, RecoverOptions: queue.RecoverOptions{
		Intake: lg, Node: "node-a", Origin: queue.OriginRestored, Resolve: route, Logger: testutil.Logger(t),
	}})
	if err != nil || sum.Applied != 1 {
		t.Fatalf("boot recovery: %s, %v; want the released hook applied", sum, err)
	}
	var disp atomic.Pointer[dispatch.Dispatcher]
	q = testutil.StartQueue(t, st, queue.Options{
		Dual: dual(lg),
		OnDurable: func() {
			if d := disp.Load(); d != nil {
				d.Wake()
			}
		},
	})
	cs := countingDispatch(t, st, q, &disp)
	delivered := func() {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, "every hook delivered and reclaimed", func() bool {
			n, _ := st.Count([]byte{store.PrefixHook})
			return n == 0
		})
	}
	delivered()
	if got := cs.count(e.ID); got != 1 {
		t.Fatalf("the replayed hook was delivered %d times, want once", got)
	}

	// The release job's next step, over the restored pen.
	p = newPen(t, st, quarantine.Options{})
	s := release(t, quarantine.NewRelease(p, sources, q), "", nil, until, 10)
	delivered()
	inLog := 0
	for _, r := range lg.Records() {
		if r.ID == e.ID {
			inLog++
		}
	}
	if got := cs.count(e.ID); got != 1 || inLog != 1 {
		t.Fatalf("id %s after boot recovery and a release step (moved %d): delivered %d times, %d records in the log; want one of each",
			idOf(e), s.moved, got, inLog)
	}
	stats(t, p, 0, 0)
}
