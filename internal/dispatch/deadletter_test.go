package dispatch_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// A source delete's dead-lettering (DeadLetterDue) leaves the rows of
// hooks above the durable mark alone: their group may yet be refused, and
// the fence's cleanup would then delete the group's rows but not a dead
// row written for one of them, a dead letter of no hook that
// ankusa_queue_dead counts and the DLQ listing hides (found by a helper's
// review). The mark is held below the hook here, as an fsync in flight or
// a fence between its reopen and its cleanup holds it; the hook is
// committed, so once the mark passes it the row is delivered as any.
func TestDeadLetterDue_LeavesRowsAboveTheDurableMark(t *testing.T) {
	s := newScripted()
	var held atomic.Bool
	held.Store(true)
	var qp atomic.Pointer[queue.Queue]
	durable := func() uint64 {
		q := qp.Load()
		if q == nil || held.Load() {
			return 0
		}
		return q.Durable()
	}
	e := setupQueue(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, dispatch.Options{Durable: durable},
		queue.Options{}, false)
	qp.Store(e.q)
	res := e.submit(t, "above the mark", "")
	if e.q.Durable() < res.Seq {
		t.Fatalf("the queue's durable mark %d is below the acked seq %d", e.q.Durable(), res.Seq)
	}
	n, err := e.d.DeadLetterDue(t.Context(), map[uint16]bool{0: true}, "source deleted")
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 || count(t, e.st, store.PrefixDead) != 0 {
		t.Fatalf("dead-lettered %d (dead rows %d), want none: the hook is above the mark the dispatcher was given",
			n, count(t, e.st, store.PrefixDead))
	}
	if dl := e.delivery(t, res.Seq); dl.State != store.StateDue {
		t.Fatalf("delivery = %+v, want still due", dl)
	}
	held.Store(false)
	e.d.Wake()
	if m := s.next(t); m.Seq != res.Seq {
		t.Fatalf("delivered seq %d, want %d", m.Seq, res.Seq)
	}
	testutil.Eventually(t, 10*time.Second, "reclaimed", func() bool { return count(t, e.st, store.PrefixHook) == 0 })
}
