package queue_test

// Boot recovery (ADR section 8), named after the ADR's recovery_test.exs
// cases. A "host loss" is a new, empty store opened against the same
// file-backed intake log.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

func route(source string) (queue.Route, bool) {
	if source != "demo" {
		return queue.Route{}, false
	}
	return queue.Route{Sinks: []queue.SinkRef{{Num: 0, ID: "log"}}, DedupeTTL: time.Hour}, true
}

func openLog(t *testing.T, dir string) *memory.Log {
	t.Helper()
	lg, err := memory.Open(memory.Options{Dir: dir, Node: "node-a", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	return lg
}

// ackIntoLog runs a dual queue on its own store and acks n hooks (some with
// dedupe keys); it returns the acked results.
func ackIntoLog(t *testing.T, lg *memory.Log, n int) []queue.Result {
	t.Helper()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q, err := queue.New(st, queue.Options{Logger: testutil.Logger(t), Dual: &queue.DualOptions{Intake: lg, Node: "node-a"}})
	if err != nil {
		t.Fatal(err)
	}
	q.Start()
	defer q.Close()
	var out []queue.Result
	for i := range n {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("evt_%d", i)
		}
		r, err := q.Submit(context.Background(), rec(fmt.Sprintf("body-%d", i), key))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func recoverInto(t *testing.T, st *store.Store, lg *memory.Log, mod func(*queue.RecoverOptions)) (queue.Summary, error) {
	t.Helper()
	o := queue.RecoverOptions{Intake: lg, Node: "node-a", Origin: queue.OriginRestored, Resolve: route, Logger: testutil.Logger(t)}
	if mod != nil {
		mod(&o)
	}
	return queue.Recover(context.Background(), st, o)
}

func assertHooks(t *testing.T, st *store.Store, acked []queue.Result) {
	t.Helper()
	for _, r := range acked {
		v, err := st.Get(store.HookKey(r.Seq))
		if err != nil || v == nil {
			t.Fatalf("acked hook seq %d missing after recovery (%v)", r.Seq, err)
		}
		env, err := store.DecodeEnvelope(v)
		if err != nil || env.ID != r.ID {
			t.Fatalf("seq %d holds %x, want %x (%v)", r.Seq, env.ID, r.ID, err)
		}
		if d, _ := st.Get(store.DeliveryKey(r.Seq, 0)); d == nil {
			t.Fatalf("seq %d has no delivery row after recovery", r.Seq)
		}
		// The listing indexes come back with the hook (GET /v1/hooks?source=).
		for _, k := range store.HookIndexKeys(env.Tenant, env.Source, r.Seq) {
			if v, _ := st.Get(k); v == nil {
				t.Fatalf("seq %d has no index row %q after recovery", r.Seq, k)
			}
		}
	}
}

func TestRecovery_HostLossReplaysEveryAckedHookWithItsSeq(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	acked := ackIntoLog(t, lg, 20)

	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil) // the replacement's empty disk
	sum, err := recoverInto(t, st, lg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Applied != 20 || sum.Present != 0 || sum.Collided != 0 {
		t.Fatalf("summary %s, want applied=20", sum)
	}
	assertHooks(t, st, acked)
	// next_seq is raised past every replayed seq: no seq is reused.
	q := testutil.StartQueue(t, st, queue.Options{})
	r, err := q.Submit(context.Background(), rec("after", ""))
	if err != nil || r.Seq != 21 {
		t.Fatalf("first hook after recovery: %+v %v, want seq 21", r, err)
	}
	// Dedupe keys come back too: a provider retry is a duplicate.
	d, err := q.Submit(context.Background(), rec("body-0", "evt_0"))
	if err != nil || !d.Duplicate || d.ID != acked[0].ID {
		t.Fatalf("retry after recovery: %+v %v, want duplicate of %x", d, err, acked[0].ID)
	}
}

func TestRecovery_IdempotentAndSecondRunChangesNothing(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	acked := ackIntoLog(t, lg, 10)
	// Duplicate and reordered records: publish the log's records again, reversed.
	recs := lg.Records()
	for i, j := 0, len(recs)-1; i < j; i, j = i+1, j-1 {
		recs[i], recs[j] = recs[j], recs[i]
	}
	if _, err := lg.PublishBatch(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	sum, err := recoverInto(t, st, lg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Applied != 10 || sum.Present != 10 {
		t.Fatalf("summary %s, want applied=10 present=10", sum)
	}
	assertHooks(t, st, acked)
	again, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting })
	if err != nil {
		t.Fatal(err)
	}
	if again.Applied != 0 {
		t.Fatalf("second run applied %d, want 0 (%s)", again.Applied, again)
	}
	if n, _ := st.Count([]byte{store.PrefixHook}); n != 10 {
		t.Fatalf("hooks = %d after two runs, want 10", n)
	}
}

func TestRecovery_SeqCollisionIsResequencedNeverOverwritten(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	ackIntoLog(t, lg, 3)
	// The replacement already holds a different hook at seq 1.
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	mine, err := q.Submit(context.Background(), rec("local", ""))
	if err != nil || mine.Seq != 1 {
		t.Fatal(err)
	}
	q.Close()
	sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting })
	if err != nil {
		t.Fatal(err)
	}
	if sum.Collided != 1 {
		t.Fatalf("summary %s, want collided=1", sum)
	}
	v, _ := st.Get(store.HookKey(1))
	if env, _ := store.DecodeEnvelope(v); env.ID != mine.ID {
		t.Fatal("a collision overwrote the local hook")
	}
	if n, _ := st.Count([]byte{store.PrefixHook}); n != 4 {
		t.Fatalf("hooks = %d, want 4 (the local one and three replayed)", n)
	}
}

// TestRecovery_SeqCollisionWritesEachIDOnce: a record whose seq collides
// with another stored hook is re-sequenced once per hook id (I3, replay.go),
// however often the log holds it and whatever earlier run put its id in
// the store, and a run that fails before writing it leaves the offset below
// it (I4): one hook row for the id, the id index pointing at it, one
// delivery row per sink, the local hook at the seq untouched, the offset at
// the last record, and a further run changing nothing.
func TestRecovery_SeqCollisionWritesEachIDOnce(t *testing.T) {
	tests := []struct {
		name string
		// log adds to the log of the three acked hooks (seqs 1..3, the first
		// colliding with the store's local hook at seq 1); earlier is a copy
		// of the store as it was before this recovery.
		log   func(t *testing.T, lg *memory.Log, earlier func() *store.Store)
		chunk int
		cut   int // records the first run's Replay passes before an outage; <0 none
		// the Summary counts, added over the runs
		applied, present, collided int
	}{
		{name: "the log holds the colliding record twice, in one chunk", cut: -1,
			log: republishFirst, applied: 3, present: 1, collided: 1},
		{name: "the log holds the colliding record twice, in two chunks", chunk: 2, cut: -1,
			log: republishFirst, applied: 3, present: 1, collided: 1},
		{name: "the log holds the colliding record also under the fresh seq an earlier recovery gave it", cut: -1,
			// That recovery's republish failed (a log outage), so the next
			// boot, remembering nothing of what it replayed, republished
			// every hook above the watermark, the re-sequenced one too
			// (seq 4); then the host was lost and this store restored.
			log: func(t *testing.T, lg *memory.Log, earlier func() *store.Store) {
				st := earlier()
				lg.FailNext(1, intake.Unavailable)
				if _, err := recoverInto(t, st, lg, nil); !errors.Is(err, memory.ErrInjected) {
					t.Fatalf("earlier recovery = %v, want its republish failed", err)
				}
				if sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting }); err != nil || sum.Republished != 4 {
					t.Fatalf("the next boot: %s %v, want 4 republished", sum, err)
				}
			},
			applied: 3, present: 4, collided: 1},
		{name: "an outage after the colliding record's chunk, and the run again", chunk: 1, cut: 2,
			log: func(*testing.T, *memory.Log, func() *store.Store) {}, applied: 3, present: 1, collided: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
			x := ackIntoLog(t, lg, 3)[0]
			// This store already holds a different hook at seq 1.
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			q := testutil.StartQueue(t, st, queue.Options{})
			mine, err := q.Submit(context.Background(), rec("local", ""))
			if err != nil || mine.Seq != 1 {
				t.Fatalf("local hook: %+v %v", mine, err)
			}
			q.Close()
			tc.log(t, lg, func() *store.Store {
				dir := filepath.Join(t.TempDir(), "earlier")
				if err := st.Checkpoint(dir); err != nil {
					t.Fatal(err)
				}
				return testutil.OpenStore(t, dir, nil)
			})

			head := lg.Last() // the republish appends past it
			in := &cutReplay{Log: lg, after: tc.cut}
			replayed := map[uint64]bool{} // shared by the runs, as RecoverNode's attempts share it
			run := func() (queue.Summary, error) {
				return queue.Recover(t.Context(), st, queue.RecoverOptions{Intake: in, Node: "node-a", Origin: queue.OriginRestored,
					Resolve: route, Logger: testutil.Logger(t), Chunk: tc.chunk, Replayed: replayed})
			}
			sum, err := run()
			if tc.cut >= 0 {
				if !errors.Is(err, errCut) {
					t.Fatalf("first run = %v (%s), want the outage", err, sum)
				}
				var again queue.Summary
				again, err = run()
				sum = queue.AddSummary(sum, again)
			}
			if err != nil {
				t.Fatalf("recover: %v (%s)", err, sum)
			}

			seqs := testutil.HookSeqsOf(t, st, x.ID)
			if len(seqs) != 1 || seqs[0] == 1 {
				t.Fatalf("hook %x is stored at seqs %v, want once, under a fresh seq (summary %s)", x.ID, seqs, sum)
			}
			if at, ok, err := st.LookupHookID(x.ID); err != nil || !ok || at != seqs[0] {
				t.Fatalf("the id index names seq %d (%v, %v), want %d", at, ok, err, seqs[0])
			}
			sinks := 0
			if err := st.ScanDeliveries(seqs[0], func(uint16, []byte) bool { sinks++; return true }); err != nil || sinks != 1 {
				t.Fatalf("seq %d has %d delivery rows (%v), want 1 (one sink)", seqs[0], sinks, err)
			}
			if got := testutil.HookSeqsOf(t, st, mine.ID); len(got) != 1 || got[0] != 1 {
				t.Fatalf("the local hook is at seqs %v, want [1]", got)
			}
			if n, _ := st.CountHooks(); n != 4 {
				t.Fatalf("hooks = %d, want 4 (the local one and three replayed)", n)
			}
			if off, ok, err := st.IntakeOffset(); err != nil || !ok || off != int64(head) {
				t.Fatalf("m:intake_offset = %d (%v, %v), want the last record replayed, %d", off, ok, err, head)
			}
			if sum.Applied != tc.applied || sum.Present != tc.present || sum.Collided != tc.collided {
				t.Fatalf("summary %s, want applied=%d present=%d collided=%d", sum, tc.applied, tc.present, tc.collided)
			}

			again, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting })
			if err != nil || again.Applied != 0 {
				t.Fatalf("a further run: %s %v, want nothing applied", again, err)
			}
			if n, _ := st.CountHooks(); n != 4 {
				t.Fatalf("hooks = %d after a further run, want 4", n)
			}
		})
	}
}

