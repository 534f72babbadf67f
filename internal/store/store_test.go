package store_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// storePut writes key/value pairs in one synced batch.
func storePut(t *testing.T, st *store.Store, kv ...string) {
	t.Helper()
	if len(kv)%2 != 0 {
		t.Fatalf("put: odd number of arguments")
	}
	b := st.NewBatch()
	for i := 0; i < len(kv); i += 2 {
		if err := b.Set([]byte(kv[i]), []byte(kv[i+1]), nil); err != nil {
			t.Fatalf("batch set: %v", err)
		}
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatalf("apply sync: %v", err)
	}
}

// storeMustGet returns the value at key and fails the test if it is absent.
func storeMustGet(t *testing.T, st *store.Store, key string) string {
	t.Helper()
	v, err := st.Get([]byte(key))
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if v == nil {
		t.Fatalf("get %q: missing", key)
	}
	return string(v)
}

func reopenStore(t *testing.T, st *store.Store, fs vfs.FS) *store.Store {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return testutil.OpenStore(t, st.Dir(), fs)
}

func TestOpenMintsStoreIDAndKeepsIt(t *testing.T) {
	dir := testutil.TempStoreDir(t)
	st := testutil.OpenStore(t, dir, nil)
	id := st.ID()
	if raw, err := hex.DecodeString(id); err != nil || len(raw) != 16 {
		t.Fatalf("store id %q is not 16 hex-encoded bytes", id)
	}
	if got := storeMustGet(t, st, string(store.KeyStoreID)); got != id {
		t.Fatalf("m:store_id = %q, ID() = %q", got, id)
	}
	if got := storeMustGet(t, st, string(store.KeyFormat)); got != string(store.U64(store.FormatVersion)) {
		t.Fatalf("m:format = %x, want %x", got, store.U64(store.FormatVersion))
	}
	if st.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", st.Dir(), dir)
	}

	if err := st.Reopen(); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if st.ID() != id || storeMustGet(t, st, string(store.KeyStoreID)) != id {
		t.Fatalf("store id changed across Reopen")
	}

	for i := 0; i < 3; i++ {
		st = reopenStore(t, st, nil)
		if st.ID() != id {
			t.Fatalf("open #%d: store id %q, want %q", i+2, st.ID(), id)
		}
	}

	other := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	if other.ID() == id {
		t.Fatalf("two fresh stores share the id %q", id)
	}
}

func TestOpenRejectsOtherFormat(t *testing.T) {
	tests := []struct {
		name   string
		format []byte
	}{
		{"newer version", store.U64(store.FormatVersion + 1)},
		{"version zero", store.U64(0)},
		{"malformed", []byte{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := testutil.TempStoreDir(t)
			st := testutil.OpenStore(t, dir, nil)
			b := st.NewBatch()
			_ = b.Set(store.KeyFormat, tt.format, nil)
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			st2, err := store.Open(store.Options{Dir: dir, Logger: testutil.Logger(t)})
			if err == nil {
				_ = st2.Close()
				t.Fatalf("opened a store with m:format %x", tt.format)
			}
		})
	}
}

func TestApplySyncSurvivesCloseAndOpen(t *testing.T) {
	tests := []struct {
		name string
		fs   func() vfs.FS
	}{
		{"disk", func() vfs.FS { return nil }},
		{"mem", func() vfs.FS { return vfs.NewMem() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := tt.fs()
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), fs)
			storePut(t, st, "t1", "one", "t2", "two")
			storePut(t, st, "t3", string(bytes.Repeat([]byte{0xab}, 1<<20)))
			b := st.NewBatch()
			_ = b.Delete([]byte("t2"), nil)
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			// Apply without sync, then SyncWAL: durable too.
			b = st.NewBatch()
			_ = b.Set([]byte("t4"), []byte("four"), nil)
			if err := st.Apply(b); err != nil {
				t.Fatal(err)
			}
			if err := st.SyncWAL(); err != nil {
				t.Fatal(err)
			}
			id := st.ID()

			st = reopenStore(t, st, fs)
			if st.ID() != id {
				t.Errorf("store id changed")
			}
			if got := storeMustGet(t, st, "t1"); got != "one" {
				t.Errorf("t1 = %q", got)
			}
			if v, err := st.Get([]byte("t2")); err != nil || v != nil {
				t.Errorf("deleted t2 = %q, %v", v, err)
			}
			if got := storeMustGet(t, st, "t3"); len(got) != 1<<20 {
				t.Errorf("t3 has %d bytes", len(got))
			}
			if got := storeMustGet(t, st, "t4"); got != "four" {
				t.Errorf("t4 = %q", got)
			}
		})
	}
}

