package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
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
