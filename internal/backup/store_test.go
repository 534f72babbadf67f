package backup_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/backup/backuptest"
)

// S3 cannot be reached from the test machines, so the blob adapter (the
// code s3:// runs through) is exercised over gocloud's in-memory driver
// instead. (gocloud's fileblob would fail the contract: it cannot hold both
// "x" and "x/y", and reports a key below an object as an unknown error.)
func TestStore_Contract(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		backuptest.Run(t, func(t *testing.T) backup.Store {
			b, err := backup.OpenBucket(context.Background(), "file://"+t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return b
		})
	})
	t.Run("blob/memblob", func(t *testing.T) {
		backuptest.Run(t, func(t *testing.T) backup.Store {
			b := memblob.OpenBucket(nil)
			t.Cleanup(func() { _ = b.Close() })
			return backup.NewBlobStore(b)
		})
	})
}

type syncCall struct {
	path string
	dir  bool
}

type syncSpy struct {
	mu    sync.Mutex
	calls []syncCall
	fail  func(c syncCall) error
}

func (s *syncSpy) sync(path string, dir bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := syncCall{path, dir}
	s.calls = append(s.calls, c)
	if s.fail != nil {
		return s.fail(c)
	}
	return nil
}

// TestFileStore_Fsync checks the durability protocol of the file:// store:
// the file is fsynced before the rename and its directory after it, every
// directory Put creates is fsynced into its parent, and a failed fsync
// fails the Put and leaves no object and no temporary file.
func TestFileStore_Fsync(t *testing.T) {
	ctx := context.Background()

	t.Run("Put syncs file then dir", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "loc")
		spy := &syncSpy{}
		s, err := backup.NewFileStoreWithSync(root, spy.sync)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "p/backups/x/manifest.json", strings.NewReader("m")); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "p", "backups", "x")
		// New directories root, p, backups, x: each fsynced into its parent.
		for _, d := range []string{filepath.Dir(root), root, filepath.Join(root, "p"), filepath.Join(root, "p", "backups")} {
			if !hasCall(spy.calls, syncCall{d, true}) {
				t.Errorf("directory %s was not fsynced after creating a child; calls %v", d, spy.calls)
			}
		}
		n := len(spy.calls)
		if n < 2 || spy.calls[n-2].dir || !strings.HasPrefix(filepath.Base(spy.calls[n-2].path), ".tmp-") ||
			spy.calls[n-1] != (syncCall{dir, true}) {
			t.Fatalf("want fsync(temp file) then fsync(%s) last, got %v", dir, spy.calls)
		}

		// Overwriting an existing key in an existing dir: exactly file + dir.
		spy.calls = nil
		if err := s.Put(ctx, "p/backups/x/manifest.json", strings.NewReader("m2")); err != nil {
			t.Fatal(err)
		}
		if len(spy.calls) != 2 || spy.calls[0].dir || spy.calls[1] != (syncCall{dir, true}) {
			t.Fatalf("overwrite fsyncs = %v, want [temp file, dir]", spy.calls)
		}
	})

	for _, tc := range []struct {
		name    string
		fail    func(c syncCall) bool
		visible bool // the object is visible after the failure (rename done)
	}{
		{"file fsync fails", func(c syncCall) bool { return !c.dir }, false},
		{"dir fsync after rename fails", func(c syncCall) bool { return c.dir && filepath.Base(c.path) == "leaf" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			spy := &syncSpy{}
			s, err := backup.NewFileStoreWithSync(root, spy.sync)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, "leaf"), 0o755); err != nil {
				t.Fatal(err)
			}
			boom := errors.New("fsync: injected")
			spy.fail = func(c syncCall) error {
				if tc.fail(c) {
					return boom
				}
				return nil
			}
			err = s.Put(ctx, "leaf/obj", strings.NewReader(strings.Repeat("x", 1<<20)))
			if !errors.Is(err, boom) {
				t.Fatalf("Put = %v, want the injected fsync error", err)
			}
			entries, _ := os.ReadDir(filepath.Join(root, "leaf"))
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".tmp-") {
					t.Errorf("temporary file %s left behind", e.Name())
				}
			}
			ok, _ := s.Exists(ctx, "leaf/obj")
			if ok != tc.visible {
				t.Errorf("Exists after failed Put = %v, want %v", ok, tc.visible)
			}
		})
	}

	t.Run("leftover temp files are invisible", func(t *testing.T) {
		root := t.TempDir()
		s, err := backup.NewFileStore(root)
		if err != nil {
			t.Fatal(err)
		}
		// What a crash between create and rename leaves.
		if err := os.MkdirAll(filepath.Join(root, "p"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "p", ".tmp-123"), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := s.List(ctx, "")
		if err != nil || len(keys) != 0 {
			t.Fatalf("List = %q, %v; want empty", keys, err)
		}
	})
}

func hasCall(calls []syncCall, c syncCall) bool {
	for _, x := range calls {
		if x == c {
			return true
		}
	}
	return false
}

func TestOpenBucket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		url    string
		wantOK bool
	}{
		{"file://" + dir, true},
		{"file://localhost" + dir, true},
		{"s3://ankusa-backups?region=us-east-1", true}, // opens without contacting S3
		{"file://host" + dir, false},
		{"file://" + dir + "?create_dir=true", false},
		{"file:relative/dir", false},
		{"mem://", false},
		{"gs://bucket", false},
		{"::not a url", false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			b, err := backup.OpenBucket(ctx, tc.url)
			if (err == nil) != tc.wantOK {
				t.Fatalf("OpenBucket(%q) = %v, want ok=%v", tc.url, err, tc.wantOK)
			}
			if b != nil {
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}

	t.Run("redacts passwords", func(t *testing.T) {
		b, err := backup.OpenBucket(ctx, "s3://user:hunter2@bucket?region=us-east-1")
		if err != nil {
			t.Skipf("s3 open: %v", err)
		}
		defer b.Close()
		if strings.Contains(b.String(), "hunter2") {
			t.Fatalf("String() = %q leaks the password", b.String())
		}
	})
}