// TestFailedWALSyncFencesStore: Pebble reports a failed WAL fsync through
// Logger.Fatalf, whose default implementation exits the process. The store
// turns it into ErrFailed on every write until Reopen, and after Reopen the
// store works again.
func TestFailedWALSyncFencesStore(t *testing.T) {
	tests := []struct {
		name string
		// trip writes key "doomed" while one WAL sync is set to fail and
		// returns the error of the write path that saw the failure.
		trip func(t *testing.T, st *store.Store, gate *testutil.WALSyncGate) error
	}{
		{"SyncWAL after Apply", func(t *testing.T, st *store.Store, gate *testutil.WALSyncGate) error {
			b := st.NewBatch()
			_ = b.Set([]byte("doomed"), []byte("x"), nil)
			if err := st.Apply(b); err != nil {
				t.Fatalf("apply (no sync) before the failing sync: %v", err)
			}
			gate.FailNext(1)
			return st.SyncWAL()
		}},
		{"ApplySync", func(t *testing.T, st *store.Store, gate *testutil.WALSyncGate) error {
			gate.FailNext(1)
			b := st.NewBatch()
			_ = b.Set([]byte("doomed"), []byte("x"), nil)
			return st.ApplySync(b)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gate := testutil.NewWALSyncGate()
			fs := gate.Wrap(vfs.Default)
			dir := testutil.TempStoreDir(t)
			st := testutil.OpenStore(t, dir, fs)
			id := st.ID()
			storePut(t, st, "acked", "before")
			if _, err := st.SinkNumbers([]store.SinkRef{{Source: "s", Sink: "old"}}); err != nil {
				t.Fatal(err)
			}

			err := tt.trip(t, st, gate)
			if !errors.Is(err, store.ErrFailed) {
				t.Fatalf("write during a failed WAL fsync returned %v, want ErrFailed", err)
			}
			if gate.Failed() != 1 {
				t.Fatalf("gate failed %d syncs, want 1", gate.Failed())
			}
			if err := st.Failed(); !errors.Is(err, store.ErrFailed) {
				t.Fatalf("Failed() = %v, want ErrFailed", err)
			}

			// Fenced: every write path refuses, and keeps refusing.
			for round := 0; round < 2; round++ {
				writes := []struct {
					name string
					do   func() error
				}{
					{"Apply", func() error {
						b := st.NewBatch()
						_ = b.Set([]byte("after"), []byte("x"), nil)
						return st.Apply(b)
					}},
					{"ApplySync", func() error {
						b := st.NewBatch()
						_ = b.Set([]byte("after"), []byte("x"), nil)
						return st.ApplySync(b)
					}},
					{"SyncWAL", st.SyncWAL},
					{"SinkNumbers with a new sink", func() error {
						_, err := st.SinkNumbers([]store.SinkRef{{Source: "s", Sink: fmt.Sprintf("new%d", round)}})
						return err
					}},
				}
				for _, w := range writes {
					if err := w.do(); !errors.Is(err, store.ErrFailed) {
						t.Errorf("round %d: %s on a fenced store = %v, want ErrFailed", round, w.name, err)
					}
				}
			}

			if err := st.Reopen(); err != nil {
				t.Fatalf("reopen: %v", err)
			}
			if err := st.Failed(); err != nil {
				t.Fatalf("Failed() after Reopen = %v", err)
			}
			if st.ID() != id {
				t.Fatalf("store id changed across Reopen")
			}
			if got := storeMustGet(t, st, "acked"); got != "before" {
				t.Fatalf("row acked before the failure = %q", got)
			}
			// "doomed" may or may not be there: no fsync covered it, and it is
			// the caller's job to delete it. Only check that writes work.
			storePut(t, st, "healed", "yes")
			b := st.NewBatch()
			_ = b.Set([]byte("healed2"), []byte("yes"), nil)
			if err := st.Apply(b); err != nil {
				t.Fatalf("apply after reopen: %v", err)
			}
			if err := st.SyncWAL(); err != nil {
				t.Fatalf("sync after reopen: %v", err)
			}
			nums, err := st.SinkNumbers([]store.SinkRef{{Source: "s", Sink: "old"}, {Source: "s", Sink: "healed"}})
			if err != nil {
				t.Fatalf("sink numbers after reopen: %v", err)
			}
			if nums[store.SinkRef{Source: "s", Sink: "old"}] != 0 || nums[store.SinkRef{Source: "s", Sink: "healed"}] != 1 {
				t.Fatalf("sink numbers after reopen = %v", nums)
			}

			// What was acked on either side of the failure is durable.
			st = reopenStore(t, st, fs)
			for _, k := range []string{"acked", "healed", "healed2"} {
				storeMustGet(t, st, k)
			}
			if st.ID() != id {
				t.Fatalf("store id changed across Close/Open")
			}
		})
	}
}

