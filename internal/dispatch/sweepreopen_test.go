package dispatch_test

import (
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

// A history sweep's removal is not synced (a sweep lost in a crash is done
// again by the next one), so a failed WAL write can drop it after Pebble
// reported it applied and the counters were lowered; the fence's reopen
// then brings the hook and its retained row back. The history gauges
// (ankusa_history_hooks, ankusa_history_bytes) and the byte bound the sweep
// reads (retention.max_bytes) must count them again, with an archive as
// without one: the next sweep removes the hook again and lowers the
// counters again. Before the dispatcher recounted them under an archive
// too, the gauges ended at -1 hook and minus its body's bytes.
func TestHistory_AReopenThatDropsASweepCountsTheRetainedHooksAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		archive bool
	}{
		{"sweep on the loop", false},
		{"archive sweep", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{}
			o := dispatch.Options{Retention: time.Hour, SweepInterval: 5 * time.Millisecond, Now: clk.now}
			archiveDir := t.TempDir()
			if tc.archive {
				a, _ := fileArchive(t, archiveDir)
				o = archiveOptions(clk, a)
			}
			s := newScripted()
			// The sweep's removal batch is the next WAL write once armed: on
			// the loop, the sweep's first write; with an archive, the write
			// after the segment is in the archive (before it, the archive
			// pass syncs the WAL, invariant 3, which must succeed).
			var armed atomic.Bool
			e, faults := faultyEnv(t, s, o, func(e *env, faults *walWriteFaults) {
				if tc.archive {
					dispatch.SetAfterArchive(e.d, func() error {
						if armed.CompareAndSwap(true, false) {
							faults.on.Store(true)
						}
						return nil
					})
				}
			})
			st, q, d := e.st, e.q, e.d

			const body = "kept for an hour"
			e.submit(t, body, "")
			s.next(t)
			wantState(t, d, 1, "delivered")
			if g := d.Gauges(); g.HistoryHooks != 1 || g.HistoryBytes != int64(len(body)) {
				t.Fatalf("history gauges after the delivery = %d hooks, %d bytes; want 1, %d", g.HistoryHooks, g.HistoryBytes, len(body))
			}
			// The outcome is durable, as the next commit group's fsync makes it.
			if err := st.SyncWAL(); err != nil {
				t.Fatal(err)
			}
			if tc.archive {
				armed.Store(true)
			} else {
				faults.on.Store(true)
			}
			gen := st.Generation()
			clk.advance(61 * time.Minute)
			testutil.Eventually(t, 10*time.Second, "the sweep's removal applied", func() bool {
				n, _ := st.Count([]byte{store.PrefixHook})
				return n == 0
			})
			if err := st.SyncWAL(); err == nil || faults.failed.Load() == 0 {
				t.Fatalf("sync over the failing WAL write: %v (writes failed: %d), want an error", err, faults.failed.Load())
			}
			faults.on.Store(false)
			// The next commit fences; the reopen replays what the WAL kept:
			// the hook, its retained row.
			if !submitRefused(t, q) {
				t.FailNow()
			}
			testutil.Eventually(t, 10*time.Second, "the store reopened", func() bool {
				return st.Generation() != gen && st.Failed() == nil
			})
			// The next sweep removes the hook again.
			testutil.Eventually(t, 10*time.Second, "the hook swept again", func() bool {
				n, _ := st.Count([]byte{store.PrefixHook})
				m, _ := st.Count([]byte{store.PrefixRetained})
				return n == 0 && m == 0
			})
			defer func() {
				if t.Failed() {
					g := d.Gauges()
					t.Logf("history gauges = %d hooks, %d bytes; want 0, 0", g.HistoryHooks, g.HistoryBytes)
				}
			}()
			testutil.Eventually(t, 10*time.Second, "history gauges at zero after the second sweep", func() bool {
				g := d.Gauges()
				return g.HistoryHooks == 0 && g.HistoryBytes == 0
			})
			if tc.archive {
				if c := catalogue(t, archiveDir); len(c.Segments) != 1 || c.Segments[0].Count != 1 {
					t.Fatalf("catalogue = %+v, want the hook's one segment, written once", c.Segments)
				}
			}
		})
	}
}