// republishFirst publishes the log's first record again: a retried publish
// or a republish, the log then holding it twice.
func republishFirst(t *testing.T, lg *memory.Log, _ func() *store.Store) {
	if _, err := lg.PublishBatch(context.Background(), lg.Records()[:1]); err != nil {
		t.Fatal(err)
	}
}

func TestRecovery_RepublishesLocalHooksAboveTheWatermark(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	// Hooks acked under disk mode: in the store, never in the log.
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	for i := range 5 {
		if _, err := q.Submit(context.Background(), rec(fmt.Sprint(i), "")); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting })
	if err != nil {
		t.Fatal(err)
	}
	if sum.Republished != 5 || lg.Published() != 5 {
		t.Fatalf("summary %s, log records %d; want 5 republished", sum, lg.Published())
	}
	wm, _ := st.Get(store.KeyIntakeSeq)
	if n, _ := store.ParseU64(wm); n != 5 {
		t.Fatalf("watermark = %d, want 5", n)
	}
}

func TestRecovery_UnknownSourceIsUnroutable(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	ackIntoLog(t, lg, 2)
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) {
		o.Resolve = func(string) (queue.Route, bool) { return queue.Route{}, false }
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Unroutable != 2 || sum.Applied != 2 {
		t.Fatalf("summary %s, want unroutable=2 applied=2", sum)
	}
}