func TestScan(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.NewMem())
	keys := []string{"ta", "tb", "tb\x00", "tb\xff", "tc", "td", "u"}
	var kv []string
	for _, k := range keys {
		kv = append(kv, k, "v:"+k)
	}
	storePut(t, st, kv...)

	tests := []struct {
		name         string
		lower, upper []byte
		stopAfter    int // 0: never stop
		want         []string
	}{
		{"half open range", []byte("tb"), []byte("td"), 0, []string{"tb", "tb\x00", "tb\xff", "tc"}},
		{"bounds between keys", []byte("ta\x00"), []byte("tb\x01"), 0, []string{"tb", "tb\x00"}},
		{"prefix range", []byte("tb"), store.PrefixEnd([]byte("tb")), 0, []string{"tb", "tb\x00", "tb\xff"}},
		{"family", []byte("t"), store.PrefixEnd([]byte("t")), 0, []string{"ta", "tb", "tb\x00", "tb\xff", "tc", "td"}},
		{"nil upper", []byte("td"), nil, 0, []string{"td", "u"}},
		{"nil lower", nil, []byte("m"), 0, nil},
		{"empty range", []byte("tb"), []byte("tb"), 0, nil},
		{"range past every key", []byte("v"), nil, 0, nil},
		{"stop after first", []byte("t"), nil, 1, []string{"ta"}},
		{"stop after three", []byte("t"), nil, 3, []string{"ta", "tb", "tb\x00"}},
		{"stop at the last key", []byte("tc"), []byte("te"), 2, []string{"tc", "td"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := st.Scan(tt.lower, tt.upper, func(k, v []byte) bool {
				if string(v) != "v:"+string(k) {
					t.Errorf("value of %q = %q", k, v)
				}
				got = append(got, string(k))
				return tt.stopAfter == 0 || len(got) < tt.stopAfter
			})
			if err != nil {
				t.Fatalf("scan: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("scan [%q, %q) = %q, want %q", tt.lower, tt.upper, got, tt.want)
			}
		})
	}

	t.Run("nil bounds see meta keys too", func(t *testing.T) {
		var got []string
		if err := st.Scan(nil, nil, func(k, _ []byte) bool { got = append(got, string(k)); return true }); err != nil {
			t.Fatal(err)
		}
		want := append([]string{string(store.KeyFormat), string(store.KeyStoreID)}, keys...)
		if !slices.Equal(got, want) {
			t.Errorf("full scan = %q, want %q", got, want)
		}
	})
}

func TestCount(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.NewMem())
	b := st.NewBatch()
	for seq := uint64(250); seq < 260; seq++ { // crosses the 255/256 byte boundary
		_ = b.Set(store.HookKey(seq), []byte("h"), nil)
		for sink := uint16(0); sink < 3; sink++ {
			_ = b.Set(store.DeliveryKey(seq, sink), []byte("d"), nil)
		}
	}
	_ = b.Set([]byte{0xff, 0xff}, nil, nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		prefix []byte
		want   uint64
	}{
		{"hooks", []byte{store.PrefixHook}, 10},
		{"deliveries", []byte{store.PrefixDelivery}, 30},
		{"deliveries of one hook", store.DeliveryPrefix(255), 3},
		{"deliveries of a missing hook", store.DeliveryPrefix(1), 0},
		{"one exact key", store.HookKey(256), 1},
		{"meta", []byte("m:"), 2},
		{"empty family", []byte{store.PrefixDead}, 0},
		{"all-0xff prefix has no upper bound", []byte{0xff}, 1},
		{"everything", nil, 10 + 30 + 2 + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := st.Count(tt.prefix)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Count(%x) = %d, want %d", tt.prefix, got, tt.want)
			}
		})
	}
}