// The rows an archive pass builds a segment from are synced before it is
// written (invariant 3), and a sync of another store generation does not
// make them so: a reopen between the pass's reads and its sync dropped the
// unsynced outcome that retained the hook, the sync of the reopened store
// succeeded, and the segment held a state the store no longer had. The hook
// was then delivered again, retained again and archived a second time
// under another key (found by a helper's review). The pass now gives up
// when the store's generation changed since it read.
func TestArchive_APassWhoseRowsAReopenDroppedWritesNoSegment(t *testing.T) {
	clk := &clock{}
	archiveDir := t.TempDir()
	a, _ := fileArchive(t, archiveDir)
	s := newScripted()
	block := make(chan struct{})
	s.block = block
	var once atomic.Bool
	e, faults := faultyEnv(t, s, archiveOptions(clk, a), func(e *env, faults *walWriteFaults) {
		st, q := e.st, e.q
		dispatch.SetBeforeArchiveSync(e.d, func() {
			if !once.CompareAndSwap(false, true) {
				return
			}
			// Another writer's fsync meets the outcome's failed write here,
			// and the queue's fence reopens the store, dropping the outcome.
			gen := st.Generation()
			if err := st.SyncWAL(); err == nil {
				t.Error("sync over the failing WAL write succeeded")
			}
			faults.on.Store(false)
			submitRefused(t, q)
			testutil.Eventually(t, 10*time.Second, "the store reopened", func() bool {
				return st.Generation() != gen && st.Failed() == nil
			})
		})
	})
	st, d := e.st, e.d

	res := e.submit(t, "archived once", "")
	testutil.Receive(t, s.entered, "the delivery never reached the sink")
	// The outcome's batch (the retained row) is the next WAL write: it
	// fails after Pebble reported it applied.
	faults.on.Store(true)
	s.unblock(block)
	if m := s.next(t); m.Seq != res.Seq {
		t.Fatalf("attempt for seq %d, want %d", m.Seq, res.Seq)
	}
	testutil.Eventually(t, 10*time.Second, "the outcome applied", func() bool {
		n, _ := st.Count([]byte{store.PrefixRetained})
		return n == 1
	})
	clk.advance(61 * time.Minute)
	// The pass reads the hook, the seam reopens the store; the hook is due
	// again and delivered again, retained again, and swept for good once
	// its retention passes again.
	if m := s.next(t); m.Seq != res.Seq {
		t.Fatalf("second attempt for seq %d, want %d", m.Seq, res.Seq)
	}
	if !once.Load() {
		t.Fatal("the hook was attempted again with no archive pass reaching its sync")
	}
	wantState(t, d, 1, "delivered")
	clk.advance(61 * time.Minute)
	testutil.Eventually(t, 10*time.Second, "the hook archived and removed", func() bool {
		n, _ := st.Count([]byte{store.PrefixHook})
		return n == 0
	})
	total := 0
	for _, sg := range catalogue(t, archiveDir).Segments {
		total += sg.Count
	}
	if total != 1 {
		t.Fatalf("the archive holds the hook %d times, want once", total)
	}
}

// faultyEnv is setupBefore over a store whose WAL writes fail while the
// returned injector is on, with a queue that reopens it 10 ms after a
// fence; before (if set) gets the env, its dispatcher not yet started.
func faultyEnv(t *testing.T, s sink.Sink, o dispatch.Options, before func(*env, *walWriteFaults)) (*env, *walWriteFaults) {
	t.Helper()
	faults := &walWriteFaults{}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), errorfs.Wrap(vfs.Default, faults))
	var dp atomic.Pointer[dispatch.Dispatcher]
	q := testutil.StartQueue(t, st, queue.Options{
		FenceRetry: 10 * time.Millisecond,
		OnDurable: func() {
			if d := dp.Load(); d != nil {
				d.Wake()
			}
		},
	})
	o.Targets = map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}
	o.Durable, o.OnReclaim, o.OnStoreFailure = q.Durable, q.Reclaimed, q.ReportStoreFailure
	o.Logger, o.Poll = testutil.Logger(t), 10*time.Millisecond
	o.Retry = dispatch.RetryPolicy{Base: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 5}
	d := dispatch.New(st, o)
	e := &env{st: st, q: q, d: d}
	if before != nil {
		before(e, faults)
	}
	dp.Store(d)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return e, faults
}
