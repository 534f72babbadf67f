package store_test

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// The batch contract (store.Batch): NewBatch never returns nil; a batch on
// a store with no open generation, or one built before a Reopen, fails with
// an error instead of a nil pointer or Pebble's "batch db mismatch" panic.
func TestBatch_NeverNilAndNeverAppliedAcrossGenerations(t *testing.T) {
	tests := []struct {
		name string
		// breaks the store after b was built; returns the error wanted
		breakIt func(t *testing.T, st *store.Store, gate *testutil.WALSyncGate) error
		// build the batch after breaking (true) or before (false)
		after bool
	}{
		{"built after Close", func(t *testing.T, st *store.Store, _ *testutil.WALSyncGate) error {
			_ = st.Close()
			return store.ErrClosed
		}, true},
		{"built after a failed Reopen", func(t *testing.T, st *store.Store, gate *testutil.WALSyncGate) error {
			gate.FailOpens(true)
			if err := st.Reopen(); err == nil {
				t.Fatal("reopen succeeded through failing opens")
			}
			return store.ErrFailed
		}, true},
		{"built before a Reopen, applied after", func(t *testing.T, st *store.Store, _ *testutil.WALSyncGate) error {
			if err := st.Reopen(); err != nil {
				t.Fatal(err)
			}
			return store.ErrFailed
		}, false},
	}
	// NewBatchSized keeps NewBatch's contract whatever it reserves.
	makers := map[string]func(*store.Store) *store.Batch{
		"NewBatch":      (*store.Store).NewBatch,
		"NewBatchSized": func(st *store.Store) *store.Batch { return st.NewBatchSized(1 << 20) },
	}
	for _, tc := range tests {
		for mname, mk := range makers {
			t.Run(tc.name+"/"+mname, func(t *testing.T) {
				gate := testutil.NewWALSyncGate()
				st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
				var b *store.Batch
				if !tc.after {
					b = mk(st)
				}
				want := tc.breakIt(t, st, gate)
				if tc.after {
					b = mk(st)
				}
				if b == nil {
					t.Fatal("NewBatch returned nil")
				}
				defer b.Close()
				_ = b.Set([]byte("k"), []byte("v"), nil)
				_ = b.Delete([]byte("j"), nil)
				for name, apply := range map[string]func(*store.Batch) error{"Apply": st.Apply, "ApplySync": st.ApplySync} {
					if err := apply(b); !errors.Is(err, want) {
						t.Fatalf("%s: %v, want %v", name, err, want)
					}
				}
				if tc.name == "built before a Reopen, applied after" {
					if v, err := st.Get([]byte("k")); err != nil || v != nil {
						t.Fatalf("the stale batch's row: %q %v, want absent", v, err)
					}
				}
			})
		}
	}
}

// The due floor is lowered by any applied batch that sets a due row, after
// the apply, and reset by TakeDueFloor; a failed apply does not lower it.
func TestBatch_DueFloorTracksTheEarliestDueRowApplied(t *testing.T) {
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	if _, ok := st.TakeDueFloor(); ok {
		t.Fatal("a fresh store reports a due floor")
	}
	put := func(ats ...int64) error {
		b := st.NewBatch()
		defer b.Close()
		for i, at := range ats {
			_ = b.Set(store.DueKey(at, uint64(i+1), 0), nil, nil)
		}
		_ = b.Set(store.KeyNextSeq, store.U64(9), nil)
		return st.Apply(b)
	}
	if err := put(500, 300, 400); err != nil {
		t.Fatal(err)
	}
	if err := put(350); err != nil {
		t.Fatal(err)
	}
	if at, ok := st.TakeDueFloor(); !ok || at != 300 {
		t.Fatalf("floor = %d %v, want 300", at, ok)
	}
	if _, ok := st.TakeDueFloor(); ok {
		t.Fatal("the floor was not reset by the take")
	}
	gate.FailNext(1)
	b := st.NewBatch()
	_ = b.Set(store.DueKey(100, 1, 0), nil, nil)
	if err := st.ApplySync(b); err == nil {
		t.Fatal("apply through a failed fsync succeeded")
	}
	_ = b.Close()
	// A failed apply lowers it too: a batch whose WAL sync failed may still
	// have reached the log file, and after the fence's reopen its due rows
	// are back (found by internal/sim). A floor too low costs one scan.
	if at, ok := st.TakeDueFloor(); !ok || at != 100 {
		t.Fatalf("after a failed apply the floor = %d %v, want 100", at, ok)
	}
}

// A reopen rewinds the due floor to the start: the new generation holds
// what the WAL kept, and a write the old one had applied without a sync
// (a claim that deleted a due row, say) may be gone, so due rows can be
// back behind the dispatcher's cursor without any batch having written
// them. A floor too low costs one scan; one too high strands the rows.
func TestBatch_ReopenRewindsTheDueFloor(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	b := st.NewBatch()
	_ = b.Set(store.DueKey(500, 1, 0), nil, nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if at, ok := st.TakeDueFloor(); !ok || at != 500 {
		t.Fatalf("floor = %d %v, want 500", at, ok)
	}
	if err := st.Reopen(); err != nil {
		t.Fatal(err)
	}
	if at, ok := st.TakeDueFloor(); !ok || at != 0 {
		t.Fatalf("after a reopen the floor = %d %v, want 0 (a rescan from the start)", at, ok)
	}
}

// RenewBatch hands back an applied batch empty (none of its writes are
// applied again, and the due floor it noted is forgotten), and a batch of
// an earlier generation or of a closed store is replaced: the renewed one
// applies on the current generation, or fails like any dead batch.
func TestBatch_RenewBatch(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	b := st.RenewBatch(nil, 64)
	_ = b.Set([]byte("a"), []byte("1"), nil)
	_ = b.Set(store.DueKey(5, 1, 1), nil, nil)
	if err := st.Apply(b); err != nil {
		t.Fatal(err)
	}
	st.TakeDueFloor()
	if err := st.Apply(st.NewBatch()); err != nil {
		t.Fatal(err)
	}
	b = st.RenewBatch(b, 64)
	_ = b.Set([]byte("b"), []byte("2"), nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.TakeDueFloor(); ok {
		t.Fatal("a renewed batch still carried the due row of its last use")
	}
	if n, err := st.DueRows(); err != nil || n != 1 {
		t.Fatalf("due count %d (err %v) after a renewed batch set no due row, want 1: the renew kept the last use's delta", n, err)
	}
	del := st.NewBatch()
	_ = del.Delete([]byte("a"), nil)
	if err := st.ApplySync(del); err != nil {
		t.Fatal(err)
	}
	b = st.RenewBatch(b, 64)
	if err := st.ApplySync(b); err != nil { // empty: must not bring "a" back
		t.Fatal(err)
	}
	if v, _ := st.Get([]byte("a")); v != nil {
		t.Fatal("renewing re-applied the batch's earlier writes")
	}

	if err := st.Reopen(); err != nil {
		t.Fatal(err)
	}
	b = st.RenewBatch(b, 64)
	_ = b.Set([]byte("c"), []byte("3"), nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatalf("a batch renewed across a Reopen: %v", err)
	}
	if v, _ := st.Get([]byte("c")); string(v) != "3" {
		t.Fatalf("c = %q after the renewed batch's apply", v)
	}

	_ = st.Close()
	b = st.RenewBatch(b, 64)
	if err := st.Apply(b); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("a batch renewed after Close applied with %v, want ErrClosed", err)
	}
}
