package dispatch_test

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// settleDue writes, synced, what change adds to a batch for the one due
// row of hook seq's delivery to sink 0 (at, its due time; dl, its row as
// stored), as a batch of the dispatcher's that a reopen replayed left it.
func settleDue(t *testing.T, st *store.Store, seq uint64, change func(b *store.Batch, at int64, dl *store.Delivery)) {
	t.Helper()
	dl, err := st.ReadDelivery(seq, 0)
	if err != nil || dl == nil {
		t.Fatalf("read delivery %d/0: %v (found: %v)", seq, err, dl != nil)
	}
	b := st.NewBatch()
	defer b.Close()
	n := 0
	if err := st.ScanDue(0, func(at int64, s uint64, num uint16) bool {
		if s == seq && num == 0 {
			change(b, at, dl)
			n++
		}
		return true
	}); err != nil || n != 1 {
		t.Fatalf("due rows of hook %d: %d (%v), want 1", seq, n, err)
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
}

// removeHook deletes every row of hook seq, its due row included, as a
// delivered outcome's batch that removed the hook does.
func removeHook(t *testing.T, st *store.Store, seq uint64) {
	t.Helper()
	rows := testutil.StoredRows(t, st, seq)
	settleDue(t, st, seq, func(b *store.Batch, at int64, _ *store.Delivery) {
		b.DeleteHook(rows)
		b.DropDue(at, seq, 0)
	})
}

// recordedRetry records the attempt in flight on hook seq's one delivery
// as a failure due again in an hour, as a retry outcome's batch does.
func recordedRetry(t *testing.T, st *store.Store, seq uint64) {
	t.Helper()
	settleDue(t, st, seq, func(b *store.Batch, at int64, dl *store.Delivery) {
		dl.Attempts++
		dl.LastError = "503 busy"
		b.Retry(at, seq, 0, dl, time.Now().Add(time.Hour).UnixMilli())
	})
}

// deadAgain leaves hook seq's one delivery dead-lettered without an
// attempt (its count still 0), as a reopen that lost the unsynced revive
// of a row dead-lettered from due leaves it (DeadFromDue, then a DLQ
// replay's Revive).
func deadAgain(t *testing.T, st *store.Store, seq uint64) {
	t.Helper()
	settleDue(t, st, seq, func(b *store.Batch, at int64, dl *store.Delivery) {
		b.DeadFromDue(at, seq, 0, dl, time.Now().UnixMilli(), "sink removed")
	})
}

// An attempt's outcome is not written over a row that a store reopen
// settled (R1, outcome.go). A batch the store reported failed may still
// have reached the WAL ahead of the fault that failed it, and the fence's
// reopen replays it; the dispatcher, which had kept the batch's outcomes
// to record again, then wrote them over rows the replay had already
// settled: a delivery row and an attempt row (and a due row for a retry, a
// dead row for a dead letter) of a hook that had no other row left, which
// no reclaim removes, or a second due row of a retry the batch had
// recorded (the simulator, rule 7: "rows hooks=0 deliveries=85", seed 400
// with a 64 KiB memtable). The test makes that state without the race:
// the rows are settled as the replayed batch settled them, and the outcome
// then meets a reopen, either while its attempt runs or after its first
// write failed (kept, and recorded again once the store reopens: the path
// the simulator found). The hot cache is off, so that the outcome's
// reclaim reads the rows whether or not the loop has seen the reopen yet.
func TestDispatch_AnOutcomeIsNotWrittenOverRowsAReopenSettled(t *testing.T) {
	// settled: what the replayed batch left. rows: what must be left of
	// each family once the outcome is recorded.
	removed := func(t *testing.T, st *store.Store, seq uint64) { removeHook(t, st, seq) }
	none := map[byte]int{}
	for _, tc := range []struct {
		name    string
		answer  error
		settled func(t *testing.T, st *store.Store, seq uint64)
		rows    map[byte]int
	}{
		{"delivered, the hook removed", nil, removed, none},
		{"retry, the hook removed", errors.New("503 busy"), removed, none},
		{"dead, the hook removed", sink.Permanent(errors.New("410 gone")), removed, none},
		// The replayed batch recorded this very attempt as a retry, due
		// in an hour: recorded again, the delivery had a second due row.
		{"retry, already recorded", errors.New("503 busy"), recordedRetry,
			map[byte]int{store.PrefixHook: 1, store.PrefixDelivery: 1, store.PrefixDue: 1}},
		// The row is dead again with the claim's attempt count (0): a
		// check of the count alone wrote the delivery over it and removed
		// the hook, leaving its dead-letter row behind.
		{"delivered, the row dead again", nil, deadAgain,
			map[byte]int{store.PrefixHook: 1, store.PrefixDelivery: 1, store.PrefixDead: 1}},
	} {
		for _, reopen := range []string{"while the attempt runs", "after the outcome's write failed"} {
			t.Run(tc.name+", reopened "+reopen, func(t *testing.T) {
				s := newScripted(tc.answer)
				block := make(chan struct{})
				s.block = block
				rec := testutil.NewLogRecorder()
				// Reopens retried 20 times 200 ms apart: the store stays
				// without a generation for as long as the test fails its
				// opens, well past the outcome's first write.
				obs := &countingObserver{}
				e := setupQueue(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
					dispatch.Options{Logger: slog.New(rec), Observer: obs}, queue.Options{FenceRetry: 200 * time.Millisecond}, false)
				res := e.submit(t, "settled elsewhere", "")
				testutil.Receive(t, s.entered, "the delivery never reached the sink")

				release := func() {
					s.unblock(block)
					if m := s.next(t); m.Seq != res.Seq {
						t.Fatalf("attempt for seq %d, want %d", m.Seq, res.Seq)
					}
				}
				gen := e.st.Generation()
				failCommit := func() {
					e.gate.FailNext(1)
					if !submitRefused(t, e.q) {
						t.FailNow()
					}
				}
				reopened := func() {
					testutil.Eventually(t, 10*time.Second, "the store reopened and the fence lifted", func() bool {
						return e.st.Generation() != gen && !e.q.Stats().Fenced
					})
				}
				if reopen == "while the attempt runs" {
					failCommit()
					reopened()
					tc.settled(t, e.st, res.Seq)
					release()
				} else {
					tc.settled(t, e.st, res.Seq)
					e.gate.FailOpens(true)
					failCommit()
					release()
					testutil.Eventually(t, 10*time.Second, "the outcome's first write failed", func() bool {
						return len(rec.Matching("recording delivery outcomes failed")) > 0
					})
					e.gate.FailOpens(false)
					reopened()
				}
				testutil.Eventually(t, 10*time.Second, "the outcome recorded", func() bool {
					return e.d.Gauges().Inflight == 0
				})
				for _, f := range []struct {
					name   string
					prefix byte
				}{
					{"hook", store.PrefixHook}, {"delivery", store.PrefixDelivery}, {"due", store.PrefixDue},
					{"dead", store.PrefixDead}, {"attempt", store.PrefixAttempt},
				} {
					if n, err := e.st.Count([]byte{f.prefix}); err != nil || n != uint64(tc.rows[f.prefix]) {
						t.Errorf("%s rows after the outcome: %d (%v), want %d: the outcome was written over rows the reopen had settled", f.name, n, err, tc.rows[f.prefix])
					}
				}
				// The attempt ran, so the metrics count it, once: delivered
				// if it was, else retry (it dead-lettered nothing).
				want := "out/retry"
				if tc.answer == nil {
					want = "out/delivered"
				}
				if got := obs.all(); len(got) != 1 || got[0] != want {
					t.Errorf("deliveries observed %v, want [%s]", got, want)
				}
				// (The dead gauge is not checked: the test's own dead row may
				// come after the dispatcher recounted them at the reopen.)
				if g := e.d.Gauges(); g.Pending != int64(tc.rows[store.PrefixDue]) {
					t.Errorf("pending gauge %d, want %d", g.Pending, tc.rows[store.PrefixDue])
				}
				if t.Failed() {
					for _, l := range rec.Matching() {
						t.Log(l)
					}
				}
			})
		}
	}
}

// A write of the dispatcher's that fails because the store's generation
// failed fences the queue, which reopens the store, with no hook coming
// in (Dispatcher.apply). Before, only the commit path, the pen and the
// readiness probe reported a failed generation: on a quiet node the
// dispatcher's outcomes stayed unrecorded, their claims held and the hook
// undelivered as far as the store knew, until the next hook (the
// simulator, rule 7, seed 300819: "pending gauge 0 + inflight 40").
func TestDispatch_AFailedWriteOfTheDispatchersReopensTheStore(t *testing.T) {
	s := newScripted()
	block := make(chan struct{})
	s.block = block
	e := setup(t, s, dispatch.Options{})
	res := e.submit(t, "quiet node", "")
	testutil.Receive(t, s.entered, "the delivery never reached the sink")
	// The generation fails outside the queue and the dispatcher: a WAL
	// fsync fails (a test's own, here), and no hook comes to fence it.
	gen := e.st.Generation()
	e.gate.FailNext(1)
	if err := e.st.SyncWAL(); err == nil {
		t.Fatal("a failed WAL fsync reported success")
	}
	if e.st.Failed() == nil {
		t.Fatal("the store's generation did not fail")
	}
	s.unblock(block)
	if m := s.next(t); m.Seq != res.Seq {
		t.Fatalf("attempt for seq %d, want %d", m.Seq, res.Seq)
	}
	testutil.Eventually(t, 10*time.Second, "the store reopened and the outcome recorded: the hook removed", func() bool {
		return e.st.Generation() != gen && e.d.Gauges().Inflight == 0 && count(t, e.st, store.PrefixHook) == 0
	})
	if st := e.q.Stats(); st.Fences != 1 || st.Hooks != 0 {
		t.Fatalf("queue after the fence: fences %d hooks %d, want 1 and 0", st.Fences, st.Hooks)
	}
}

// countingObserver records every delivery the dispatcher reports, as
// sink/result.
type countingObserver struct {
	mu  sync.Mutex
	got []string
}

func (o *countingObserver) Delivery(sink, result string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, sink+"/"+result)
}

func (o *countingObserver) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}
