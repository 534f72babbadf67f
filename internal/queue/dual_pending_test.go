package queue_test

// The pending set's byte bound (intake.pending.max_bytes, ADR section 10):
// what a held record counts, and that a record of the largest size fits in
// an empty set, as the config rule max_bytes >= max_record_bytes promises;
// and the hand-over of new hooks to dispatch under dual.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// A held record's envelope is one slice, shared by its local half's hook
// row and its log record: it is counted once. Before the fix it was counted
// twice, in the entry's size and again in the writer's room check.
func TestDual_PendingBytesCountTheEnvelopeOnce(t *testing.T) {
	tests := []struct {
		name string
		body int
	}{
		{"1 KiB", 1 << 10},
		{"64 KiB", 64 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newDual(t, nil)
			e.log.Hang()
			ch := submitAsync(e.q, rec(strings.Repeat("x", tc.body), "evt"))
			if err := e.log.WaitHung(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			s, _ := e.q.Dual()
			// The envelope holds the body and a few hundred bytes of fixed
			// fields; the other rows (delivery, due, dedupe) their keys.
			if s.Pending.Records != 1 || s.Pending.Bytes < int64(tc.body) || s.Pending.Bytes > int64(tc.body)+1024 {
				t.Fatalf("pending %+v for one record of a %d-byte body, want its bytes counted once", s.Pending, tc.body)
			}
			e.log.Unhang()
			if a := answer(t, ch); a.err != nil {
				t.Fatal(a.err)
			}
			e.pendingEmpty(t)
			if s, _ := e.q.Dual(); s.Pending.Bytes != 0 {
				t.Fatalf("pending bytes %d after the set drained", s.Pending.Bytes)
			}
		})
	}
}

// With intake.pending.max_bytes = intake.max_record_bytes (the least the
// config allows), a record just under the record limit is admitted into an
// empty pending set. Before the fix the room check counted it twice and
// refused it 503 backlog with nothing pending.
func TestDual_ALargestRecordFitsAnEmptyPendingSet(t *testing.T) {
	const limit = 8 << 10
	e := newDual(t, func(d *queue.DualOptions) { d.PendingMaxBytes, d.MaxRecordBytes = limit, limit })
	body := strings.Repeat("x", limit-1024) // under the record limit with the envelope and the record's framing (intake.RecordBound)
	if a := answer(t, submitAsync(e.q, rec(body, ""))); a.err != nil {
		t.Fatalf("a record under max_record_bytes into an empty pending set: %v", a.err)
	}
	// The bound still holds: a second record while the first is held is refused.
	e.log.Hang()
	ch := submitAsync(e.q, rec(body, ""))
	if err := e.log.WaitHung(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if a := answer(t, submitAsync(e.q, rec(body, ""))); !errors.Is(a.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("a record past max_bytes with one held: %v, want intake_unavailable", a.err)
	}
	e.log.Unhang()
	if a := answer(t, ch); a.err != nil {
		t.Fatal(a.err)
	}
}

// Under dual the commit path hands a group's new hooks to dispatch
// (Options.OnCommitted) once its local fsync returned, whatever the log
// answered (the due scan would deliver such a hook too), and never those of
// a group whose local half failed (ack rule 1): complete-local writes them
// later, and the due scan finds them.
func TestDual_HandsOverTheHooksWhoseLocalHalfIsDurable(t *testing.T) {
	tests := []struct {
		name    string
		fault   func(e *dualEnv)
		wantErr error
		handed  bool
	}{
		{"both halves confirmed", nil, nil, true},
		{"the log fails", func(e *dualEnv) { e.log.FailNext(1, intake.Unavailable) }, queue.ErrIntakeUnavailable, true},
		{"the local fsync fails", func(e *dualEnv) { e.gate.FailNext(1) }, queue.ErrStoreUnavailable, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []store.Committed
			e := newDualWith(t, func(d *queue.DualOptions) { d.ReconcileEvery = -1 }, func(o *queue.Options) {
				o.OnCommitted = func(cs []store.Committed) {
					mu.Lock()
					got = append(got, cs...)
					mu.Unlock()
				}
			})
			if tc.fault != nil {
				tc.fault(e)
			}
			s := answer(t, submitAsync(e.q, rec("handed-body", "")))
			if tc.wantErr == nil && s.err != nil || tc.wantErr != nil && !errors.Is(s.err, tc.wantErr) {
				t.Fatalf("answer %v, want %v", s.err, tc.wantErr)
			}
			// The hand-over comes before the join hears the local half, so
			// before the answer.
			mu.Lock()
			defer mu.Unlock()
			if !tc.handed {
				if len(got) != 0 {
					t.Fatalf("handed %+v for a group whose local half failed", got)
				}
				return
			}
			if len(got) != 1 || got[0].Seq != e.q.Stats().NextSeq-1 {
				t.Fatalf("handed %+v, want the one hook (seq %d)", got, e.q.Stats().NextSeq-1)
			}
			env, err := store.DecodeEnvelope(got[0].Value)
			if err != nil || string(env.Body) != "handed-body" {
				t.Fatalf("handed value: %v, %v", env, err)
			}
		})
	}
}
