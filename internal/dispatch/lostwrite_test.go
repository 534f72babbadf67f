package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// walWriteFaults fails every WAL write (not sync) while on: the simulator's
// write class, where Pebble has already reported the batch applied when
// its log writer's write fails, and the fence's reopen then drops it.
type walWriteFaults struct {
	on     atomic.Bool
	failed atomic.Int32
}

func (f *walWriteFaults) String() string { return "wal-write-faults" }

func (f *walWriteFaults) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") || (op.Kind != errorfs.OpFileWrite && op.Kind != errorfs.OpFileWriteAt) {
		return nil
	}
	if f.on.Load() {
		f.failed.Add(1)
		return errorfs.ErrInjected
	}
	return nil
}

// submitRefused submits a hook over a store whose WAL write or fsync has
// failed, which fences the queue (its reopen then drops what the WAL lost),
// and reports whether it was refused store_unavailable as it must be.
// Errorf, not Fatalf: seams call it off the test's goroutine.
func submitRefused(t testing.TB, q *queue.Queue) bool {
	t.Helper()
	r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", ContentType: "text/plain",
		Body: []byte("refused"), Sinks: []queue.SinkRef{{Num: 0, ID: "out"}}}
	if _, err := q.Submit(context.Background(), r); !errors.Is(err, queue.ErrStoreUnavailable) {
		t.Errorf("submit over the failed store: %v, want store_unavailable", err)
		return false
	}
	return true
}

// lostOutcome runs one hook's first attempt (answered by s's script) and
// loses its outcome: the outcome's batch is applied, Pebble reports it
// done, its WAL write fails, and the fence's reopen (forced by the next
// commit) brings back the rows as the WAL kept them. applied reports when
// the outcome's rows are visible.
func lostOutcome(t *testing.T, s *scriptedSink, applied func(*env) bool) (*env, queue.Result) {
	t.Helper()
	faults := &walWriteFaults{}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), errorfs.Wrap(vfs.Default, faults))
	var d atomic.Pointer[dispatch.Dispatcher]
	q := testutil.StartQueue(t, st, queue.Options{
		FenceRetry: 10 * time.Millisecond,
		OnDurable: func() {
			if p := d.Load(); p != nil {
				p.Wake()
			}
		},
	})
	block := make(chan struct{})
	s.block = block
	rec := testutil.NewLogRecorder()
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range rec.Matching() {
				t.Log(l)
			}
		}
	})
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
	e := &env{st: st, q: q, d: disp}
	res := e.submit(t, "stranded", "")
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached the sink")
	}
	// Whatever the claim wrote is durable now, as the next commit group's
	// fsync would make it.
	if err := st.SyncWAL(); err != nil {
		t.Fatal(err)
	}
	// The outcome's batch is the next WAL write: it fails.
	faults.on.Store(true)
	s.unblock(block)
	if m := s.next(t); m.Seq != res.Seq {
		t.Fatalf("attempt for seq %d, want %d", m.Seq, res.Seq)
	}
	// Pebble reports the outcome applied (its rows visible at once) before
	// its log writer's write fails.
	testutil.Eventually(t, 10*time.Second, "the outcome applied", func() bool { return applied(e) })
	// The log writer writes it out at the next sync at the latest (as the
	// queue's syncer asks after its next group): the write fails.
	if err := st.SyncWAL(); err == nil || faults.failed.Load() == 0 {
		t.Fatalf("sync over the failing WAL write: %v (writes failed: %d), want an error", err, faults.failed.Load())
	}
	faults.on.Store(false)
	// The next commit's fsync reports the failed write and fences; the
	// fence's reopen drops what the WAL lost.
	if !submitRefused(t, q) {
		t.FailNow()
	}
	return e, res
}

// An outcome that a failed WAL write drops after Pebble reported it
// applied must not strand the hook: its delivery is attempted again and
// the hook reclaimed, with no restart. Before the claim moved to memory the
// reopen brought back the claim's synced in-flight row while the
// dispatcher had released its claim with the outcome, and nothing
// attempted the row again until a restart's reclaim (the simulator's write
// class, rule 1).
func TestDispatch_OutcomeLostToAFailedWALWriteIsAttemptedAgain(t *testing.T) {
	e, _ := lostOutcome(t, newScripted(), func(e *env) bool {
		hooks, err := e.st.Count([]byte{store.PrefixHook})
		return err == nil && hooks == 0 // delivered and reclaimed
	})
	testutil.Eventually(t, 20*time.Second, "the hook delivered and reclaimed after the fence, with no restart", func() bool {
		hooks, err := e.st.Count([]byte{store.PrefixHook})
		return err == nil && hooks == 0
	})
	if g := e.d.Gauges(); g.Pending != 0 || g.Inflight != 0 {
		t.Fatalf("gauges after the hook was reclaimed: pending %d inflight %d, want 0 and 0", g.Pending, g.Inflight)
	}
}

