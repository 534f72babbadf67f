package store_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// TestMetaAccessorsRoundTrip writes every meta row through its Batch
// setter, reads it back through its Store reader after a reopen, and pins
// the raw key and value bytes: the rows are on disk, and data dirs written
// before the accessors existed must read the same.
func TestMetaAccessorsRoundTrip(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	tests := []struct {
		name    string
		set     func(b *store.Batch) error
		get     func(st *store.Store) (any, bool, error)
		want    any
		absent  any
		key     []byte
		rawWant []byte
	}{
		{
			name: "intake seq",
			set:  func(b *store.Batch) error { return b.SetIntakeSeq(987654) },
			get: func(st *store.Store) (any, bool, error) {
				v, ok, err := st.IntakeSeq()
				return v, ok, err
			},
			want: uint64(987654), absent: uint64(0),
			key: []byte("m:intake_seq"), rawWant: store.U64(987654),
		},
		{
			name: "intake offset",
			set:  func(b *store.Batch) error { return b.SetIntakeOffset(1234567) },
			get: func(st *store.Store) (any, bool, error) {
				v, ok, err := st.IntakeOffset()
				return v, ok, err
			},
			want: int64(1234567), absent: int64(0),
			key: []byte("m:intake_offset"), rawWant: store.U64(1234567),
		},
		{
			name: "intake offset zero is present",
			set:  func(b *store.Batch) error { return b.SetIntakeOffset(0) },
			get: func(st *store.Store) (any, bool, error) {
				v, ok, err := st.IntakeOffset()
				return v, ok, err
			},
			want: int64(0), absent: int64(0),
			key: []byte("m:intake_offset"), rawWant: store.U64(0),
		},
		{
			name: "intake partition",
			set:  func(b *store.Batch) error { return b.SetIntakePartition(3) },
			get: func(st *store.Store) (any, bool, error) {
				v, ok, err := st.IntakePartition()
				return v, ok, err
			},
			want: int32(3), absent: int32(0),
			key: []byte("m:intake_partition"), rawWant: store.U64(3),
		},
		{
			name: "intake node",
			set:  func(b *store.Batch) error { return b.SetIntakeNode("node-a") },
			get: func(st *store.Store) (any, bool, error) {
				v, ok, err := st.IntakeNode()
				return v, ok, err
			},
			want: "node-a", absent: "",
			key: []byte("m:intake_node"), rawWant: []byte("node-a"),
		},
		{
			name: "incarnation",
			set:  func(b *store.Batch) error { return b.SetIncarnation("5f0c", "backup-7") },
			get: func(st *store.Store) (any, bool, error) {
				v, err := st.Incarnation()
				return v, v != "0", err
			},
			want: "5f0c", absent: "0",
			key: []byte("m:incarnation"), rawWant: []byte("5f0c"),
		},
		{
			name: "incarnation from",
			set:  func(b *store.Batch) error { return b.SetIncarnation("5f0c", "backup-7") },
			get: func(st *store.Store) (any, bool, error) {
				v, err := st.IncarnationFrom()
				return v, v != "", err
			},
			want: "backup-7", absent: "",
			key: []byte("m:incarnation_from"), rawWant: []byte("backup-7"),
		},
		{
			name: "next seq",
			set:  func(b *store.Batch) error { return b.SetNextSeq(42) },
			get: func(st *store.Store) (any, bool, error) {
				v, err := st.NextSeq()
				return v, v != 1, err
			},
			want: uint64(42), absent: uint64(1),
			key: []byte("m:next_seq"), rawWant: store.U64(42),
		},
		{
			name: "probe",
			set:  func(b *store.Batch) error { return b.SetProbe(at) },
			get: func(st *store.Store) (any, bool, error) {
				v, ok, err := st.Probe()
				return v, ok, err
			},
			want: at.UnixNano(), absent: int64(0),
			key: []byte("z:probe"), rawWant: store.U64(uint64(at.UnixNano())),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			got, ok, err := tt.get(st)
			if err != nil || ok || got != tt.absent {
				t.Fatalf("fresh store: got %v, %v, %v; want %v, absent", got, ok, err, tt.absent)
			}
			b := st.NewBatch()
			if err := tt.set(b); err != nil {
				t.Fatalf("set: %v", err)
			}
			if err := st.ApplySync(b); err != nil {
				t.Fatalf("apply: %v", err)
			}
			st = reopenStore(t, st, nil)
			got, ok, err = tt.get(st)
			if err != nil || !ok || got != tt.want {
				t.Fatalf("after reopen: got %v, %v, %v; want %v", got, ok, err, tt.want)
			}
			raw, err := st.Get(tt.key)
			if err != nil || !bytes.Equal(raw, tt.rawWant) {
				t.Fatalf("raw %s = %x, %v; want %x (the on-disk format changed)", tt.key, raw, err, tt.rawWant)
			}
		})
	}
}

// TestNextSeqIsNeverBehindTheHooks: a marker behind the highest hook (an
// unsynced marker write lost in a crash) never hands out a used seq.
func TestNextSeqIsNeverBehindTheHooks(t *testing.T) {
	tests := []struct {
		name   string
		marker *uint64
		hooks  []uint64
		want   uint64
	}{
		{"empty store", nil, nil, 1},
		{"hooks only", nil, []uint64{1, 2, 7}, 8},
		{"marker ahead", ptr(uint64(20)), []uint64{1, 2, 7}, 20},
		{"marker behind", ptr(uint64(3)), []uint64{1, 2, 7}, 8},
		{"marker only", ptr(uint64(5)), nil, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			b := st.NewBatch()
			if tt.marker != nil {
				_ = b.SetNextSeq(*tt.marker)
			}
			for _, seq := range tt.hooks {
				_ = b.Set(store.HookKey(seq), []byte("x"), nil)
			}
			if err := st.ApplySync(b); err != nil {
				t.Fatalf("apply: %v", err)
			}
			got, err := st.NextSeq()
			if err != nil || got != tt.want {
				t.Fatalf("NextSeq = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestNextSeqRefusesACorruptMarker(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	b := st.NewBatch()
	_ = b.Set(store.KeyNextSeq, []byte{1, 2, 3}, nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if _, err := st.NextSeq(); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("NextSeq on a 3-byte marker: err %v, want ErrCorrupt", err)
	}
}

// TestMetaSettersOnADeadBatch: a setter on a batch of a closed store
// reports the batch's error instead of panicking.
func TestMetaSettersOnADeadBatch(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	_ = st.Close()
	b := st.NewBatch()
	for i, set := range []func() error{
		func() error { return b.SetNextSeq(1) },
		func() error { return b.SetIntakeSeq(1) },
		func() error { return b.SetIntakeOffset(1) },
		func() error { return b.SetIntakePartition(1) },
		func() error { return b.SetIntakeNode("n") },
		func() error { return b.SetIncarnation("i", "f") },
		func() error { return b.SetProbe(time.Now()) },
	} {
		if err := set(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("setter %d: err %v, want ErrClosed", i, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }
