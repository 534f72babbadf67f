package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/ankusa/ankusa/internal/backup"
)

var testKey = []byte("0123456789abcdef-test-signing-key")

// location is one kind of backup location the behaviour tests run on.
type location struct {
	name string
	new  func(t *testing.T) backup.Store
}

var locations = []location{
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
}

// fakeStore is a Checkpointer whose checkpoint is a set of named files.
type fakeStore struct {
	mu    sync.Mutex
	id    string
	files map[string]string
}

func newFakeStore(id string, files map[string]string) *fakeStore {
	return &fakeStore{id: id, files: files}
}

func (f *fakeStore) ID() string { return f.id }

func (f *fakeStore) set(files map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files = files
}

func (f *fakeStore) snapshot() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.files))
	for k, v := range f.files {
		out[k] = v
	}
	return out
}

func (f *fakeStore) Checkpoint(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("checkpoint dir %s exists", dir)
	}
	for name, content := range f.snapshot() {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return os.MkdirAll(dir, 0o755)
}

// spyStore wraps a Store to count and fail calls.
type spyStore struct {
	backup.Store
	mu      sync.Mutex
	puts    map[string]int
	order   []string // keys Put, in order
	failPut func(key string) error
	failGet func(key string) error
}

func spy(s backup.Store) *spyStore { return &spyStore{Store: s, puts: map[string]int{}} }

func (s *spyStore) Put(ctx context.Context, key string, r io.Reader) error {
	s.mu.Lock()
	fail := s.failPut
	s.mu.Unlock()
	if fail != nil {
		if err := fail(key); err != nil {
			return err
		}
	}
	if err := s.Store.Put(ctx, key, r); err != nil {
		return err
	}
	s.mu.Lock()
	s.puts[key]++
	s.order = append(s.order, key)
	s.mu.Unlock()
	return nil
}

func (s *spyStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if s.failGet != nil {
		if err := s.failGet(key); err != nil {
			return nil, err
		}
	}
	return s.Store.Get(ctx, key)
}

func (s *spyStore) List(ctx context.Context, prefix string) ([]string, error) {
	if s.failGet != nil {
		if err := s.failGet(prefix); err != nil {
			return nil, err
		}
	}
	return s.Store.List(ctx, prefix)
}

func (s *spyStore) Exists(ctx context.Context, key string) (bool, error) {
	if s.failGet != nil {
		if err := s.failGet(key); err != nil {
			return false, err
		}
	}
	return s.Store.Exists(ctx, key)
}

func (s *spyStore) putCount(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts[key]
}

var errUnreachable = errors.New("injected: location unreachable")

// clock is a Now that advances one second per call.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

type runRecord struct {
	mu      sync.Mutex
	results []string
}

func (r *runRecord) onRun(result string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results = append(r.results, result)
}

func (r *runRecord) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.results) == 0 {
		return ""
	}
	return r.results[len(r.results)-1]
}

const testPrefix = "ankusa/node-a"

func newBackuper(t *testing.T, primary, secondary backup.Store, st backup.Checkpointer, mod func(*backup.Options)) (*backup.Backuper, *runRecord) {
	t.Helper()
	rec := &runRecord{}
	opts := backup.Options{
		Primary:      primary,
		Secondary:    secondary,
		Prefix:       testPrefix,
		SigningKey:   testKey,
		Keep:         3,
		Store:        st,
		IntakeOffset: func() int64 { return 42 },
		WriterNonce:  "writer-1",
		TempDir:      t.TempDir(),
		Now:          newClock().now,
		OnRun:        rec.onRun,
		Logger:       slog.New(slog.DiscardHandler),
	}
	if mod != nil {
		mod(&opts)
	}
	b, err := backup.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return b, rec
}

func run(t *testing.T, b *backup.Backuper) backup.Manifest {
	t.Helper()
	m, err := b.Run(context.Background())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return m
}

// readDir returns every file under dir (slash names) except the marker.
func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == backup.MarkerName {
			return nil
		}
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("restored %d files %v, want %d %v", len(got), keysOf(got), len(want), keysOf(want))
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || !bytes.Equal([]byte(g), []byte(w)) {
			t.Fatalf("restored %s = %q (present %v), want %q", name, g, ok, w)
		}
	}
}

func keysOf(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func listKeys(t *testing.T, s backup.Store, prefix string) []string {
	t.Helper()
	keys, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func getString(t *testing.T, s backup.Store, key string) string {
	t.Helper()
	r, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func putString(t *testing.T, s backup.Store, key, val string) {
	t.Helper()
	if err := s.Put(context.Background(), key, strings.NewReader(val)); err != nil {
		t.Fatal(err)
	}
}