func TestGet(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.NewMem())
	storePut(t, st, "k", "value")
	tests := []struct {
		name string
		key  []byte
		want []byte // nil: absent
	}{
		{"present", []byte("k"), []byte("value")},
		{"missing", []byte("nope"), nil},
		{"missing prefix of a key", []byte(""), nil},
		{"missing extension of a key", []byte("k\x00"), nil},
		{"missing hook", store.HookKey(1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := st.Get(tt.key)
			if err != nil {
				t.Fatalf("Get(%q) error: %v", tt.key, err)
			}
			if tt.want == nil {
				if v != nil {
					t.Fatalf("Get(%q) = %q, want nil", tt.key, v)
				}
				return
			}
			if !bytes.Equal(v, tt.want) {
				t.Fatalf("Get(%q) = %q, want %q", tt.key, v, tt.want)
			}
		})
	}
	// The returned slice is the caller's.
	v, _ := st.Get([]byte("k"))
	copy(v, "XXXXX")
	if got := storeMustGet(t, st, "k"); got != "value" {
		t.Fatalf("changing a returned value changed the store: %q", got)
	}
}

func TestOperationsAfterClose(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.NewMem())
	storePut(t, st, "k", "v")
	pending := st.NewBatch() // built before Close, applied after
	_ = pending.Set([]byte("late"), []byte("v"), nil)
	if err := st.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	// Never nil (store.Batch): a batch made after Close fails with ErrClosed.
	dead := st.NewBatch()
	if dead == nil {
		t.Fatal("NewBatch after Close returned nil")
	}
	ops := []struct {
		name string
		do   func() error
	}{
		{"Get", func() error { _, err := st.Get([]byte("k")); return err }},
		{"Scan", func() error { return st.Scan(nil, nil, func(_, _ []byte) bool { return true }) }},
		{"Count", func() error { _, err := st.Count(nil); return err }},
		{"Apply", func() error { return st.Apply(pending) }},
		{"ApplySync", func() error { return st.ApplySync(pending) }},
		{"Set on a batch made after Close", func() error { return dead.Set([]byte("k"), nil, nil) }},
		{"Apply of a batch made after Close", func() error { return st.Apply(dead) }},
		{"SyncWAL", st.SyncWAL},
		{"Reopen", st.Reopen},
		{"SinkNumbers", func() error { _, err := st.SinkNumbers([]store.SinkRef{{Source: "s", Sink: "k"}}); return err }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			if err := op.do(); !errors.Is(err, store.ErrClosed) {
				t.Errorf("%s after Close = %v, want ErrClosed", op.name, err)
			}
		})
	}
	if n := st.DiskBytes(); n != 0 {
		t.Errorf("DiskBytes after Close = %d", n)
	}
}

type sinkStep struct {
	name   string
	refs   []store.SinkRef
	reopen bool // close and open the store before this step
}

func sinkRef(source, sink string) store.SinkRef { return store.SinkRef{Source: source, Sink: sink} }

