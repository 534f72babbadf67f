package queue_test

// Ack rule 7: a record that brings its own id (a released quarantined
// hook, Record.ID) is committed once, and the pen row it is released from
// (Record.Held) leaves the store in the batch that writes its hook.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// released is a record released from a pen row written to st now.
func released(t *testing.T, st *store.Store, body string) *queue.Record {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	r := rec(body, "")
	r.ID = id
	ref := store.PenRef{ReceivedAtMs: r.ReceivedAt.UnixMilli(), ID: id}
	b := st.NewBatch()
	defer b.Close()
	if err := b.PutPen(ref, []byte("held "+body)); err != nil {
		t.Fatal(err)
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	r.Held = &store.PenRow{PenRef: ref, Value: []byte("held " + body)}
	return r
}

func held(t *testing.T, st *store.Store, r *queue.Record) bool {
	t.Helper()
	v, err := st.ReadPen(r.Held.PenRef)
	if err != nil {
		t.Fatal(err)
	}
	return v != nil
}

// hooksWithID counts the hook rows holding id.
func hooksWithID(t *testing.T, st *store.Store, id [16]byte) int {
	t.Helper()
	n := 0
	if err := st.ScanHooksFrom(1, func(_ uint64, v []byte) bool {
		if env, err := store.DecodeEnvelope(v); err == nil && env.ID == id {
			n++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestQueue_RecordWithItsOwnID(t *testing.T) {
	t.Run("the pen row leaves with the commit; the id again is a duplicate", func(t *testing.T) {
		_, st, _, q := gatedQueue(t, queue.Options{})
		r := released(t, st, "one")
		first, err := q.Submit(context.Background(), r)
		if err != nil || first.Duplicate || first.ID != r.ID {
			t.Fatalf("first = %+v %v, want a new hook under the record's id", first, err)
		}
		if held(t, st, r) {
			t.Fatal("the pen row outlived the commit of its hook")
		}
		again, err := q.Submit(context.Background(), r)
		if err != nil || !again.Duplicate || again.Seq != first.Seq {
			t.Fatalf("the id again = %+v %v, want a duplicate of seq %d", again, err, first.Seq)
		}
		if n := hooksWithID(t, st, r.ID); n != 1 {
			t.Fatalf("%d hooks hold the id, want 1", n)
		}
	})

	t.Run("two in one group are one hook", func(t *testing.T) {
		gate, st, sig, q := gatedQueue(t, queue.Options{})
		r := released(t, st, "twice") // its synced write before the gate holds
		gate.Hold()
		first := submitAsync(q, rec("first", ""))
		sig.wait(t)
		release := gate.Held(t)
		// Queued while the fsync is held: applied as one group when it
		// returns (S1).
		a, b := submitAsync(q, r), submitAsync(q, r)
		testutil.Eventually(t, 10*time.Second, "both queued", func() bool { return q.Stats().Queued == 3 })
		gate.Open()
		close(release)
		if n := sig.wait(t); n != 1 {
			t.Fatalf("the group wrote %d hooks, want 1", n)
		}
		sa, sb, sf := answer(t, a), answer(t, b), answer(t, first)
		if sf.err != nil || sa.err != nil || sb.err != nil || sa.res.Seq != sb.res.Seq || sa.res.Duplicate == sb.res.Duplicate {
			t.Fatalf("answers %+v and %+v, want one hook and its duplicate", sa, sb)
		}
		if n := hooksWithID(t, st, r.ID); n != 1 || held(t, st, r) {
			t.Fatalf("%d hooks hold the id, pen row held %v; want 1, false", n, held(t, st, r))
		}
	})

	t.Run("an undone group puts the pen row back", func(t *testing.T) {
		gate, st, _, q := gatedQueue(t, queue.Options{})
		r := released(t, st, "undone")
		gate.FailNext(1)
		if _, err := q.Submit(context.Background(), r); !errors.Is(err, queue.ErrStoreUnavailable) {
			t.Fatalf("first attempt: %v, want store_unavailable", err)
		}
		waitFences(t, q, 1)
		if !held(t, st, r) || hooksWithID(t, st, r.ID) != 0 {
			t.Fatal("after the fence: want the pen row back and no hook")
		}
		if s, err := q.Submit(context.Background(), r); err != nil || s.Duplicate {
			t.Fatalf("retry = %+v %v, want a new hook", s, err)
		}
		if held(t, st, r) || hooksWithID(t, st, r.ID) != 1 {
			t.Fatal("after the retry: want no pen row and one hook")
		}
	})
}

// Under dual, a record whose local fsync failed after the log confirmed is
// carried: a retry of its id is refused until the reconciler completed it
// (never a second hook under one id, at any age), and complete-local
// deletes its pen row with its hook's rows.
func TestDual_RecordWithItsOwnIDIsRefusedWhileCarried(t *testing.T) {
	clock := newRCClock()
	e, _ := newRCDual(t, queue.Options{Now: clock.now}, manual)
	r := released(t, e.st, "carried")
	e.gate.FailNext(1)
	first := answer(t, submitAsync(e.q, r))
	if id, ok := queue.Carried(first.err); !ok || id != r.ID || !errors.Is(first.err, queue.ErrStoreUnavailable) {
		t.Fatalf("first attempt: %v, want a carried store_unavailable", first.err)
	}
	waitFences(t, e.q, 1)
	if !held(t, e.st, r) || hooksWithID(t, e.st, r.ID) != 0 {
		t.Fatal("after the fence: want the pen row back and no hook")
	}
	for _, age := range []time.Duration{0, time.Hour} { // past reconcile_deadline_ms too
		clock.advance(age)
		if s := answer(t, submitAsync(e.q, r)); !errors.Is(s.err, queue.ErrIntakePending) {
			t.Fatalf("retry %s later: %+v %v, want intake_pending", age, s.res, s.err)
		}
	}
	e.q.Reconcile(context.Background())
	e.pendingEmpty(t)
	if held(t, e.st, r) || hooksWithID(t, e.st, r.ID) != 1 {
		t.Fatal("after complete-local: want no pen row and one hook")
	}
	after := answer(t, submitAsync(e.q, r))
	if after.err != nil || !after.res.Duplicate || after.res.ID != r.ID {
		t.Fatalf("retry after the reconciler: %+v %v, want a duplicate", after.res, after.err)
	}
	if n := e.inLog(r.ID); n != 1 {
		t.Fatalf("%d records of the id in the log, want 1", n)
	}
}

// Boot recovery writes a released hook from its log record, which names no
// pen row; the hook's envelope does (store.HeldRef), and the replay takes
// the row in the chunk that writes the hook, re-sequenced or not. The
// store here is a replacement restored from a backup taken before the
// release: the row is held, the log holds the released record and a plain
// hook.
func TestRecovery_ReplayTakesThePenRowOfAReleasedHook(t *testing.T) {
	for _, collide := range []bool{false, true} {
		name := "at its seq"
		if collide {
			name = "re-sequenced after a collision"
		}
		t.Run(name, func(t *testing.T) {
			lg := openLog(t, t.TempDir())
			lost := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			lq := testutil.StartQueue(t, lost, queue.Options{Dual: &queue.DualOptions{Intake: lg, Node: "node-a"}})
			r := released(t, lost, "held")
			first, err := lq.Submit(context.Background(), r)
			if err != nil || first.Seq != 1 {
				t.Fatalf("release = %+v %v, want seq 1", first, err)
			}
			if _, err := lq.Submit(context.Background(), rec("plain", "")); err != nil {
				t.Fatal(err)
			}
			lq.Close()

			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			if collide { // another hook at seq 1
				q := testutil.StartQueue(t, st, queue.Options{})
				if s, err := q.Submit(context.Background(), rec("local", "")); err != nil || s.Seq != 1 {
					t.Fatalf("local hook: %+v %v", s, err)
				}
				q.Close()
			}
			b := st.NewBatch()
			defer b.Close()
			if err := b.PutPen(r.Held.PenRef, r.Held.Value); err != nil {
				t.Fatal(err)
			}
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}

			dry, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.DryRun = true })
			if err != nil || dry.Unheld != 1 || !held(t, st, r) {
				t.Fatalf("dry run: %s %v, pen row held %v; want unheld=1 and the row left", dry, err, held(t, st, r))
			}
			sum, err := recoverInto(t, st, lg, nil)
			if err != nil || sum.Applied != 2 || sum.Unheld != 1 || (sum.Collided == 1) != collide {
				t.Fatalf("recovery: %s %v, want applied=2 unheld=1 (collided=1: %v)", sum, err, collide)
			}
			if held(t, st, r) || hooksWithID(t, st, r.ID) != 1 {
				t.Fatalf("after recovery: pen row held %v, %d hooks hold the id; want no row and one hook",
					held(t, st, r), hooksWithID(t, st, r.ID))
			}
			if !strings.Contains(sum.String(), "unheld=1") {
				t.Fatalf("summary %q does not say unheld=1", sum)
			}
			again, err := recoverInto(t, st, lg, func(o *queue.RecoverOptions) { o.Origin = queue.OriginExisting })
			if err != nil || again.Applied != 0 || again.Unheld != 0 {
				t.Fatalf("a further run: %s %v, want nothing applied or unheld", again, err)
			}
		})
	}
}
