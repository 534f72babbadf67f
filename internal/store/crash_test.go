package store_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/testutil"
)

// TestPowerCutAfterFirstOpen cuts the power right after the first boot's
// first synced write, on a filesystem that keeps only what was fsynced
// (directory entries included). Pebble syncs the files inside its directory
// but not the directory's entry in its parent; Open must sync every parent
// it created (mkdirAllSynced), or the whole store, acked rows included,
// vanishes with the cut.
func TestPowerCutAfterFirstOpen(t *testing.T) {
	tests := []struct {
		name     string
		existing string // created and synced before Open; "" for none
		dir      string
	}{
		{"deeply nested, nothing exists", "", "/data/ankusa/node-1/store"},
		{"directly under the root", "", "/store"},
		{"parent exists, leaf missing", "/data", "/data/store"},
		{"some parents exist", "/srv", "/srv/ankusa/data/store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			if tt.existing != "" {
				mkdirAllDurably(t, fs, tt.existing)
			}
			st := testutil.OpenStore(t, tt.dir, fs)
			id := st.ID()
			storePut(t, st, "acked", "hook")

			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			if err := st.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}

			after := testutil.OpenStore(t, tt.dir, crashed)
			if after.ID() != id {
				t.Fatalf("store id after the power cut = %q, want %q: the store directory was lost", after.ID(), id)
			}
			if got := storeMustGet(t, after, "acked"); got != "hook" {
				t.Fatalf("acked row after the power cut = %q", got)
			}
		})
	}

	// Control: the crash model above is strict enough to catch a missing
	// directory sync. Create the directory the way plain MkdirAll does (no
	// parent fsync); Open then finds it present and syncs nothing, and the
	// cut loses the store. If this ever stops failing, the cases above no
	// longer prove that Open syncs parents, and need another crash model.
	t.Run("control: unsynced parent loses the store", func(t *testing.T) {
		const dir = "/data/ankusa/store"
		fs := vfs.NewCrashableMem()
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		st := testutil.OpenStore(t, dir, fs)
		id := st.ID()
		storePut(t, st, "acked", "hook")
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		after := testutil.OpenStore(t, dir, crashed)
		v, err := after.Get([]byte("acked"))
		if err != nil {
			t.Fatal(err)
		}
		if after.ID() == id || v != nil {
			t.Fatalf("store survived a cut although its parents were never synced (id kept: %v, row: %q); "+
				"the crash model no longer detects a missing directory sync", after.ID() == id, v)
		}
	})
}

// mkdirAllDurably creates dir and syncs every directory on its path, so that
// it survives a crash clone.
func mkdirAllDurably(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = fs.PathDir(d) {
		p := fs.PathDir(d)
		f, err := fs.OpenDir(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		if p == d || p == "/" {
			break
		}
	}
}
