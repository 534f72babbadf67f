package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// kv is one row a family scan passed: its name and a copy of its value.
type kv struct{ name, v string }

// TestNamedFamiliesRoundTrip: the source (s) and rate-override (r) rows
// written with their Batch methods come back from their scans, by name,
// with the value as written; a delete removes exactly one row; the raw key
// is the frozen one; and one family's scan never sees the other's rows.
func TestNamedFamiliesRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		put    func(b *store.Batch, name string, v []byte) error
		del    func(b *store.Batch, name string) error
		scan   func(st *store.Store, fn func(name string, v []byte) bool) error
		rawKey func(name string) []byte
		prefix byte
	}{
		{
			name:   "sources",
			put:    (*store.Batch).PutSource,
			del:    (*store.Batch).DeleteSource,
			scan:   (*store.Store).ScanSources,
			rawKey: store.SourceKey, prefix: 's',
		},
		{
			name:   "rate overrides",
			put:    (*store.Batch).PutRateOverride,
			del:    (*store.Batch).DeleteRateOverride,
			scan:   (*store.Store).ScanRateOverrides,
			rawKey: store.RateKey, prefix: 'r',
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			// Names chosen to sit next to the family's bounds and to each
			// other: the empty-ish one-byte name, a dotted API id, and a
			// name that is a prefix of another.
			rows := []kv{{"a", `{"n":1}`}, {"acme.orders", `{"n":2}`}, {"acme.orders2", ""}, {"zz", `{"n":4}`}}
			b := st.NewBatch()
			for _, r := range rows {
				if err := tt.put(b, r.name, []byte(r.v)); err != nil {
					t.Fatalf("put %s: %v", r.name, err)
				}
			}
			// Rows of the other families around this one must not leak in.
			_ = b.Set([]byte{tt.prefix - 1, 'x'}, []byte("below"), nil)
			_ = b.Set([]byte{tt.prefix + 1, 'x'}, []byte("above"), nil)
			if err := st.ApplySync(b); err != nil {
				t.Fatalf("apply: %v", err)
			}
			if got := collect(t, st, tt.scan); fmt.Sprint(got) != fmt.Sprint(rows) {
				t.Fatalf("scan = %v, want %v", got, rows)
			}
			raw, err := st.Get(append([]byte{tt.prefix}, "acme.orders"...))
			if err != nil || string(raw) != `{"n":2}` {
				t.Fatalf("raw row = %q, %v; want the value under %c + name", raw, err, tt.prefix)
			}
			if k := tt.rawKey("acme.orders"); !bytes.Equal(k, append([]byte{tt.prefix}, "acme.orders"...)) {
				t.Fatalf("key = %q", k)
			}

			b = st.NewBatch()
			if err := tt.del(b, "acme.orders"); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if err := st.ApplySync(b); err != nil {
				t.Fatalf("apply: %v", err)
			}
			want := []kv{rows[0], rows[2], rows[3]}
			if got := collect(t, st, tt.scan); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after delete: scan = %v, want %v", got, want)
			}

			// A callback returning false stops the scan.
			n := 0
			if err := tt.scan(st, func(string, []byte) bool { n++; return false }); err != nil || n != 1 {
				t.Fatalf("stopped scan saw %d rows, %v; want 1", n, err)
			}
		})
	}
}