func TestSinkNumbers(t *testing.T) {
	tests := []struct {
		name  string
		steps []sinkStep
		// want is the final number of each ref, checked after the last step.
		want map[store.SinkRef]uint16
	}{
		{
			name: "fresh store allocates in sorted order",
			steps: []sinkStep{
				{name: "config", refs: []store.SinkRef{sinkRef("b", "x"), sinkRef("a", "y"), sinkRef("a", "x")}},
			},
			want: map[store.SinkRef]uint16{sinkRef("a", "x"): 0, sinkRef("a", "y"): 1, sinkRef("b", "x"): 2},
		},
		{
			name: "stable across reopen whatever the order",
			steps: []sinkStep{
				{name: "config", refs: []store.SinkRef{sinkRef("a", "x"), sinkRef("a", "y"), sinkRef("b", "x")}},
				{name: "reversed", refs: []store.SinkRef{sinkRef("b", "x"), sinkRef("a", "y"), sinkRef("a", "x")}, reopen: true},
				{name: "subset", refs: []store.SinkRef{sinkRef("a", "y")}, reopen: true},
				{name: "no refs", refs: nil},
			},
			want: map[store.SinkRef]uint16{sinkRef("a", "x"): 0, sinkRef("a", "y"): 1, sinkRef("b", "x"): 2},
		},
		{
			name: "new sinks get new numbers, old ones keep theirs",
			steps: []sinkStep{
				{name: "config", refs: []store.SinkRef{sinkRef("m", "m"), sinkRef("z", "z")}},
				// "a/a" sorts before everything, yet must not take 0.
				{name: "add", refs: []store.SinkRef{sinkRef("z", "z"), sinkRef("a", "a"), sinkRef("m", "m")}, reopen: true},
			},
			want: map[store.SinkRef]uint16{sinkRef("m", "m"): 0, sinkRef("z", "z"): 1, sinkRef("a", "a"): 2},
		},
		{
			name: "a removed sink's number is never handed out again",
			steps: []sinkStep{
				{name: "config", refs: []store.SinkRef{sinkRef("s", "a"), sinkRef("s", "b"), sinkRef("s", "c")}},
				{name: "b removed, d added", refs: []store.SinkRef{sinkRef("s", "a"), sinkRef("s", "c"), sinkRef("s", "d")}, reopen: true},
				{name: "b back", refs: []store.SinkRef{sinkRef("s", "a"), sinkRef("s", "b"), sinkRef("s", "c"), sinkRef("s", "d")}, reopen: true},
			},
			want: map[store.SinkRef]uint16{sinkRef("s", "a"): 0, sinkRef("s", "b"): 1, sinkRef("s", "c"): 2, sinkRef("s", "d"): 3},
		},
		{
			name: "same sink id under two sources is two sinks",
			steps: []sinkStep{
				{name: "config", refs: []store.SinkRef{sinkRef("gh", "billing"), sinkRef("stripe", "billing")}},
			},
			want: map[store.SinkRef]uint16{sinkRef("gh", "billing"): 0, sinkRef("stripe", "billing"): 1},
		},
		{
			name: "source/sink split is not ambiguous",
			steps: []sinkStep{
				{name: "config", refs: []store.SinkRef{sinkRef("ab", "c"), sinkRef("a", "bc"), sinkRef("", "abc"), sinkRef("abc", "")}},
				{name: "again", refs: []store.SinkRef{sinkRef("a", "bc"), sinkRef("abc", ""), sinkRef("ab", "c"), sinkRef("", "abc")}, reopen: true},
			},
			want: map[store.SinkRef]uint16{sinkRef("", "abc"): 0, sinkRef("a", "bc"): 1, sinkRef("ab", "c"): 2, sinkRef("abc", ""): 3},
		},
		{
			name: "duplicate refs in one call",
			steps: []sinkStep{
				{name: "config", refs: []store.SinkRef{sinkRef("s", "a"), sinkRef("s", "a"), sinkRef("s", "b")}},
				{name: "again", refs: []store.SinkRef{sinkRef("s", "a"), sinkRef("s", "b")}, reopen: true},
			},
			// Only consistency is required here (checked by the loop);
			// the exact numbers are not pinned.
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			st := testutil.OpenStore(t, "/store", fs)
			known := map[store.SinkRef]uint16{} // every number handed out so far
			for _, step := range tt.steps {
				if step.reopen {
					st = reopenStore(t, st, fs)
				}
				got, err := st.SinkNumbers(step.refs)
				if err != nil {
					t.Fatalf("%s: %v", step.name, err)
				}
				maxKnown := -1
				for _, n := range known {
					maxKnown = max(maxKnown, int(n))
				}
				for _, r := range step.refs {
					n, ok := got[r]
					if !ok {
						t.Fatalf("%s: no number for %v", step.name, r)
					}
					if old, seen := known[r]; seen && old != n {
						t.Fatalf("%s: %v re-pointed from %d to %d", step.name, r, old, n)
					} else if !seen && int(n) <= maxKnown {
						t.Fatalf("%s: new sink %v got %d, which is not above the %d already used", step.name, r, n, maxKnown)
					}
				}
				for r, n := range got {
					if old, seen := known[r]; seen && old != n {
						t.Fatalf("%s: stored %v re-pointed from %d to %d", step.name, r, old, n)
					}
					known[r] = n
				}
				assertDistinct(t, step.name, known)
			}
			// A fresh read agrees with what was handed out.
			st = reopenStore(t, st, fs)
			got, err := st.SinkNumbers(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, known) {
				t.Fatalf("stored numbers %v, handed out %v", got, known)
			}
			if tt.want != nil && !maps.Equal(got, tt.want) {
				t.Fatalf("numbers = %v, want %v", got, tt.want)
			}
		})
	}
}

func assertDistinct(t *testing.T, step string, m map[store.SinkRef]uint16) {
	t.Helper()
	owner := map[uint16]store.SinkRef{}
	for r, n := range m {
		if o, dup := owner[n]; dup {
			t.Fatalf("%s: %v and %v share number %d", step, o, r, n)
		}
		owner[n] = r
	}
}