// A dead-lettering that a failed WAL write drops is not counted: after the
// reopen the dead row is gone and the delivery due again, and the dead
// gauge (ankusa_queue_dead) must say what the dead-letter queue holds.
// Before the dispatcher resynced on a reopen it kept counting the lost row
// (the simulator's rule 7: "dead gauge 2, dead rows 1").
func TestDispatch_DeadLetteringLostToAFailedWALWriteIsNotCounted(t *testing.T) {
	// Refused for good, then (attempted again after the reopen) taken.
	s := newScripted(sink.Permanent(errors.New("410 gone")), nil)
	e, _ := lostOutcome(t, s, func(e *env) bool {
		dead, err := e.st.Count([]byte{store.PrefixDead})
		return err == nil && dead == 1 && e.d.Gauges().Dead == 1
	})
	// The store's rows, not the queue's hook counter: the fence's recount
	// races a reclaim the dispatcher applies between the reopen and the
	// recount (docs/testing.md, "Left out by default").
	testutil.Eventually(t, 20*time.Second, "the hook delivered and reclaimed after the fence", func() bool {
		hooks, err := e.st.Count([]byte{store.PrefixHook})
		return err == nil && hooks == 0
	})
	dead := count(t, e.st, store.PrefixDead)
	if g := e.d.Gauges(); uint64(g.Dead) != dead {
		t.Fatalf("dead gauge %d, dead rows %d", g.Dead, dead)
	}
}

// replayWorld is a store whose WAL writes fail while faults is on, a
// queue, and a dispatcher over s whose clock is the test's (off moves it):
// a replay job gains tokens only when the test advances it. wake: the
// queue wakes the dispatcher when hooks become durable; poll: its idle
// wait.
type replayWorld struct {
	*env
	faults *walWriteFaults
	off    *atomic.Int64
}

func newReplayWorld(t *testing.T, s sink.Sink, wake bool, poll time.Duration) *replayWorld {
	t.Helper()
	faults := &walWriteFaults{}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), errorfs.Wrap(vfs.Default, faults))
	var d atomic.Pointer[dispatch.Dispatcher]
	qo := queue.Options{FenceRetry: 10 * time.Millisecond}
	if wake {
		qo.OnDurable = func() {
			if p := d.Load(); p != nil {
				p.Wake()
			}
		}
	}
	q := testutil.StartQueue(t, st, qo)
	// Ahead of the queue's clock, so every hook it commits is due at once.
	off := &atomic.Int64{}
	base := time.Now().Add(10 * time.Second)
	disp := dispatch.New(st, dispatch.Options{
		Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Logger: testutil.Logger(t),
		Now:   func() time.Time { return base.Add(time.Duration(off.Load())) },
		Poll:  poll,
		Retry: dispatch.RetryPolicy{Base: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 5},
	})
	d.Store(disp)
	if err := disp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(disp.Stop)
	return &replayWorld{env: &env{st: st, q: q, d: disp}, faults: faults, off: off}
}

// deadLettered submits n hooks and waits until each is dead-lettered (the
// sink refuses them) and the WAL synced, then starts a dlq job at one row
// a second of the test's clock.
func (w *replayWorld) deadLettered(t *testing.T, n int) dispatch.Job {
	t.Helper()
	for i := range n {
		w.submit(t, fmt.Sprintf("dead then replayed %d", i), "")
	}
	testutil.Eventually(t, 10*time.Second, "the hooks dead-lettered", func() bool {
		w.d.Wake()
		return count(t, w.st, store.PrefixDead) == uint64(n) && w.d.Gauges().Dead == int64(n)
	})
	job, err := w.d.CreateJob(context.Background(), dispatch.JobSpec{Kind: "dlq", Rate: 1, MaxLagMs: 86_400_000})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.st.SyncWAL(); err != nil {
		t.Fatal(err)
	}
	return job
}

