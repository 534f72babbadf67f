package store_test

import (
	"bytes"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// HookRows is the one description of a new hook's rows (writer, boot
// replay, complete-local): every family is there, keyed by the envelope's
// seq, and PutHook / DeleteRows write and undo exactly them.
func TestHookRows_WriteAndUndoEveryRowOfAHook(t *testing.T) {
	tests := []struct {
		name      string
		sinks     []store.HookSink
		dedupe    bool
		replayID  string
		wantRows  int
		wantDeliv int
	}{
		{"no sinks, no dedupe", nil, false, "", 4, 0},
		{"two sinks", []store.HookSink{{Num: 1, ID: "a"}, {Num: 7, ID: "b"}}, false, "", 8, 2},
		{"one sink and dedupe", []store.HookSink{{Num: 3, ID: "a"}}, true, "", 8, 1},
		{"a replayed hook's deliveries carry the replay id", []store.HookSink{{Num: 2, ID: "a"}}, false, "job-1", 6, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
			env := &store.Envelope{Seq: 42, ID: [16]byte{9}, Tenant: "t1", Source: "s1", DedupeKey: "k", Body: []byte("body")}
			h := &store.NewHook{Env: env, Sinks: tc.sinks, DueAtMs: 1_000, Dedupe: tc.dedupe, DedupeExpiresAtMs: 5_000, ReplayID: tc.replayID}
			b := st.NewBatch()
			rows, err := b.PutHook(h)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			_ = b.Close()
			if len(rows) != tc.wantRows {
				t.Fatalf("%d rows, want %d", len(rows), tc.wantRows)
			}
			if got := store.DeliveryRows(rows); got != tc.wantDeliv {
				t.Fatalf("%d delivery rows, want %d", got, tc.wantDeliv)
			}
			if !bytes.Equal(rows[0].Key, store.HookKey(42)) {
				t.Fatalf("rows[0] is %q, want the hook row", rows[0].Key)
			}
			got, err := store.DecodeEnvelope(rows[0].Value)
			if err != nil || got.Seq != 42 || got.ID != env.ID {
				t.Fatalf("hook row decodes to %+v, %v", got, err)
			}
			want := [][]byte{store.HookKey(42), store.HookIDKey(env.ID), store.SourceIndexKey("s1", 42), store.TenantIndexKey("t1", 42)}
			for _, sk := range tc.sinks {
				want = append(want, store.DeliveryKey(42, sk.Num), store.DueKey(1_000, 42, sk.Num))
				v, _ := st.Get(store.DeliveryKey(42, sk.Num))
				d, err := store.DecodeDelivery(v)
				if err != nil || d.State != store.StateDue || d.NextAtMs != 1_000 || d.SinkID != sk.ID || d.ReplayID != tc.replayID || d.Size != 4 {
					t.Fatalf("delivery row of sink %d = %+v, %v", sk.Num, d, err)
				}
			}
			uk := store.DedupeKey("t1", "s1", "k")
			if tc.dedupe {
				want = append(want, uk, store.ExpiryKey(5_000, uk))
			}
			for i, k := range want {
				if !bytes.Equal(rows[i].Key, k) {
					t.Fatalf("row %d is %q, want %q", i, rows[i].Key, k)
				}
				if v, err := st.Get(k); err != nil || v == nil {
					t.Fatalf("row %q not stored: %v", k, err)
				}
			}
			if v, _ := st.Get(uk); !tc.dedupe && v != nil {
				t.Fatal("a dedupe row was written for a hook without one")
			}
			if tc.dedupe {
				v, _ := st.Get(uk)
				if d, err := store.DecodeDedupe(v); err != nil || d.Seq != 42 || d.ExpiresAtMs != 5_000 {
					t.Fatalf("dedupe row %+v, %v", d, err)
				}
			}

			b = st.NewBatch()
			if err := b.DeleteRows(rows); err != nil {
				t.Fatal(err)
			}
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			_ = b.Close()
			for _, r := range rows {
				if v, err := st.Get(r.Key); err != nil || v != nil {
					t.Fatalf("row %q left after DeleteRows: %v", r.Key, err)
				}
			}
		})
	}
}

