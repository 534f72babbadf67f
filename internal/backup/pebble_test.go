package backup_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/store"
)

var _ backup.Checkpointer = (*store.Store)(nil)

// pebbleCheckpointer is the backup primitive of ARCHITECTURE.md section 3
// over a raw Pebble DB.
type pebbleCheckpointer struct {
	db *pebble.DB
	id string
}

func (p pebbleCheckpointer) ID() string { return p.id }
func (p pebbleCheckpointer) Checkpoint(dir string) error {
	return p.db.Checkpoint(dir, pebble.WithFlushedWAL())
}

func pebbleKey(i int) []byte { return fmt.Appendf(nil, "h%08d", i) }
func pebbleVal(i int) []byte { return fmt.Appendf(nil, "hook body %d %x", i, i*7919) }

func writeKeys(t *testing.T, db *pebble.DB, from, to int) {
	t.Helper()
	b := db.NewBatch()
	for i := from; i < to; i++ {
		if err := b.Set(pebbleKey(i), pebbleVal(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func checkKeys(t *testing.T, db *pebble.DB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		v, c, err := db.Get(pebbleKey(i))
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if string(v) != string(pebbleVal(i)) {
			t.Fatalf("key %d = %q, want %q", i, v, pebbleVal(i))
		}
		_ = c.Close()
	}
	if _, _, err := db.Get(pebbleKey(n)); !errors.Is(err, pebble.ErrNotFound) {
		t.Fatalf("key %d present, want only %d keys", n, n)
	}
}

// TestBackup_Pebble backs up a real Pebble DB (tables flushed to sstables
// plus a tail only in the WAL), twice, restores the second backup into
// another directory and reads every key back through Pebble.
func TestBackup_Pebble(t *testing.T) {
	ctx := context.Background()
	db, err := pebble.Open(filepath.Join(t.TempDir(), "db"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	writeKeys(t, db, 0, 2000)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	writeKeys(t, db, 2000, 2500) // in the memtable and WAL only

	loc := spy(locations[0].new(t))
	b, _ := newBackuper(t, loc, nil, pebbleCheckpointer{db: db, id: "pebble-store"}, nil)
	m1 := run(t, b)

	writeKeys(t, db, 2500, 4000)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	writeKeys(t, db, 4000, 4100)
	m2 := run(t, b)

	// The first flush's sstable is in both backups and was uploaded once.
	shared := 0
	in1 := map[string]bool{}
	for _, f := range m1.Files {
		if f.Shared {
			in1[f.SHA256] = true
		}
	}
	for _, f := range m2.Files {
		if f.Shared && in1[f.SHA256] {
			shared++
			if n := loc.putCount(testPrefix + "/shared/" + f.SHA256); n != 1 {
				t.Errorf("%s uploaded %d times", f.Name, n)
			}
		}
	}
	if shared == 0 {
		t.Errorf("no sstable shared between the two backups: %+v / %+v", m1.Files, m2.Files)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	got, err := backup.Restore(ctx, loc, testPrefix, dir, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != m2.ID {
		t.Fatalf("restored %s, want %s", got.ID, m2.ID)
	}
	// The marker stays in the directory until boot removes it: Pebble must
	// open the directory with it present.
	rdb, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatalf("open restored db: %v", err)
	}
	defer rdb.Close()
	checkKeys(t, rdb, 4100)

	rep, err := backup.Verify(ctx, loc, testPrefix, testKey)
	if err != nil {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
}

// TestBackup_StoreStore runs the same round trip through *store.Store, the
// Checkpointer the node wires in.
func TestBackup_StoreStore(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	s, err := store.Open(store.Options{Dir: filepath.Join(t.TempDir(), "store"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	batch := s.NewBatch()
	if err := batch.Set([]byte("h-test-key"), []byte("acked hook"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplySync(batch); err != nil {
		t.Fatal(err)
	}

	loc := locations[1].new(t)
	b, _ := newBackuper(t, loc, nil, s, nil)
	m := run(t, b)
	if m.StoreID != s.ID() {
		t.Fatalf("manifest store id %q, want %q", m.StoreID, s.ID())
	}

	dir := filepath.Join(t.TempDir(), "data", "store")
	if _, _, err := backup.RestoreFirst(ctx, []backup.Store{loc}, testPrefix, dir, testKey); err != nil {
		t.Fatal(err)
	}
	r, err := store.Open(store.Options{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatalf("open restored store: %v", err)
	}
	defer r.Close()
	if r.ID() != s.ID() {
		t.Fatalf("restored store id %q, want %q", r.ID(), s.ID())
	}
	v, err := r.Get([]byte("h-test-key"))
	if err != nil || string(v) != "acked hook" {
		t.Fatalf("restored Get = %q, %v", v, err)
	}
}
