package store_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// deliveryIndex is where a delivery stands as its index rows say: which of
// due / inflight / dead rows name it, and at what time.
type deliveryIndex struct {
	due, inflight, dead []int64 // times of the due and dead rows; inflight: lease
}

func indexOf(t *testing.T, st *store.Store, seq uint64, sink uint16) deliveryIndex {
	t.Helper()
	var ix deliveryIndex
	if err := st.ScanDue(0, func(at int64, s uint64, n uint16) bool {
		if s == seq && n == sink {
			ix.due = append(ix.due, at)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.ScanInflight(func(s uint64, n uint16) bool {
		if s == seq && n == sink {
			ix.inflight = append(ix.inflight, 1)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.ScanDead(nil, 0, -1, func(r store.DeadRow) bool {
		if r.Seq == seq && r.Sink == sink {
			ix.dead = append(ix.dead, r.AtMs)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return ix
}

// Every delivery transition moves a row between two states in one batch:
// afterwards the delivery row holds the new state and exactly the index
// row of that state names it (none when delivered), so a crash after the
// apply can never find a delivery with two index rows, or a due one with
// none. An attempt's outcome moves the row from its due key (the claim is
// the dispatcher's, in memory); an older build's claim row is returned to
// due by Reclaim.
func TestDelivery_EveryTransitionLeavesExactlyTheIndexRowOfItsNewState(t *testing.T) {
	const seq, sink = 7, 3
	type step func(b *store.Batch, st *store.Store, dl *store.Delivery)
	claim := func(b *store.Batch, _ *store.Store, dl *store.Delivery) { b.LegacyClaim(100, seq, sink, dl, 900) }
	tests := []struct {
		name    string
		before  []step // applied one batch each, from a due row at 100
		op      step
		state   byte
		nextAt  int64
		due     []int64
		infl    int
		dead    []int64
		attempt uint32
	}{
		{"an older build's claim", nil, claim, store.StateInflight, 100, nil, 1, nil, 0},
		{"delivered", nil, func(b *store.Batch, _ *store.Store, dl *store.Delivery) {
			b.Delivered(100, seq, sink, dl, 200)
		}, store.StateDelivered, 200, nil, 0, nil, 0},
		{"retry", nil, func(b *store.Batch, _ *store.Store, dl *store.Delivery) {
			b.Retry(100, seq, sink, dl, 300)
		}, store.StateDue, 300, []int64{300}, 0, nil, 0},
		{"dead", nil, func(b *store.Batch, _ *store.Store, dl *store.Delivery) {
			b.Dead(100, seq, sink, dl, 400, "refused")
		}, store.StateDead, 400, nil, 0, []int64{400}, 0},
		{"dead from due", nil, func(b *store.Batch, _ *store.Store, dl *store.Delivery) {
			b.DeadFromDue(100, seq, sink, dl, 500, "sink removed")
		}, store.StateDead, 0, nil, 0, []int64{500}, 0},
		{"reclaim", []step{claim}, func(b *store.Batch, _ *store.Store, dl *store.Delivery) {
			b.Reclaim(seq, sink, dl, 600)
		}, store.StateDue, 600, []int64{600}, 0, nil, 0},
		{"revive", []step{func(b *store.Batch, _ *store.Store, dl *store.Delivery) {
			dl.Attempts = 5
			b.Dead(100, seq, sink, dl, 400, "refused")
		}}, func(b *store.Batch, st *store.Store, dl *store.Delivery) {
			r, ok, err := st.FindDead(seq, sink, dl.NextAtMs)
			if err != nil || !ok {
				t.Fatalf("dead row: ok %v err %v", ok, err)
			}
			b.Revive(r, dl, 700, "job")
		}, store.StateDue, 700, []int64{700}, 0, nil, 0},
		{"resend a dead row", []step{func(b *store.Batch, _ *store.Store, dl *store.Delivery) {
			dl.Attempts = 5
			b.Dead(100, seq, sink, dl, 400, "refused")
		}}, func(b *store.Batch, st *store.Store, dl *store.Delivery) {
			r, ok, err := st.FindDead(seq, sink, dl.NextAtMs)
			if err != nil || !ok {
				t.Fatalf("dead row: ok %v err %v", ok, err)
			}
			b.DropDead(r)
			b.Resend(seq, sink, dl, 800, "resend")
		}, store.StateDue, 800, []int64{800}, 0, nil, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
			b := st.NewBatch()
			dl := &store.Delivery{State: store.StateDue, NextAtMs: 100, Size: 10, SinkID: "out"}
			b.Resend(seq, sink, dl, 100, "") // the row as the commit path writes it
			if err := st.Apply(b); err != nil {
				t.Fatal(err)
			}
			_ = b.Close()
			for _, s := range append(tc.before, tc.op) {
				got, err := st.ReadDelivery(seq, sink)
				if err != nil || got == nil {
					t.Fatalf("delivery row: %v %v", got, err)
				}
				b := st.NewBatch()
				s(b, st, got)
				if err := st.Apply(b); err != nil {
					t.Fatal(err)
				}
				_ = b.Close()
			}
			got, err := st.ReadDelivery(seq, sink)
			if err != nil || got == nil {
				t.Fatalf("delivery row: %v %v", got, err)
			}
			if got.State != tc.state || got.NextAtMs != tc.nextAt || got.Attempts != tc.attempt {
				t.Errorf("delivery = state %d next %d attempts %d, want %d %d %d", got.State, got.NextAtMs, got.Attempts, tc.state, tc.nextAt, tc.attempt)
			}
			ix := indexOf(t, st, seq, sink)
			if !equal(ix.due, tc.due) || len(ix.inflight) != tc.infl || !equal(ix.dead, tc.dead) {
				t.Errorf("index rows = due %v inflight %d dead %v, want due %v inflight %d dead %v", ix.due, len(ix.inflight), ix.dead, tc.due, tc.infl, tc.dead)
			}
		})
	}
}

// A due row applied by a delivery operation lowers the store's due floor,
// as any due row does: the dispatcher's cursor finds a retry written
// behind it.
func TestDelivery_DueRowsLowerTheDueFloor(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	_, _ = st.TakeDueFloor()
	b := st.NewBatch()
	defer b.Close()
	b.Retry(10, 1, 0, &store.Delivery{}, 42)
	if err := st.Apply(b); err != nil {
		t.Fatal(err)
	}
	if at, ok := st.TakeDueFloor(); !ok || at != 42 {
		t.Fatalf("due floor = %d %v, want 42 true", at, ok)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadHookMeta_EverythingButTheBody: ReadHookMeta decodes what
// ReadHook's envelope holds except the body, whose length it reports; an
// absent hook is not found, and a value that does not decode is
// store.ErrCorrupt.
func TestReadHookMeta_EverythingButTheBody(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	env := store.Envelope{
		ID: [16]byte{1, 2, 3}, Seq: 7, ReceivedAt: 1_700_000_000_123_456_789, Tenant: "acme", Source: "github",
		ContentType: "application/json", DedupeKey: "d-1", Flagged: true, SHA256: [32]byte{9, 8, 7},
		Headers: []store.Header{{Name: "x-github-event", Value: "push"}, {Name: "x-empty", Value: ""}},
		Body:    []byte(`{"big":"` + strings.Repeat("x", 100<<10) + `"}`),
	}
	b := st.NewBatch()
	if err := b.Set(store.HookKey(7), store.EncodeEnvelope(&env), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(store.HookKey(8), []byte{1, 2}, nil); err != nil { // version 1, then cut short
		t.Fatal(err)
	}
	if err := st.Apply(b); err != nil {
		t.Fatal(err)
	}

	var got store.Envelope
	n, found, err := st.ReadHookMeta(7, &got)
	if err != nil || !found {
		t.Fatalf("ReadHookMeta(7) = found %v, %v", found, err)
	}
	if n != len(env.Body) || got.Body != nil {
		t.Fatalf("body length %d, body %d bytes; want %d and none", n, len(got.Body), len(env.Body))
	}
	want := env
	want.Body = nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("envelope\n got %+v\nwant %+v", got, want)
	}
	if _, found, err := st.ReadHookMeta(9, &got); found || err != nil {
		t.Fatalf("ReadHookMeta of an absent hook = found %v, %v; want not found, no error", found, err)
	}
	if _, _, err := st.ReadHookMeta(8, &got); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("ReadHookMeta of a value cut short = %v, want store.ErrCorrupt", err)
	}
}