func TestRecovery_TruncatedLog(t *testing.T) {
	for _, tc := range []struct {
		name     string
		origin   queue.Origin
		allowGap bool
		wantErr  bool
	}{
		{"refuses a restored store", queue.OriginRestored, false, true},
		{"allow-gap recovers a restored store", queue.OriginRestored, true, false},
		{"warns on an existing store", queue.OriginExisting, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
			ackIntoLog(t, lg, 6)
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			// The store's offset says it holds everything up to position 1;
			// retention has since dropped positions 0..3.
			b := st.NewBatch()
			_ = b.Set(store.KeyIntakeOffset, store.U64(1), nil)
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			if err := lg.Truncate(3); err != nil {
				t.Fatal(err)
			}
			sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin, o.AllowGap = tc.origin, tc.allowGap })
			if tc.wantErr {
				if !errors.Is(err, queue.ErrIntakeTruncated) {
					t.Fatalf("err = %v, want intake_truncated", err)
				}
				return
			}
			if err != nil || !sum.Gap {
				t.Fatalf("summary %s, err %v; want a recorded gap and no error", sum, err)
			}
		})
	}
}

// TestRecovery_TruncatedLogRefusesAFreshStore: ADR section 8 step 4, the
// case of a replacement with no usable backup. A fresh store needs this
// node's whole log; when retention has dropped its first records the store
// is refused with intake_truncated (it would silently lack them), and
// --allow-gap accepts the loss. A log that still holds the node's first
// record (seq 1), or holds nothing of this node, is no gap.
func TestRecovery_TruncatedLogRefusesAFreshStore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		origin   queue.Origin
		truncate intake.Position // -1: none
		allowGap bool
		wantErr  bool
		wantGap  bool
	}{
		{"refuses a fresh store over a truncated log", queue.OriginFresh, 3, false, true, false},
		{"refuses an empty store with no offset, as at the boot after a refusal", queue.OriginExisting, 3, false, true, false},
		{"allow-gap recovers a fresh store", queue.OriginFresh, 3, true, false, true},
		{"a fresh store over an untruncated log is no gap", queue.OriginFresh, -1, false, false, false},
		// The memory log is this node's alone, so every position gone held
		// one of its records: all six aged out is a truncation. (On a shared
		// log a node may own none of the records: internal/intake/jetstream
		// shared_test.go.)
		{"refuses a fresh store over a log whose every record aged out", queue.OriginFresh, 5, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
			acked := ackIntoLog(t, lg, 6) // positions 0..5, seqs 1..6
			if tc.truncate >= 0 {
				if err := lg.Truncate(tc.truncate); err != nil {
					t.Fatal(err)
				}
			}
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin, o.AllowGap = tc.origin, tc.allowGap })
			if tc.wantErr {
				if !errors.Is(err, queue.ErrIntakeTruncated) {
					t.Fatalf("err = %v (summary %s), want intake_truncated", err, sum)
				}
				if n, _ := st.Count([]byte{store.PrefixHook}); n != 0 {
					t.Fatalf("a refused recovery wrote %d hooks", n)
				}
				return
			}
			if err != nil || sum.Gap != tc.wantGap {
				t.Fatalf("summary %s gap=%v, err %v; want gap=%v and no error", sum, sum.Gap, err, tc.wantGap)
			}
			if tc.truncate < 0 {
				assertHooks(t, st, acked)
			}
		})
	}
}

