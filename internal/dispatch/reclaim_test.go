package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// A fully delivered hook leaves no row behind but its dedupe rows, however
// it got there: the outcome batch deletes the rows it knows from the
// result (the hook, its id and listing indexes, its delivery rows and the
// attempt rows 1..Attempts), and a delivery whose attempt count was reset
// by a DLQ replay — its older attempt rows lie above the count — makes the
// reclaim read the hook's rows instead.
func TestDispatch_ReclaimLeavesNoRowOfTheHook(t *testing.T) {
	boom := errors.New("connection refused")
	tests := []struct {
		name   string
		script []error
		replay bool // dead-letter first, then replay from the DLQ
	}{
		{"delivered at once", nil, false},
		{"delivered at the third attempt", []error{boom, boom}, false},
		{"dead after three attempts, replayed, delivered", []error{boom, boom, sink.Permanent(boom)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newScripted(tc.script...)
			e := setup(t, s, dispatch.Options{BreakerFailures: 100})
			e.submit(t, "x", "evt")
			if tc.replay {
				testutil.Eventually(t, 10*time.Second, "dead row", func() bool { return count(t, e.st, store.PrefixDead) == 1 })
				if _, err := e.d.CreateJob(context.Background(), dispatch.JobSpec{Kind: "dlq", Rate: 100}); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Eventually(t, 10*time.Second, "hook reclaimed", func() bool {
				return count(t, e.st, store.PrefixHook) == 0 && e.q.Stats().Hooks == 0
			})
			for _, p := range []byte{store.PrefixHook, store.PrefixHookID, store.PrefixSourceIdx, store.PrefixTenantIdx,
				store.PrefixDelivery, store.PrefixDue, store.PrefixInflight, store.PrefixDead, store.PrefixAttempt, store.PrefixRetained} {
				if n := count(t, e.st, p); n != 0 {
					t.Errorf("%d rows of family %q left after the reclaim", n, p)
				}
			}
			if n := count(t, e.st, store.PrefixDedupe); n != 1 {
				t.Errorf("%d dedupe rows, want 1 (it outlives the hook)", n)
			}
		})
	}
}

// A sink's backlog parked while its breaker is open (the scan's cursor
// passes those rows, D2) is delivered in full once the sink is back: the
// half-open probe is found below the cursor, and its success hands every
// parked row back to the scan. Without the hand-back only the probe would
// be delivered and the rest would wait for a restart.
func TestDispatch_ParkedBacklogIsDeliveredWhenTheSinkComesBack(t *testing.T) {
	s := newScripted()
	s.fallback = errors.New("down")
	e := setup(t, s, dispatch.Options{BreakerFailures: 3, BreakerCooldown: 200 * time.Millisecond,
		Retry: dispatch.RetryPolicy{Base: time.Millisecond, Max: time.Millisecond, MaxAttempts: 1000}})
	e.submit(t, "first", "")
	for range 3 {
		s.next(t)
	}
	for i := range 20 {
		e.submit(t, fmt.Sprint(i), "")
	}
	e.d.Wake() // a scan steps over the 20 while the breaker is open
	s.mu.Lock()
	s.fallback = nil
	s.mu.Unlock()
	testutil.Eventually(t, 10*time.Second, "the parked backlog delivered and reclaimed", func() bool {
		return count(t, e.st, store.PrefixHook) == 0 && count(t, e.st, store.PrefixDue) == 0
	})
}

// W1 (store/delivery.go): a delivered hook's rows are single-deleted only
// when every one of them was written once, by this process's commit path.
// A row written twice (a retry's rewrite, a delivery recorded for one sink
// before the other's) that was single-deleted would come back when a
// compaction meets it: so after every hook below is removed, a full
// compaction must leave no row at all, and Pebble must report no misuse.
// Only hooks delivered at their first attempt are single-deleted, all six
// rows of each; a released hook keeps an id another hook may hold, so it is
// deleted too. (A hook the scan claims from the store before its hand-over
// reaches the hot cache, H2, is deleted as well: so the first case posts
// twenty, and needs some, not all, single-deleted.)
func TestReclaim_RemovedHooksStayRemovedAfterACompaction(t *testing.T) {
	boom := errors.New("connection refused")
	tests := []struct {
		name string
		// sinks are the targets' scripts (one sink each); held holds the
		// second sink's attempt until the first sink's outcome is recorded.
		sinks    [][]error
		held     bool
		released bool // the record carries its own id (a quarantine release)
		singles  bool // some hooks are single-deleted (six rows each), or none
	}{
		{"delivered at its first attempt", [][]error{nil}, false, false, true},
		{"retried, then delivered", [][]error{{boom, sink.Retry(boom, 0), nil}}, false, false, false},
		{"two sinks, delivered in two batches", [][]error{nil, nil}, true, false, false},
		{"two sinks, one retried", [][]error{{boom, nil}, nil}, false, false, false},
		{"a released hook, delivered at its first attempt", [][]error{nil}, false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			targets := map[uint16]dispatch.Target{}
			var ss []*scriptedSink
			var refs []queue.SinkRef
			for i, script := range tc.sinks {
				s := newScripted(script...)
				ss = append(ss, s)
				id := fmt.Sprintf("s%d", i)
				targets[uint16(i)] = dispatch.Target{ID: id, Sink: s}
				refs = append(refs, queue.SinkRef{Num: uint16(i), ID: id})
			}
			if tc.held {
				ss[1].block = make(chan struct{})
			}
			e := setupWith(t, targets, dispatch.Options{BreakerFailures: 100}, true)
			hooks := 1
			if tc.singles {
				hooks = 20
			}
			var res queue.Result
			for i := range hooks {
				r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", ContentType: "text/plain",
					Body: []byte("w1"), Sinks: refs}
				if tc.released {
					r.ID = [16]byte{0x01, 0x93, 0x7a, 0x10, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x42}
				}
				var err error
				if res, err = e.q.Submit(context.Background(), r); err != nil {
					t.Fatalf("hook %d: %v", i, err)
				}
			}
			if tc.held {
				<-ss[1].entered
				testutil.Eventually(t, 10*time.Second, "the first sink's delivery recorded", func() bool {
					dl := e.delivery(t, res.Seq)
					return dl != nil && dl.State == store.StateDelivered
				})
				close(ss[1].block)
			}
			testutil.Eventually(t, 10*time.Second, "reclaimed", func() bool { return count(t, e.st, store.PrefixHook) == 0 })
			if got := e.st.SingleDeletes(); got%6 != 0 || (got > 0) != tc.singles {
				t.Errorf("%d single deletes of %d hooks, want some: %v (six per hook)", got, hooks, tc.singles)
			}
			if err := e.st.Compact(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, p := range []byte{store.PrefixHook, store.PrefixHookID, store.PrefixSourceIdx, store.PrefixTenantIdx,
				store.PrefixDelivery, store.PrefixDue, store.PrefixAttempt} {
				if n := count(t, e.st, p); n != 0 {
					t.Errorf("%q: %d rows back after the compaction", p, n)
				}
			}
			if m := e.st.SingleDeleteMisuses(); m != 0 {
				t.Errorf("Pebble reported %d single delete misuses", m)
			}
		})
	}
}