// The sweep deletes a due expiry row, and the dedupe row with it only while
// that row still expires at the expiry row's time: a key renewed since
// points at a later expiry row and stays.
func TestExpiredDedupes_KeepsARenewedKey(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	put := func(seq uint64, key string, exp int64) {
		t.Helper()
		b := st.NewBatch()
		defer b.Close()
		env := &store.Envelope{Seq: seq, ID: [16]byte{byte(seq)}, Tenant: "t", Source: "s", DedupeKey: key}
		if _, err := b.PutHook(&store.NewHook{Env: env, Dedupe: true, DedupeExpiresAtMs: exp}); err != nil {
			t.Fatal(err)
		}
		if err := st.ApplySync(b); err != nil {
			t.Fatal(err)
		}
	}
	put(1, "gone", 100)
	put(2, "renewed", 100)
	put(3, "renewed", 900) // the renewal: its row now expires at 900
	put(4, "later", 800)

	found, err := st.ExpiredDedupes(500, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 {
		t.Fatalf("%d expired rows at 500, want 2 (both at 100)", len(found))
	}
	b := st.NewBatch()
	if err := b.DeleteExpired(found); err != nil {
		t.Fatal(err)
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	for _, c := range []struct {
		key  string
		kept bool
	}{{"gone", false}, {"renewed", true}, {"later", true}} {
		v, err := st.Get(store.DedupeKey("t", "s", c.key))
		if err != nil {
			t.Fatal(err)
		}
		if (v != nil) != c.kept {
			t.Fatalf("dedupe row %q kept=%v, want %v", c.key, v != nil, c.kept)
		}
	}
	for _, ek := range [][]byte{store.ExpiryKey(100, store.DedupeKey("t", "s", "gone")), store.ExpiryKey(100, store.DedupeKey("t", "s", "renewed"))} {
		if v, _ := st.Get(ek); v != nil {
			t.Fatalf("expiry row %q left", ek)
		}
	}
	if found, err := st.ExpiredDedupes(500, 10); err != nil || len(found) != 0 {
		t.Fatalf("after the sweep: %d expired rows, %v; want none", len(found), err)
	}
}

// The commit path's reads of hook rows (boot replay's "already stored?"
// and its republish above the watermark, the writer's counts) see exactly
// the hooks PutHook wrote, in seq order, from the seq asked for, and no
// row of a neighbouring family.
func TestHookReads_ScanFromIDLookupAndCounts(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	b := st.NewBatch()
	for _, seq := range []uint64{1, 2, 5, 9} {
		env := &store.Envelope{Seq: seq, ID: [16]byte{byte(seq)}, Tenant: "t", Source: "s", Body: []byte{byte(seq)}}
		if _, err := b.PutHook(&store.NewHook{Env: env, Sinks: []store.HookSink{{Num: 1, ID: "a"}}, DueAtMs: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		from  uint64
		limit int
		want  []uint64
	}{
		{0, 10, []uint64{1, 2, 5, 9}},
		{3, 10, []uint64{5, 9}},
		{9, 10, []uint64{9}},
		{10, 10, nil},
		{1, 2, []uint64{1, 2}},
	}
	for _, tc := range tests {
		var got []uint64
		err := st.ScanHooksFrom(tc.from, func(seq uint64, v []byte) bool {
			env, err := store.DecodeEnvelope(v)
			if err != nil || env.Seq != seq {
				t.Errorf("from %d: row %d decodes to %+v, %v", tc.from, seq, env, err)
			}
			got = append(got, seq)
			return len(got) < tc.limit
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ScanHooksFrom(%d) limit %d = %v, want %v", tc.from, tc.limit, got, tc.want)
		}
	}
	for id, want := range map[byte]bool{1: true, 9: true, 3: false} {
		if seq, has, err := st.LookupHookID([16]byte{id}); err != nil || has != want || (has && seq != uint64(id)) {
			t.Errorf("LookupHookID(%d) = %d, %v, %v; want %v", id, seq, has, err, want)
		}
	}
	if h, err := st.CountHooks(); err != nil || h != 4 {
		t.Errorf("CountHooks = %d, %v; want 4", h, err)
	}
	if d, err := st.CountDeliveries(); err != nil || d != 4 {
		t.Errorf("CountDeliveries = %d, %v; want 4", d, err)
	}
}

// HookRows cuts its keys and values from one arena: they must be byte for
// byte what the one-row builders make (the on-disk format is frozen), and
// each must be capped at its own length, so that appending to one row's key
// never writes into the next row.
func TestHookRows_ArenaRowsMatchTheRowBuilders(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name           string
		tenant, source string
		dedupe         string
		sinks          []store.HookSink
		replayID       string
	}{
		{"one sink", "t", "s", "", []store.HookSink{{Num: 1, ID: "a"}}, ""},
		{"three sinks and dedupe", "tenant-1", "github", "delivery-123", []store.HookSink{{Num: 1, ID: "a"}, {Num: 2, ID: "bb"}, {Num: 65535, ID: "ccc"}}, ""},
		{"long names and a replay id", long, long, long, []store.HookSink{{Num: 9, ID: long}}, long},
		{"no sinks", "t", "s", "k", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := &store.Envelope{Seq: 77, ID: [16]byte{1, 2, 3}, Tenant: tc.tenant, Source: tc.source, DedupeKey: tc.dedupe, Body: []byte("0123456789")}
			h := &store.NewHook{Env: env, Sinks: tc.sinks, DueAtMs: 123, Dedupe: tc.dedupe != "", DedupeExpiresAtMs: 456, ReplayID: tc.replayID}
			want := []store.Row{{Key: store.HookKey(77), Value: store.EncodeEnvelope(env)}, {Key: store.HookIDKey(env.ID), Value: store.U64(77)}}
			idx := store.HookIndexKeys(env.Tenant, env.Source, 77)
			want = append(want, store.Row{Key: idx[0]}, store.Row{Key: idx[1]})
			for _, sk := range tc.sinks {
				want = append(want,
					store.Row{Key: store.DeliveryKey(77, sk.Num), Value: store.EncodeDelivery(&store.Delivery{State: store.StateDue, NextAtMs: 123, Size: 10, SinkID: sk.ID, ReplayID: tc.replayID})},
					store.Row{Key: store.DueKey(123, 77, sk.Num)})
			}
			if h.Dedupe {
				uk := store.DedupeKey(env.Tenant, env.Source, env.DedupeKey)
				want = append(want,
					store.Row{Key: uk, Value: store.EncodeDedupe(&store.DedupeEntry{ExpiresAtMs: 456, ID: env.ID, Seq: 77})},
					store.Row{Key: store.ExpiryKey(456, uk)})
			}
			got := store.HookRows(h)
			if len(got) != len(want) {
				t.Fatalf("%d rows, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
					t.Errorf("row %d = %x → %x, want %x → %x", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
				}
			}
			// Appending to every key and value leaves every other row as it was.
			for i := range got {
				_ = append(got[i].Key, 0xff, 0xff, 0xff)
				if got[i].Value != nil {
					_ = append(got[i].Value, 0xff, 0xff, 0xff)
				}
			}
			for i := range want {
				if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
					t.Errorf("after appends, row %d = %x → %x, want %x → %x", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
				}
			}
		})
	}
}

// The bytes of a new hook's rows are the on-disk format, frozen: these were
// printed by the one-row builders as they stood before the arena (72245c3),
// so a change to the format — not only a drift between the arena and the
// builders — fails here.
func TestHookRows_FrozenFormat(t *testing.T) {
	env := &store.Envelope{Seq: 77, ID: [16]byte{1, 2, 3}, Tenant: "t1", Source: "gh", DedupeKey: "k", Body: []byte("0123456789")}
	h := &store.NewHook{Env: env, Sinks: []store.HookSink{{Num: 2, ID: "a"}}, DueAtMs: 123, Dedupe: true, DedupeExpiresAtMs: 456, ReplayID: "job"}
	want := []struct{ key, value string }{
		{"68000000000000004d", ""}, // value: the envelope (codec tests)
		{"6901020300000000000000000000000000", "000000000000004d"},
		{"6e676800000000000000004d", ""},
		{"6f743100000000000000004d", ""},
		{"64000000000000004d0002", "010100000000000000000000007b0000000a016100036a6f62"},
		{"71000000000000007b000000000000004d0002", ""},
		{"757431006768006b", "0100000000000001c801020300000000000000000000000000000000000000004d"},
		{"6500000000000001c87431006768006b", ""},
	}
	got := store.HookRows(h)
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i, w := range want {
		if k := hex.EncodeToString(got[i].Key); k != w.key {
			t.Errorf("row %d key %s, want %s", i, k, w.key)
		}
		if i == 0 {
			continue
		}
		if v := hex.EncodeToString(got[i].Value); v != w.value {
			t.Errorf("row %d value %s, want %s", i, v, w.value)
		}
	}
}

// AppendHook (the commit path's writer: the envelope encoded straight into
// the batch, the keys of many hooks cut from one arena) stores exactly the
// rows PutHook stores, and returns HookRows' rows with the hook row's value
// left out. The arena is grown for less than the hooks need, so pieces are
// cut from more than one array.
func TestBatch_AppendHookStoresWhatPutHookStores(t *testing.T) {
	hooks := func() []*store.NewHook {
		var hs []*store.NewHook
		for i, sinks := range [][]store.HookSink{nil, {{Num: 1, ID: "a"}}, {{Num: 2, ID: "b"}, {Num: 9, ID: "c"}}} {
			seq := uint64(10 + i)
			env := &store.Envelope{
				Seq: seq, ID: [16]byte{byte(i + 1)}, ReceivedAt: 5, Tenant: "t", Source: "s" + strings.Repeat("x", i),
				ContentType: "application/json", DedupeKey: "k" + strings.Repeat("y", i),
				Headers: []store.Header{{Name: "a", Value: "b"}}, Body: bytes.Repeat([]byte{byte('0' + i)}, 100*i),
			}
			hs = append(hs, &store.NewHook{Env: env, Sinks: sinks, DueAtMs: 7, Dedupe: i != 1, DedupeExpiresAtMs: 99})
		}
		return hs
	}
	put := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	b := put.NewBatch()
	for _, h := range hooks() {
		if _, err := b.PutHook(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := put.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()

	app := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	b = app.NewBatch()
	var a store.RowArena
	a.Grow(40)
	var rows []store.Row
	hs := hooks()
	for i, h := range hs {
		if i == 1 {
			// A caller that keeps the encoding (the hand-over to
			// dispatch) passes it: the batch stores the same bytes.
			h.Value = store.EncodeEnvelope(h.Env)
		}
		first := len(rows)
		var err error
		if rows, err = b.AppendHook(rows, &a, h); err != nil {
			t.Fatal(err)
		}
		want := store.HookRows(h)
		got := rows[first:]
		if len(got) != len(want) || got[0].Value != nil {
			t.Fatalf("seq %d: %d rows (hook row value %x), want %d and none", h.Env.Seq, len(got), got[0].Value, len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i].Key, want[i].Key) || (i > 0 && !bytes.Equal(got[i].Value, want[i].Value)) {
				t.Fatalf("seq %d row %d = %x → %x, want %x → %x", h.Env.Seq, i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
			}
		}
	}
	if err := app.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	for _, h := range hs {
		for _, r := range store.HookRows(h) {
			pv, err1 := put.Get(r.Key)
			av, err2 := app.Get(r.Key)
			if err1 != nil || err2 != nil || pv == nil || !bytes.Equal(pv, av) {
				t.Fatalf("row %x: PutHook stored %x (%v), AppendHook %x (%v)", r.Key, pv, err1, av, err2)
			}
		}
	}

	// The writer's way: every hook's value first, then one PutRowsByFamily
	// for the whole group's rows, stores the same rows.
	grp := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	b = grp.NewBatch()
	var ga store.RowArena
	var grows []store.Row
	for _, h := range hs {
		var err error
		if grows, err = b.AppendHookValue(grows, &ga, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutRowsByFamily(grows); err != nil {
		t.Fatal(err)
	}
	if err := grp.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	for _, h := range hs {
		for _, r := range store.HookRows(h) {
			pv, _ := put.Get(r.Key)
			gv, err := grp.Get(r.Key)
			if err != nil || !bytes.Equal(pv, gv) {
				t.Fatalf("row %x: PutHook stored %x, the family-ordered group %x (%v)", r.Key, pv, gv, err)
			}
		}
	}
	// A row of a family PutRowsByFamily does not write is a programming
	// error (HookRows grew a family): it panics rather than drop the row.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("PutRowsByFamily wrote a row of an unknown family without panicking")
			}
		}()
		b := grp.NewBatch()
		defer b.Close()
		_ = b.PutRowsByFamily([]store.Row{{Key: []byte("zz")}})
	}()

	// A dead batch records nothing and says so.
	_ = app.Close()
	dead := app.NewBatch()
	if _, err := dead.AppendHook(nil, &a, hs[0]); err == nil {
		t.Fatal("AppendHook on a dead batch returned nil")
	}
}