func TestRecovery_DryRunWritesNothing(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	ackIntoLog(t, lg, 4)
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.DryRun = true })
	if err != nil || sum.Applied != 4 {
		t.Fatalf("dry run: %s %v, want applied=4 counted", sum, err)
	}
	if n, _ := st.Count([]byte{store.PrefixHook}); n != 0 {
		t.Fatalf("dry run wrote %d hooks", n)
	}
	if v, _ := st.Get(store.KeyIntakeOffset); v != nil {
		t.Fatal("dry run wrote the offset")
	}
	_ = intake.Position(0)
}

func TestRecovery_AllowGapWritesAnAuditRow(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	ackIntoLog(t, lg, 6)
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	b := st.NewBatch()
	_ = b.Set(store.KeyIntakeOffset, store.U64(1), nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	if err := lg.Truncate(3); err != nil {
		t.Fatal(err)
	}
	if _, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.AllowGap = true }); err != nil {
		t.Fatal(err)
	}
	page, err := st.Audit("", time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	rows := page.Entries
	if len(rows) != 1 || rows[0].Action != "intake.recover.allow_gap" || rows[0].Actor != "ankusa recover" ||
		fmt.Sprint(rows[0].Detail["lost_positions"]) != "2" {
		t.Fatalf("audit rows = %+v, want one allow_gap row by ankusa recover naming 2 lost positions", rows)
	}
}

