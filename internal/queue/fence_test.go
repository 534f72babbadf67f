package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// The three proofs of the fenced fsync failure (DUR-4.b and the fix that
// followed it), driven through Pebble's errorfs.
func TestQueue_FencedFsyncFailure(t *testing.T) {
	t.Run("no ack after a failed fsync", func(t *testing.T) {
		gate, st, _, q := gatedQueue(t, queue.Options{})

		gate.FailNext(1)
		s, err := q.Submit(context.Background(), rec("doomed", "evt_doomed"))
		if !errors.Is(err, queue.ErrStoreUnavailable) {
			t.Fatalf("record whose fsync failed: %+v, err %v; want ErrStoreUnavailable", s, err)
		}
		if q.Durable() != 0 {
			t.Fatalf("durable seq moved past a failed fsync: %d", q.Durable())
		}
		// The fence lifts once the cleanup landed; the undone hook is gone.
		waitFences(t, q, 1)
		n, _ := st.Count([]byte{store.PrefixHook})
		if n != 0 {
			t.Fatalf("%d hook rows left after the fence, want 0", n)
		}
		// Its listing index rows went with it (they ride in its batch).
		for _, p := range []byte{store.PrefixSourceIdx, store.PrefixTenantIdx} {
			if n, _ := st.Count([]byte{p}); n != 0 {
				t.Fatalf("%d index rows %q left after the fence, want 0", n, p)
			}
		}
		// Seqs stay consumed: the next hook does not reuse seq 1.
		r, err := q.Submit(context.Background(), rec("next", ""))
		if err != nil || r.Seq != 2 {
			t.Fatalf("next record: %+v %v; want seq 2", r, err)
		}
	})

	t.Run("an acked group whose successor's fsync fails still reads back", func(t *testing.T) {
		gate, st, sig, q := gatedQueue(t, queue.Options{})

		gate.Hold()
		first := submitAsync(q, rec("kept", "evt_kept"))
		sig.wait(t)
		release1 := gate.Held(t)
		// Group 2 is applied while fsync 1 is in flight (a full group's
		// worth, queue.HoldMax, is not held for it: S1), so it is still in
		// the writer's unsynced list when fsync 1 returns — the reference's
		// bug deleted group 1 along with it.
		second := submitAll(q, queue.HoldMax, "undone", true)
		sig.wait(t)
		gate.Open()
		gate.FailNext(1)
		close(release1)
		a := answer(t, first)
		if a.err != nil {
			t.Fatalf("first record: %v", a.err)
		}
		for _, ch := range second {
			if b := answer(t, ch); !errors.Is(b.err, queue.ErrStoreUnavailable) {
				t.Fatalf("second group's record: %+v %v; want ErrStoreUnavailable", b.res, b.err)
			}
		}
		waitFences(t, q, 1)
		if !hookPresent(t, st, a.res.ID) {
			t.Fatal("the acked hook was deleted by the fence")
		}
		if n, _ := st.Count([]byte{store.PrefixHook}); n != 1 {
			t.Fatalf("hook rows after fence = %d, want 1", n)
		}
		// A duplicate of the acked hook still dedupes to it.
		d, err := q.Submit(context.Background(), rec("kept", "evt_kept"))
		if err != nil || !d.Duplicate || d.ID != a.res.ID {
			t.Fatalf("duplicate of acked hook: %+v %v", d, err)
		}
	})

	// Under disk a group's rows and keys are built on the memory of groups
	// an fsync already covered (writer.pruneUnsynced): the undone groups
	// must still name their own rows, and no acked hook loses one.
	t.Run("groups built on reused memory are undone exactly", func(t *testing.T) {
		gate, st, sig, q := gatedQueue(t, queue.Options{})

		for i := range 8 {
			if _, err := q.Submit(context.Background(), rec(fmt.Sprint("acked ", i), fmt.Sprint("evt_acked_", i))); err != nil {
				t.Fatal(err)
			}
			sig.wait(t)
		}
		gate.Hold()
		kept := submitAsync(q, rec("kept", "evt_kept"))
		sig.wait(t)
		release := gate.Held(t)
		var undone []chan submitted
		for i := range 3 {
			// A full group's worth is applied while the fsync is held (S1).
			undone = append(undone, submitAll(q, queue.HoldMax, fmt.Sprint("undone", i), true)...)
			sig.wait(t) // one group each, applied while the fsync is held
		}
		gate.Open()
		gate.FailNext(1)
		close(release)
		if a := answer(t, kept); a.err != nil {
			t.Fatalf("kept record: %v", a.err)
		}
		for _, ch := range undone {
			if b := answer(t, ch); !errors.Is(b.err, queue.ErrStoreUnavailable) {
				t.Fatalf("undone record: %+v %v; want ErrStoreUnavailable", b.res, b.err)
			}
		}
		waitFences(t, q, 1)
		for _, p := range []byte{store.PrefixHook, store.PrefixDelivery, store.PrefixSourceIdx, store.PrefixTenantIdx, store.PrefixDedupe} {
			if n, _ := st.Count([]byte{p}); n != 9 {
				t.Fatalf("%d rows %q after the fence, want 9 (the acked hooks')", n, p)
			}
		}
	})

	t.Run("the provider's retry of an undone hook is stored once", func(t *testing.T) {
		gate := testutil.NewWALSyncGate()
		st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
		q := testutil.StartQueue(t, st, queue.Options{})

		gate.FailNext(1)
		if _, err := q.Submit(context.Background(), rec("body", "evt_retry")); !errors.Is(err, queue.ErrStoreUnavailable) {
			t.Fatalf("first attempt: %v", err)
		}
		waitFences(t, q, 1)
		retry, err := q.Submit(context.Background(), rec("body", "evt_retry"))
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if retry.Duplicate {
			t.Fatal("the retry was answered as a duplicate of a hook that was undone")
		}
		again, err := q.Submit(context.Background(), rec("body", "evt_retry"))
		if err != nil || !again.Duplicate || again.ID != retry.ID {
			t.Fatalf("second retry: %+v %v; want duplicate of %x", again, err, retry.ID)
		}
		if n, _ := st.Count([]byte{store.PrefixHook}); n != 1 {
			t.Fatalf("hook rows = %d, want exactly 1", n)
		}
	})
}