// loseStep fails the WAL write of the job's next step (one row), and
// waits until Pebble reported it applied (dead rows left: deadAfter).
func (w *replayWorld) loseStep(t *testing.T, deadAfter uint64) {
	t.Helper()
	w.faults.on.Store(true)
	w.off.Add(int64(time.Second)) // one token: the next job tick steps
	testutil.Eventually(t, 10*time.Second, "the step applied (a row revived)", func() bool {
		return count(t, w.st, store.PrefixDead) == deadAfter
	})
	if err := w.st.SyncWAL(); err == nil || w.faults.failed.Load() == 0 {
		t.Fatalf("sync over the failing WAL write: %v (writes failed: %d), want an error", err, w.faults.failed.Load())
	}
	w.faults.on.Store(false)
}

// fence makes the next commit fence the queue, whose reopen drops what
// the WAL lost.
func (w *replayWorld) fence(t *testing.T) {
	t.Helper()
	if !submitRefused(t, w.q) {
		t.FailNow()
	}
}

// replayedAll advances the clock a second per look until the DLQ is empty
// and every hook delivered, then checks the job: done, moved rows moved.
func (w *replayWorld) replayedAll(t *testing.T, job dispatch.Job, moved int64) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "every row replayed and every hook delivered", func() bool {
		w.off.Add(int64(time.Second)) // a token per look
		w.d.Wake()
		return count(t, w.st, store.PrefixDead) == 0 && count(t, w.st, store.PrefixHook) == 0
	})
	got, err := w.d.GetJob(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != dispatch.JobDone || got.Moved != moved {
		t.Fatalf("job %s moved %d, want done and %d", got.State, got.Moved, moved)
	}
}

// A DLQ replay step that a failed WAL write drops after Pebble reported it
// applied must not end the job with the row still dead-lettered. The
// step's cursor rides in the unsynced batch that revives the rows it
// passed; the fence's reopen drops both, and the stored job is back at its
// old cursor, but the dispatcher went on from the one it had kept: the
// job reported done, the row moved, and the row stayed in the DLQ until a
// restart reloaded the job (resync now reloads them).
func TestReplay_AStepLostToAFailedWALWriteIsReplayedAgain(t *testing.T) {
	w := newReplayWorld(t, newScripted(sink.Permanent(errors.New("410 gone")), nil), true, 10*time.Millisecond)
	job := w.deadLettered(t, 1)
	w.loseStep(t, 0)
	w.fence(t)
	testutil.Eventually(t, 10*time.Second, "the reopen brought the dead row back", func() bool {
		return !w.q.Stats().Fenced && count(t, w.st, store.PrefixDead) == 1
	})
	w.replayedAll(t, job, 1)
}

// J1 (replay.go): the first job tick after a reopen must step from the
// stored job, not the one the loop held. The job has two rows; its first
// step is lost, so it is still running; the token for its next step is
// already there when the store reopens, and nothing but the job tick
// wakes the loop (no wake from the queue, an hour's poll, the revived
// row's delivery held in the sink). Stepping from the held cursor moved
// the second row, wrote a cursor past both and ended the job: the first
// row stayed dead-lettered for good.
func TestReplay_TheFirstTickAfterAReopenStepsFromTheStoredJob(t *testing.T) {
	s := newScripted(sink.Permanent(errors.New("410 gone")), sink.Permanent(errors.New("410 gone")))
	w := newReplayWorld(t, s, false, time.Hour)
	job := w.deadLettered(t, 2)
	block := make(chan struct{})
	s.mu.Lock()
	s.block = block
	s.mu.Unlock()
	w.loseStep(t, 1)
	testutil.Receive(t, s.entered, "the revived row's delivery never reached the sink")
	// The next step's token, while the generation is failed: every tick
	// until the reopen fails to step and keeps it.
	w.off.Add(int64(time.Second))
	w.fence(t)
	testutil.Eventually(t, 10*time.Second, "the reopen brought the first row back", func() bool {
		return !w.q.Stats().Fenced && count(t, w.st, store.PrefixDead) == 2
	})
	// The first job tick steps on its own (nothing here wakes the loop,
	// which would resync it first): it moves one row.
	testutil.Eventually(t, 10*time.Second, "the first job tick after the reopen stepped", func() bool {
		return count(t, w.st, store.PrefixDead) == 1
	})
	s.unblock(block)
	w.replayedAll(t, job, 2)
}