// TestRecovery_RepublishCarriesTheStoresIncarnation: records republished at
// boot carry the store's incarnation (docs/storage.md), like the commit
// path's, not a placeholder.
func TestRecovery_RepublishCarriesTheStoresIncarnation(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	b := st.NewBatch()
	_ = b.Set(store.KeyIncarnation, []byte("5f0c-restored"), nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	q := testutil.StartQueue(t, st, queue.Options{}) // hooks acked under disk: above the watermark
	for i := range 3 {
		if _, err := q.Submit(context.Background(), rec(fmt.Sprint(i), "")); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	if _, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting }); err != nil {
		t.Fatal(err)
	}
	recs := lg.Records()
	if len(recs) != 3 {
		t.Fatalf("log holds %d records, want the 3 republished", len(recs))
	}
	for _, r := range recs {
		if r.Incarnation != "5f0c-restored" {
			t.Fatalf("republished seq %d carries incarnation %q, want the store's %q", r.Seq, r.Incarnation, "5f0c-restored")
		}
	}
}

// TestDual_OffsetIsSeededFromTheStoredRow: after a restart (or a boot
// replay) the offset the node reports is the stored m:intake_offset, not
// -1 until the next publish.
func TestDual_OffsetIsSeededFromTheStoredRow(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	ackIntoLog(t, lg, 4)
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	b := st.NewBatch()
	_ = b.Set(store.KeyIntakeOffset, store.U64(3), nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	q := testutil.StartQueue(t, st, queue.Options{Dual: &queue.DualOptions{Intake: lg, Node: "node-a", ReconcileEvery: -1}})
	if s, _ := q.Dual(); s.Offset != 3 {
		t.Fatalf("offset after open = %d, want the stored 3", s.Offset)
	}
}

// TestRecovery_RepublishAboveTheWatermarkLeavesHooksAtOrBelowItAlone is the
// ADR's case: boot republishes exactly the local hooks with seq > the
// watermark; those at or below it are in the log already and are not
// published again.
func TestRecovery_RepublishAboveTheWatermarkLeavesHooksAtOrBelowItAlone(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	for i := range 6 {
		if _, err := q.Submit(context.Background(), rec(fmt.Sprint(i), "")); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	b := st.NewBatch()
	_ = b.Set(store.KeyIntakeSeq, store.U64(4), nil) // seqs 1..4 confirmed in the log
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	sum, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting })
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, r := range lg.Records() {
		seqs = append(seqs, r.Seq)
	}
	if sum.Republished != 2 || len(seqs) != 2 || seqs[0] != 5 || seqs[1] != 6 {
		t.Fatalf("republished %d, log holds seqs %v; want exactly 5 and 6", sum.Republished, seqs)
	}
	if v, _ := st.Get(store.KeyIntakeSeq); string(v) != string(store.U64(6)) {
		t.Fatalf("watermark after the republish = %x, want 6", v)
	}
}
