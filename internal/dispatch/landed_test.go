package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// removeHook deletes every row of hook seq, its due rows included, as a
// delivered outcome's batch that removed the hook does.
func removeHook(t *testing.T, st *store.Store, seq uint64) {
	t.Helper()
	v, err := st.ReadHook(seq)
	if err != nil || v == nil {
		t.Fatalf("read hook %d: %v (found: %v)", seq, err, v != nil)
	}
	env, err := store.DecodeEnvelope(v)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.StoredRows(env)
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	defer b.Close()
	b.DeleteHook(rows)
	if err := st.ScanDue(0, func(at int64, s uint64, num uint16) bool {
		if s == seq {
			b.DropDue(at, s, num)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
}

// recordedRetry records the attempt in flight on hook seq's one delivery
// as a failure due again in an hour, as a retry outcome's batch does.
func recordedRetry(t *testing.T, st *store.Store, seq uint64) {
	t.Helper()
	dl, err := st.ReadDelivery(seq, 0)
	if err != nil || dl == nil {
		t.Fatalf("read delivery %d/0: %v (found: %v)", seq, err, dl != nil)
	}
	b := st.NewBatch()
	defer b.Close()
	n := 0
	if err := st.ScanDue(0, func(at int64, s uint64, num uint16) bool {
		if s == seq {
			dl.Attempts++
			dl.LastError = "503 busy"
			b.Retry(at, seq, num, dl, time.Now().Add(time.Hour).UnixMilli())
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

// An attempt's outcome is not written over a hook that a store reopen
// removed while the attempt ran. A batch the store reported failed may
// still have reached the WAL ahead of the fault that failed it, and the
// fence's reopen replays it; the dispatcher, which had kept the batch's
// outcomes to record again, then wrote them over rows the replay had
// already settled: a delivery row and an attempt row (and, for a retry, a
// due row) of a hook that had no other row left, which no reclaim ever
// removes (the simulator, rule 7: "rows hooks=0 deliveries=85", seed 400
// with a 64 KiB memtable). The test makes that state without the race: a
// reopen while the attempt runs, then the hook's rows removed as the
// replayed batch removed them.
func TestDispatch_AnOutcomeIsNotWrittenOverAHookAReopenRemoved(t *testing.T) {
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScripted(tc.answer)
			block := make(chan struct{})
			s.block = block
			e := setup(t, s, dispatch.Options{})
			res := e.submit(t, "settled elsewhere", "")
			testutil.Receive(t, s.entered, "the delivery never reached the sink")

			gen := e.st.Generation()
			e.gate.FailNext(1)
			r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", ContentType: "text/plain",
				Body: []byte("refused"), Sinks: []queue.SinkRef{{Num: 0, ID: "out"}}}
			if _, err := e.q.Submit(context.Background(), r); !errors.Is(err, queue.ErrStoreUnavailable) {
				t.Fatalf("submit over a failing fsync: %v, want store_unavailable", err)
			}
			testutil.Eventually(t, 10*time.Second, "the store reopened and the fence lifted", func() bool {
				return e.st.Generation() != gen && !e.q.Stats().Fenced
			})
			tc.settled(t, e.st, res.Seq)

			s.mu.Lock()
			s.block = nil
			s.mu.Unlock()
			close(block)
			if m := s.next(t); m.Seq != res.Seq {
				t.Fatalf("attempt for seq %d, want %d", m.Seq, res.Seq)
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
			if g := e.d.Gauges(); g.Pending != int64(tc.rows[store.PrefixDue]) || g.Dead != 0 {
				t.Errorf("gauges: pending %d dead %d, want %d and 0", g.Pending, g.Dead, tc.rows[store.PrefixDue])
			}
		})
	}
}
