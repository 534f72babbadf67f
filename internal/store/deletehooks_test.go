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