// waitFences waits until n failures have been fenced and cleaned up.
func waitFences(t *testing.T, q *queue.Queue, n uint64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "fence lifted", func() bool {
		s := q.Stats()
		return s.Fences >= n && !s.Fenced
	})
}

// TestQueue_FsyncFailureSweep fails the k-th WAL fsync of a sequence of
// ingests, for every k, then restarts the store: every acked hook is there,
// no refused one is, and the refused ones' retries are stored once.
func TestQueue_FsyncFailureSweep(t *testing.T) {
	const records = 12
	for k := 1; k <= records+1; k++ {
		t.Run(fmt.Sprintf("fail_sync_%d", k), func(t *testing.T) {
			gate := testutil.NewWALSyncGate()
			fs := gate.Wrap(vfs.Default)
			dir := testutil.TempStoreDir(t)
			st, err := store.Open(store.Options{Dir: dir, FS: fs, Logger: testutil.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			q, err := queue.New(st, queue.Options{FenceRetry: time.Millisecond, Logger: testutil.Logger(t), OnFatal: func(err error) { t.Errorf("fatal: %v", err) }})
			if err != nil {
				t.Fatal(err)
			}
			q.Start()
			acked := map[string][16]byte{}
			var refused []string
			syncs := 0
			for i := range records {
				key := fmt.Sprintf("evt_%d", i)
				syncs++
				if syncs == k {
					gate.FailNext(1)
				}
				r, err := q.Submit(context.Background(), rec(key, key))
				switch {
				case err == nil:
					acked[key] = r.ID
				case errors.Is(err, queue.ErrStoreUnavailable):
					refused = append(refused, key)
					waitFences(t, q, uint64(len(refused)))
				default:
					t.Fatalf("record %d: %v", i, err)
				}
			}
			q.Close()
			_ = st.Close()
			if k <= records && len(refused) != 1 {
				t.Fatalf("refused %d records, want 1", len(refused))
			}

			st = testutil.OpenStore(t, dir, nil)
			for key, id := range acked {
				if !hookPresent(t, st, id) {
					t.Fatalf("acked %s lost", key)
				}
			}
			q = testutil.StartQueue(t, st, queue.Options{})
			for _, key := range refused {
				r, err := q.Submit(context.Background(), rec(key, key))
				if err != nil || r.Duplicate {
					t.Fatalf("retry of refused %s: %+v %v", key, r, err)
				}
			}
			if n, _ := st.Count([]byte{store.PrefixHook}); n != records {
				t.Fatalf("hooks after retries = %d, want %d", n, records)
			}
		})
	}
}

// A store failure report that arrives after the fence it needed (a report
// reads Store.Failed, then sends; the fence drains the channel when it
// starts, so a report sent in between is left for later) fences nothing
// once the store's generation is healthy: before, the writer fenced the
// reopened store again, refusing commits and undoing its unsynced groups
// for nothing (found by a helper's review, with the dispatcher reporting
// too).
func TestQueue_AStaleFailureReportFencesNothing(t *testing.T) {
	_, st, _, q := gatedQueue(t, queue.Options{})
	if _, err := q.Submit(context.Background(), rec("before", "")); err != nil {
		t.Fatal(err)
	}
	if st.Failed() != nil {
		t.Fatal("the store failed before the report")
	}
	q.ReportStoreFailure(errors.New("a failure of a generation since reopened"))
	testutil.Eventually(t, 10*time.Second, "the writer took the report", func() bool {
		return q.FenceReportsPending() == 0 && !q.Stats().Fenced
	})
	if f := q.Stats().Fences; f != 0 {
		t.Fatalf("fences after a stale report: %d, want 0", f)
	}
	if _, err := q.Submit(context.Background(), rec("after", "")); err != nil {
		t.Fatalf("commit after a stale report: %v", err)
	}
}
