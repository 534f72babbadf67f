package store_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// putDueHook stores hook seq due at atMs for sinks 1 and 2 (two due rows)
// and returns its rows.
func putDueHook(t *testing.T, st *store.Store, seq uint64, atMs int64, sync bool) []store.Row {
	t.Helper()
	env := &store.Envelope{Seq: seq, Tenant: "t", Source: "s", ContentType: "application/json", Body: []byte("{}")}
	env.ID[0], env.ID[15] = 1, byte(seq)
	b := st.NewBatch()
	defer b.Close()
	rows, err := b.PutHook(&store.NewHook{Env: env, Sinks: []store.HookSink{{Num: 1, ID: "a"}, {Num: 2, ID: "b"}}, DueAtMs: atMs})
	if err != nil {
		t.Fatal(err)
	}
	apply := st.Apply
	if sync {
		apply = st.ApplySync
	}
	if err := apply(b); err != nil {
		t.Fatal(err)
	}
	return rows
}

// wantDue checks the kept count against a walk of the due rows and want.
func wantDue(t *testing.T, st *store.Store, want uint64) {
	t.Helper()
	walked, err := st.CountDue()
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.DueRows()
	if err != nil {
		t.Fatal(err)
	}
	if got != walked || got != want {
		t.Fatalf("DueRows = %d, a walk counts %d, want %d", got, walked, want)
	}
}

func readDelivery(t *testing.T, st *store.Store, seq uint64, sink uint16) *store.Delivery {
	t.Helper()
	dl, err := st.ReadDelivery(seq, sink)
	if err != nil || dl == nil {
		t.Fatalf("delivery %d/%d: %v %v", seq, sink, dl, err)
	}
	return dl
}

// The due count (duecount.go) follows every batch operation that writes a
// due row (C1) — it equals a walk after each — and is right after an open.
func TestDueRows_FollowEveryDueRowWrite(t *testing.T) {
	const at = 100
	type op func(t *testing.T, st *store.Store, b *store.Batch)
	claim := func(t *testing.T, st *store.Store, b *store.Batch) {
		b.LegacyClaim(at, 1, 1, readDelivery(t, st, 1, 1), 900)
	}
	tests := []struct {
		name   string
		before []op // one batch each, after two hooks (four due rows)
		op     op
		want   uint64
	}{
		{"an older build's claim", nil, claim, 3},
		{"retry", nil, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.Retry(at, 1, 1, readDelivery(t, st, 1, 1), 300)
		}, 4},
		{"delivered", nil, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.Delivered(at, 1, 1, readDelivery(t, st, 1, 1), 300)
		}, 3},
		{"dead", nil, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.Dead(at, 1, 1, readDelivery(t, st, 1, 1), 300, "refused")
		}, 3},
		{"dead from due", nil, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.DeadFromDue(at, 1, 1, readDelivery(t, st, 1, 1), 300, "sink removed")
		}, 3},
		{"revive", []op{func(t *testing.T, st *store.Store, b *store.Batch) {
			b.Dead(at, 1, 1, readDelivery(t, st, 1, 1), 300, "refused")
		}}, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.Revive(store.DeadRow{AtMs: 300, Seq: 1, Sink: 1}, readDelivery(t, st, 1, 1), 400, "job")
		}, 4},
		{"resend", []op{func(t *testing.T, st *store.Store, b *store.Batch) {
			b.Delivered(at, 1, 1, readDelivery(t, st, 1, 1), 300)
		}}, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.Resend(1, 1, readDelivery(t, st, 1, 1), 400, "resend")
		}, 4},
		{"reclaim", []op{claim}, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.Reclaim(1, 1, readDelivery(t, st, 1, 1), 400)
		}, 4},
		{"drop due", nil, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.DropDue(at, 2, 2)
		}, 3},
		// DeleteHook removes the rows HookRowKeys lists, not the due keys: they
		// stay (and count) until the scan drops them (DropDue).
		{"delete a due hook", nil, func(t *testing.T, st *store.Store, b *store.Batch) {
			b.DeleteHook(testutil.StoredRows(t, st, 2))
		}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := testutil.TempStoreDir(t)
			st := testutil.OpenStore(t, dir, vfs.Default)
			putDueHook(t, st, 1, at, true)
			putDueHook(t, st, 2, at, true)
			wantDue(t, st, 4)
			for _, o := range append(tc.before, tc.op) {
				b := st.NewBatch()
				o(t, st, b)
				if err := st.ApplySync(b); err != nil {
					t.Fatal(err)
				}
				_ = b.Close()
			}
			wantDue(t, st, tc.want)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			// The count lives in memory: a new open counts it again.
			wantDue(t, testutil.OpenStore(t, dir, vfs.Default), tc.want)
		})
	}
}

// Where C1 cannot be vouched for the count is walked again (C2): a failed
// apply, a reopen (the generation holds what the WAL kept), the fence's
// undo of rows the reopen may have lost, and a power cut.
func TestDueRows_RightAfterAFault(t *testing.T) {
	t.Run("failed apply, reopen, the fence's undo of lost rows", func(t *testing.T) {
		gate := testutil.NewWALSyncGate()
		st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
		putDueHook(t, st, 1, 100, true)
		// A group applied, its fsync failing: in the memtable, maybe not in
		// the next generation.
		lost := putDueHook(t, st, 2, 100, false)
		gate.FailNext(1)
		b := st.NewBatch()
		_ = b.Set(store.KeyNextSeq, store.U64(3), nil)
		if err := st.ApplySync(b); err == nil {
			t.Fatal("apply through a failed fsync succeeded")
		}
		_ = b.Close()
		wantDue(t, st, 4) // the failed generation still shows both hooks
		if err := st.Reopen(); err != nil {
			t.Fatal(err)
		}
		walked, err := st.CountDue()
		if err != nil {
			t.Fatal(err)
		}
		wantDue(t, st, walked)
		// The fence deletes the undone group's rows, present or not.
		b = st.NewBatch()
		_ = b.DeleteRows(lost)
		if err := st.ApplySync(b); err != nil {
			t.Fatal(err)
		}
		_ = b.Close()
		wantDue(t, st, 2)
	})
	t.Run("power cut loses an unsynced outcome", func(t *testing.T) {
		fs := vfs.NewCrashableMem()
		const dir = "/store"
		mkdirAllDurably(t, fs, "/")
		st := testutil.OpenStore(t, dir, fs)
		putDueHook(t, st, 1, 100, true)
		b := st.NewBatch()
		b.Delivered(100, 1, 1, readDelivery(t, st, 1, 1), 900)
		if err := st.Apply(b); err != nil { // not synced: a cut may lose it
			t.Fatal(err)
		}
		_ = b.Close()
		wantDue(t, st, 1)
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		_ = st.Close()
		wantDue(t, testutil.OpenStore(t, dir, crashed), 2)
	})
}
