package store_test

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// DeleteDeliveredHooks removes every row of each hook it is given but the
// dedupe rows — whatever order it writes them in — and nothing of a hook it
// is not given.
func TestDeleteDeliveredHooks_RemovesEveryRowButDedupe(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	b := st.NewBatch()
	var refs []store.DeliveredHook
	for seq := uint64(1); seq <= 3; seq++ {
		env := &store.Envelope{Seq: seq, ID: [16]byte{byte(seq)}, Tenant: fmt.Sprintf("t%d", seq), Source: "src",
			DedupeKey: fmt.Sprintf("k%d", seq), Body: []byte("body")}
		sinks := []store.HookSink{{Num: 0, ID: "a"}, {Num: 7, ID: "b"}}
		if _, err := b.PutHook(&store.NewHook{Env: env, Sinks: sinks, DueAtMs: 10, Dedupe: true, DedupeExpiresAtMs: 1 << 40}); err != nil {
			t.Fatal(err)
		}
		// Two attempts logged on sink 7, none on sink 0.
		for n := uint32(1); n <= 2; n++ {
			b.PutAttempt(seq, 7, n, &store.Attempt{AtMs: 5, Result: "retry"})
		}
		if seq < 3 { // hook 3 stays
			refs = append(refs, store.DeliveredHook{
				Ref:   store.HookRef{Seq: seq, ID: env.ID, Tenant: env.Tenant, Source: env.Source},
				Sinks: []store.SinkAttempts{{Sink: 0, Attempts: 0}, {Sink: 7, Attempts: 2}},
			})
		}
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	before := rowCounts(t, st)
	d := st.NewBatch()
	if n := d.DeleteDeliveredHooks(refs); n != 4 {
		t.Fatalf("removed %d delivery rows, want 4", n)
	}
	if err := st.ApplySync(d); err != nil {
		t.Fatal(err)
	}
	after := rowCounts(t, st)
	// Every family loses two hooks' rows (due rows are not the caller's:
	// the claim removed them), dedupe and expiry keep all three.
	want := map[byte][2]uint64{
		store.PrefixHook: {3, 1}, store.PrefixHookID: {3, 1}, store.PrefixSourceIdx: {3, 1}, store.PrefixTenantIdx: {3, 1},
		store.PrefixDelivery: {6, 2}, store.PrefixAttempt: {6, 2}, store.PrefixDedupe: {3, 3}, store.PrefixExpiry: {3, 3},
	}
	for p, w := range want {
		if before[p] != w[0] || after[p] != w[1] {
			t.Errorf("%q rows: %d → %d, want %d → %d", p, before[p], after[p], w[0], w[1])
		}
	}
	if raw, err := st.Get(store.HookKey(3)); err != nil || raw == nil {
		t.Fatalf("hook 3 (not given) is gone: %v", err)
	}
}

func rowCounts(t *testing.T, st *store.Store) map[byte]uint64 {
	t.Helper()
	m := map[byte]uint64{}
	for _, p := range []byte{store.PrefixHook, store.PrefixHookID, store.PrefixSourceIdx, store.PrefixTenantIdx,
		store.PrefixDelivery, store.PrefixAttempt, store.PrefixDedupe, store.PrefixExpiry} {
		n, err := st.Count([]byte{p})
		if err != nil {
			t.Fatal(err)
		}
		m[p] = n
	}
	return m
}

// W1 (delivery.go): the rows of a Fresh hook, delivered while they are
// still in the memtable, are single-deleted and leave nothing on disk at
// the flush; deleted, each leaves a tombstone there. And either way the
// store is empty after a full compaction, with no misuse reported.
func TestDeleteDeliveredHooks_FreshLeavesNothingAtTheFlush(t *testing.T) {
	for _, fresh := range []bool{true, false} {
		t.Run(fmt.Sprintf("fresh=%v", fresh), func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
			b := st.NewBatch()
			var refs []store.DeliveredHook
			for seq := uint64(1); seq <= 200; seq++ {
				env := &store.Envelope{Seq: seq, ID: [16]byte{byte(seq), byte(seq >> 8)}, Tenant: "t", Source: "src", Body: []byte("body")}
				if _, err := b.PutHook(&store.NewHook{Env: env, Sinks: []store.HookSink{{Num: 0, ID: "a"}}, DueAtMs: 10}); err != nil {
					t.Fatal(err)
				}
				refs = append(refs, store.DeliveredHook{
					Ref: store.HookRef{Seq: seq, ID: env.ID, Tenant: env.Tenant, Source: env.Source}, Fresh: fresh,
					Sinks: []store.SinkAttempts{{Sink: 0}},
				})
			}
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			d := st.NewBatch()
			d.DeleteDeliveredHooks(refs)
			for _, r := range refs {
				if fresh {
					d.DropFreshDue(10, r.Ref.Seq, 0)
				} else {
					d.DropDue(10, r.Ref.Seq, 0)
				}
			}
			if err := st.ApplySync(d); err != nil {
				t.Fatal(err)
			}
			tables, bytes, err := st.FlushTables()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("flush left %d tables, %d bytes", tables, bytes)
			// The store's meta rows (its id and format) are all a fresh
			// removal leaves: well under one row of tombstone per hook.
			if fresh && bytes > 2048 {
				t.Errorf("the flush left %d tables, %d bytes: the single deletes did not meet their rows", tables, bytes)
			}
			if !fresh && bytes < 200*6*8 {
				t.Errorf("the flush left %d bytes: the deletes' tombstones are missing (the test measures nothing)", bytes)
			}
			if err := st.Compact(t.Context()); err != nil {
				t.Fatal(err)
			}
			for p, n := range rowCounts(t, st) {
				if n != 0 {
					t.Errorf("%q: %d rows left", p, n)
				}
			}
			if n, err := st.Count([]byte{store.PrefixDue}); err != nil || n != 0 {
				t.Errorf("due rows left: %d %v", n, err)
			}
			if m := st.SingleDeleteMisuses(); m != 0 {
				t.Errorf("%d single delete misuses", m)
			}
		})
	}
}