// Two fresh stores given the same config in a different order agree.
func TestSinkNumbersIndependentOfRefOrder(t *testing.T) {
	refs := []store.SinkRef{sinkRef("b", "2"), sinkRef("a", "1"), sinkRef("c", "0"), sinkRef("a", "2"), sinkRef("b", "1")}
	orders := [][]store.SinkRef{refs, slices.Clone(refs), slices.Clone(refs)}
	slices.Reverse(orders[1])
	slices.SortFunc(orders[2], func(x, y store.SinkRef) int {
		if x.Sink != y.Sink {
			return -bytes.Compare([]byte(x.Sink), []byte(y.Sink))
		}
		return bytes.Compare([]byte(x.Source), []byte(y.Source))
	})
	var first map[store.SinkRef]uint16
	for i, order := range orders {
		st := testutil.OpenStore(t, "/store", vfs.NewMem())
		got, err := st.SinkNumbers(order)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = got
			continue
		}
		if !maps.Equal(got, first) {
			t.Fatalf("order %d: %v, order 0: %v", i, got, first)
		}
	}
}

// All 65536 numbers can be used; the next sink is refused without writing.
func TestSinkNumbersExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 65536 sinks")
	}
	st := testutil.OpenStore(t, "/store", vfs.NewMem())
	refs := make([]store.SinkRef, math.MaxUint16+1)
	for i := range refs {
		refs[i] = sinkRef("s", fmt.Sprintf("%05d", i))
	}
	got, err := st.SinkNumbers(refs)
	if err != nil {
		t.Fatalf("allocating %d sinks: %v", len(refs), err)
	}
	for i, r := range refs {
		if got[r] != uint16(i) {
			t.Fatalf("%v = %d, want %d", r, got[r], i)
		}
	}
	before, _ := st.Count([]byte{store.PrefixSinkNum})
	if _, err := st.SinkNumbers(append(refs, sinkRef("s", "one-too-many"))); err == nil {
		t.Fatal("allocated a 65537th sink number")
	}
	if after, _ := st.Count([]byte{store.PrefixSinkNum}); after != before {
		t.Fatalf("failed allocation wrote rows: %d → %d", before, after)
	}
}

func TestStore_CheckpointOpensWithTheData(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	b := st.NewBatch()
	_ = b.Set([]byte("m:probe-key"), []byte("v1"), nil)
	if err := st.Apply(b); err != nil { // unsynced: the checkpoint flushes the WAL
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cp")
	if err := st.Checkpoint(dir); err != nil {
		t.Fatal(err)
	}
	cp := testutil.OpenStore(t, dir, nil)
	if v, err := cp.Get([]byte("m:probe-key")); err != nil || string(v) != "v1" {
		t.Fatalf("checkpoint read = %q, %v", v, err)
	}
	if cp.ID() != st.ID() {
		t.Fatalf("checkpoint store id %s, want %s", cp.ID(), st.ID())
	}
}

// TestWarmAfterThreeMemtablesOfWAL: a store is warm (Pebble's memtables
// have grown to full size and their arenas are reused) only once its WAL
// has taken in three memtables' worth, and not before two: the benchmark
// measures after it, so a store warm too early would let the memtable
// growth's page faults into the figures.
func TestWarmAfterThreeMemtablesOfWAL(t *testing.T) {
	const memtable = 1 << 20
	st, err := store.Open(store.Options{Dir: filepath.Join(testutil.TempStoreDir(t), "store"), MemTableSize: memtable})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	value := bytes.Repeat([]byte{'v'}, 16<<10)
	written := 0
	for i := 0; !st.Warm(); i++ {
		if written > 4*memtable {
			t.Fatalf("not warm after %d bytes written with a %d-byte memtable", written, memtable)
		}
		storePut(t, st, fmt.Sprintf("zwarm/%06d", i), string(value))
		written += len(value)
	}
	if written < 2*memtable {
		t.Fatalf("warm after %d bytes written with a %d-byte memtable: the growth is not over", written, memtable)
	}
	// WALBytesIn counts what the WAL took in: every value, plus keys and
	// record headers.
	if got, gen, ok := st.WALBytesIn(); !ok || gen != st.Generation() || got < uint64(written) || got > uint64(written)*2 {
		t.Fatalf("WALBytesIn %d (generation %d, ok %v) after %d bytes of values written", got, gen, ok, written)
	}
}
