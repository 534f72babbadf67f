package backup_test

// A restore carries the intake meta rows of a wal.type: dual store
// (m:intake_offset, m:intake_seq, m:intake_node, m:intake_partition), and
// the manifest's intake_offset never runs ahead of the checkpointed store.

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// The intake meta keys (internal/store/keys.go).
var (
	keyIntakeOffset    = store.KeyIntakeOffset // "m:intake_offset"
	keyIntakeSeq       = store.KeyIntakeSeq    // "m:intake_seq"
	keyIntakeNode      = store.KeyIntakeNode
	keyIntakePartition = store.KeyIntakePartition
)

// metaLocations are the locations the meta tests run on: the file store,
// the blob adapter over memblob, and s3:// over gofakes3 (an in-process
// S3-compatible fake: no real S3 can be reached here).
var metaLocations = []location{
	{"file", func(t *testing.T) backup.Store {
		b, err := backup.OpenBucket(context.Background(), "file://"+t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"memblob", func(t *testing.T) backup.Store {
		b := memblob.OpenBucket(nil)
		t.Cleanup(func() { _ = b.Close() })
		return backup.NewBlobStore(b)
	}},
	{"s3-gofakes3", func(t *testing.T) backup.Store { return newFakeS3(t).store(t) }},
}

func setRows(t *testing.T, st *store.Store, rows map[string][]byte) {
	t.Helper()
	b := st.NewBatch()
	defer b.Close()
	for k, v := range rows {
		if err := b.Set([]byte(k), v, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
}

// intakeOffsetRow is Options.IntakeOffset as internal/app wires it: the
// m:intake_offset row, -1 if none.
func intakeOffsetRow(t *testing.T, st *store.Store) func() int64 {
	return func() int64 {
		v, err := st.Get(keyIntakeOffset)
		if err != nil {
			t.Errorf("read m:intake_offset: %v", err)
			return -1
		}
		if n, ok := store.ParseU64(v); ok {
			return int64(n)
		}
		return -1
	}
}

func offsetOf(t *testing.T, st *store.Store) int64 {
	t.Helper()
	v, err := st.Get(keyIntakeOffset)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := store.ParseU64(v)
	if !ok {
		t.Fatalf("m:intake_offset = %q, not a u64", v)
	}
	return int64(n)
}

// restoreAndOpen restores LATEST into a fresh directory and opens it with
// store.Open.
func restoreAndOpen(t *testing.T, loc backup.Store) (*store.Store, backup.Manifest) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data", "store")
	m, err := backup.Restore(context.Background(), loc, testPrefix, dir, testKey)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	rs, err := store.Open(store.Options{Dir: dir, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatalf("open restored store: %v", err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	return rs, m
}

// TestRestore_CarriesIntakeMeta: the four intake meta rows come back from
// a restore byte for byte, and the manifest's intake_offset is the row's.
func TestRestore_CarriesIntakeMeta(t *testing.T) {
	for _, loc := range metaLocations {
		t.Run(loc.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			rows := map[string][]byte{
				string(keyIntakeOffset):    store.U64(1234567),
				string(keyIntakeSeq):       store.U64(987654),
				string(keyIntakeNode):      []byte("node-a"),
				string(keyIntakePartition): store.U64(3),
				"h-acked":                  []byte("an acked hook"),
			}
			setRows(t, st, rows)

			l := loc.new(t)
			b, _ := newBackuper(t, l, nil, st, func(o *backup.Options) { o.IntakeOffset = intakeOffsetRow(t, st) })
			m := run(t, b)
			if m.IntakeOffset != 1234567 {
				t.Fatalf("manifest intake_offset = %d, want 1234567", m.IntakeOffset)
			}

			rs, rm := restoreAndOpen(t, l)
			if rm.ID != m.ID || rm.IntakeOffset != m.IntakeOffset {
				t.Fatalf("restored manifest %s offset %d, want %s %d", rm.ID, rm.IntakeOffset, m.ID, m.IntakeOffset)
			}
			if rs.ID() != st.ID() {
				t.Fatalf("restored store id %q, want %q", rs.ID(), st.ID())
			}
			for k, want := range rows {
				got, err := rs.Get([]byte(k))
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("restored %s = %q, %v; want %q", k, got, err, want)
				}
			}
		})
	}
}

// TestRestore_NoIntakeMeta: a store without intake rows (wal.type: local)
// records -1 and restores without inventing any.
func TestRestore_NoIntakeMeta(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	setRows(t, st, map[string][]byte{"h-acked": []byte("x")})
	l := metaLocations[0].new(t)
	b, _ := newBackuper(t, l, nil, st, func(o *backup.Options) { o.IntakeOffset = intakeOffsetRow(t, st) })
	if m := run(t, b); m.IntakeOffset != -1 {
		t.Fatalf("manifest intake_offset = %d, want -1", m.IntakeOffset)
	}
	rs, _ := restoreAndOpen(t, l)
	for _, k := range [][]byte{keyIntakeOffset, keyIntakeSeq, keyIntakeNode, keyIntakePartition} {
		if v, err := rs.Get(k); err != nil || v != nil {
			t.Errorf("restored %s = %q, %v; want absent", k, v, err)
		}
	}
}

// offsetWriter is the store being backed up, with the intake writer racing
// the checkpoint: it moves m:intake_offset to `to` just before (before=true)
// or just after the checkpoint is taken.
type offsetWriter struct {
	*store.Store
	t      *testing.T
	to     uint64
	before bool
	calls  int
}

func (w *offsetWriter) Checkpoint(dir string) error {
	w.calls++
	if w.before {
		setRows(w.t, w.Store, map[string][]byte{string(keyIntakeOffset): store.U64(w.to)})
	}
	if err := w.Store.Checkpoint(dir); err != nil {
		return err
	}
	if !w.before {
		setRows(w.t, w.Store, map[string][]byte{string(keyIntakeOffset): store.U64(w.to)})
	}
	return nil
}

// TestBackup_IntakeOffsetNeverAheadOfCheckpoint: the offset the manifest
// records is read before the checkpoint, so it never runs ahead of the
// checkpointed store.
//
//   - offset 10, backup starts, the checkpoint is taken, then the writer
//     moves the row to 20: manifest 10, restored store 10 (the later write
//     is in neither).
//   - offset 10, backup starts and reads it, the writer moves the row to 20,
//     then the checkpoint is taken: manifest 10, restored store 20. The
//     manifest is behind the store, which replay tolerates (it re-applies).
func TestBackup_IntakeOffsetNeverAheadOfCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name         string
		before       bool
		wantRestored int64
	}{
		{"write after the checkpoint", false, 10},
		{"write between the read and the checkpoint", true, 20},
	} {
		for _, loc := range metaLocations {
			t.Run(tc.name+"/"+loc.name, func(t *testing.T) {
				st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
				setRows(t, st, map[string][]byte{
					string(keyIntakeOffset): store.U64(10),
					string(keyIntakeSeq):    store.U64(10),
					string(keyIntakeNode):   []byte("node-a"),
				})
				w := &offsetWriter{Store: st, t: t, to: 20, before: tc.before}
				l := loc.new(t)
				b, _ := newBackuper(t, l, nil, w, func(o *backup.Options) { o.IntakeOffset = intakeOffsetRow(t, st) })
				m := run(t, b)
				if w.calls != 1 {
					t.Fatalf("Checkpoint called %d times", w.calls)
				}
				if got := offsetOf(t, st); got != 20 {
					t.Fatalf("live m:intake_offset = %d, want 20 (the racing write happened)", got)
				}
				if m.IntakeOffset != 10 {
					t.Fatalf("manifest intake_offset = %d, want 10 (read before the checkpoint)", m.IntakeOffset)
				}

				rs, rm := restoreAndOpen(t, l)
				restored := offsetOf(t, rs)
				if restored != tc.wantRestored {
					t.Fatalf("restored m:intake_offset = %d, want %d", restored, tc.wantRestored)
				}
				if rm.IntakeOffset > restored {
					t.Fatalf("manifest intake_offset %d is ahead of the restored store's %d", rm.IntakeOffset, restored)
				}
				if v, err := rs.Get(keyIntakeNode); err != nil || string(v) != "node-a" {
					t.Fatalf("restored m:intake_node = %q, %v", v, err)
				}
			})
		}
	}
}