func collect(t *testing.T, st *store.Store, scan func(*store.Store, func(string, []byte) bool) error) []kv {
	t.Helper()
	var got []kv
	if err := scan(st, func(name string, v []byte) bool {
		got = append(got, kv{name, string(v)})
		return true
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return got
}

func penID(b byte) [16]byte { return [16]byte{15: b} }

// TestPenRoundTrip: pen rows written with PutPen come back from ReadPen and
// from ScanPen in arrival order, with the bounds and the cursor selecting
// what they say, and DeletePen removes one row.
func TestPenRoundTrip(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	refs := []store.PenRef{
		{ReceivedAtMs: 0, ID: penID(1)},
		{ReceivedAtMs: 1000, ID: penID(2)},
		{ReceivedAtMs: 1000, ID: penID(3)},
		{ReceivedAtMs: 2000, ID: penID(4)},
		{ReceivedAtMs: 1 << 40, ID: penID(5)},
	}
	b := st.NewBatch()
	for i, r := range refs {
		if err := b.PutPen(r, []byte{byte('a' + i)}); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	_ = b.Set([]byte{store.PrefixPen, 1, 2}, []byte("not a pen key"), nil)
	_ = b.Set([]byte{store.PrefixPen + 1}, []byte("next family"), nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatalf("apply: %v", err)
	}
	for i, r := range refs {
		v, err := st.ReadPen(r)
		if err != nil || string(v) != string(rune('a'+i)) {
			t.Fatalf("ReadPen(%v) = %q, %v", r, v, err)
		}
		if k := r.Cursor(); !bytes.Equal(k, store.PenKey(r.ReceivedAtMs, r.ID)) || len(k) != 25 || k[0] != 'p' {
			t.Fatalf("cursor %x is not the frozen pen key", k)
		}
		if at, id, ok := store.ParsePenKey(r.Cursor()); !ok || at != r.ReceivedAtMs || id != r.ID {
			t.Fatalf("ParsePenKey(%x) = %d, %x, %v", r.Cursor(), at, id, ok)
		}
	}

	tests := []struct {
		name             string
		after            []byte
		sinceMs, untilMs int64
		want             string // the values, in scan order
	}{
		{"everything", nil, 0, store.PenOpen, "abcde"},
		{"negative since counts as 0", nil, math.MinInt64, store.PenOpen, "abcde"},
		{"since is inclusive", nil, 1000, store.PenOpen, "bcde"},
		{"until is inclusive", nil, 0, 1000, "abc"},
		{"one millisecond", nil, 1000, 1000, "bc"},
		{"until before since", nil, 2000, 1000, ""},
		{"until below 0 is empty", nil, 0, -1, ""},
		{"until at 0", nil, 0, 0, "a"},
		{"after a cursor, strictly", refs[1].Cursor(), 0, store.PenOpen, "cde"},
		{"after a cursor within a range", refs[0].Cursor(), 0, 1000, "bc"},
		{"a cursor behind since", refs[0].Cursor(), 2000, store.PenOpen, "de"},
		{"a cursor past until", refs[3].Cursor(), 0, 2000, ""},
		{"after the last row", refs[4].Cursor(), 0, store.PenOpen, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []byte
			err := st.ScanPen(tt.after, tt.sinceMs, tt.untilMs, func(r store.PenRow) bool {
				got = append(got, r.Value...)
				if i := int(r.Value[0] - 'a'); refs[i] != r.PenRef {
					t.Errorf("row %q has ref %v, want %v", r.Value, r.PenRef, refs[i])
				}
				return true
			})
			if err != nil || string(got) != tt.want {
				t.Fatalf("ScanPen = %q, %v; want %q", got, err, tt.want)
			}
		})
	}

	b = st.NewBatch()
	if err := b.DeletePen(refs[2]); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if v, err := st.ReadPen(refs[2]); err != nil || v != nil {
		t.Fatalf("deleted row reads %q, %v", v, err)
	}
	var got []byte
	_ = st.ScanPen(nil, 0, store.PenOpen, func(r store.PenRow) bool { got = append(got, r.Value...); return true })
	if string(got) != "abde" {
		t.Fatalf("after delete: %q, want abde", got)
	}
}

// TestLookupHookID: an index row that holds a seq gives it, no row is not
// found, and a row that holds no seq is ErrCorrupt but present (the
// operator API must tell a corrupt index from a missing hook).
func TestLookupHookID(t *testing.T) {
	tests := []struct {
		name        string
		row         []byte // nil: no index row
		wantSeq     uint64
		wantOK      bool
		wantCorrupt bool
	}{
		{"absent", nil, 0, false, false},
		{"a seq", store.U64(42), 42, true, false},
		{"seq 0", store.U64(0), 0, true, false},
		{"not a seq", []byte{1, 2, 3}, 0, true, true},
		{"empty", []byte{}, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			id := penID(9)
			if tt.row != nil {
				b := st.NewBatch()
				_ = b.Set(store.HookIDKey(id), tt.row, nil)
				if err := st.ApplySync(b); err != nil {
					t.Fatalf("apply: %v", err)
				}
			}
			seq, ok, err := st.LookupHookID(id)
			if seq != tt.wantSeq || ok != tt.wantOK || errors.Is(err, store.ErrCorrupt) != tt.wantCorrupt ||
				(err != nil && !tt.wantCorrupt) {
				t.Fatalf("LookupHookID = %d, %v, %v; want %d, %v, corrupt %v", seq, ok, err, tt.wantSeq, tt.wantOK, tt.wantCorrupt)
			}
		})
	}
}
