// Package backuptest is the contract suite every backup.Store must pass:
// Run it against each implementation, like Litestream's
// RunWithReplicaClient.
package backuptest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/backup"
)

// Factory returns an empty store; it is called once per subtest.
type Factory func(t *testing.T) backup.Store

// Run runs the contract suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	ctx := context.Background()

	put := func(t *testing.T, s backup.Store, key, val string) {
		t.Helper()
		if err := s.Put(ctx, key, strings.NewReader(val)); err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
	}
	get := func(t *testing.T, s backup.Store, key string) string {
		t.Helper()
		r, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("Get(%q) read: %v", key, err)
		}
		return string(b)
	}
	list := func(t *testing.T, s backup.Store, prefix string) []string {
		t.Helper()
		keys, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		return keys
	}

	t.Run("PutGet", func(t *testing.T) {
		big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
		for _, tc := range []struct{ name, key, val string }{
			{"small", "a", "hello"},
			{"empty", "p/empty", ""},
			{"nested", "p/backups/01J/files/000001.sst", "table"},
			{"large", "big/object", big},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t)
				put(t, s, tc.key, tc.val)
				if got := get(t, s, tc.key); got != tc.val {
					t.Fatalf("Get = %d bytes, want %d", len(got), len(tc.val))
				}
				ok, err := s.Exists(ctx, tc.key)
				if err != nil || !ok {
					t.Fatalf("Exists = %v, %v; want true", ok, err)
				}
			})
		}
	})

	t.Run("Overwrite", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "p/LATEST", "one")
		put(t, s, "p/LATEST", "two-longer")
		put(t, s, "p/LATEST", "3")
		if got := get(t, s, "p/LATEST"); got != "3" {
			t.Fatalf("Get = %q, want %q", got, "3")
		}
		if got := list(t, s, ""); !slices.Equal(got, []string{"p/LATEST"}) {
			t.Fatalf("List = %q, want only p/LATEST", got)
		}
	})

	t.Run("Missing", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "x/y", "v")
		for _, key := range []string{"nope", "x/z", "x/y/z", "x"} {
			if _, err := s.Get(ctx, key); !errors.Is(err, backup.ErrNotFound) {
				t.Errorf("Get(%q) = %v, want ErrNotFound", key, err)
			}
			if ok, err := s.Exists(ctx, key); ok || err != nil {
				t.Errorf("Exists(%q) = %v, %v; want false, nil", key, ok, err)
			}
			if err := s.Delete(ctx, key); err != nil {
				t.Errorf("Delete(%q) = %v, want nil", key, err)
			}
		}
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "p/backups/1/manifest.json", "m")
		put(t, s, "p/backups/1/files/a", "a")
		put(t, s, "p/backups/2/manifest.json", "m2")
		for _, k := range []string{"p/backups/1/manifest.json", "p/backups/1/files/a"} {
			if err := s.Delete(ctx, k); err != nil {
				t.Fatalf("Delete(%q): %v", k, err)
			}
			if err := s.Delete(ctx, k); err != nil {
				t.Fatalf("second Delete(%q): %v", k, err)
			}
		}
		if got := list(t, s, "p/"); !slices.Equal(got, []string{"p/backups/2/manifest.json"}) {
			t.Fatalf("List = %q", got)
		}
		// A key under a deleted "directory" can be written again.
		put(t, s, "p/backups/1/files/b", "b")
		if got := get(t, s, "p/backups/1/files/b"); got != "b" {
			t.Fatalf("Get = %q", got)
		}
	})

	t.Run("List", func(t *testing.T) {
		s := newStore(t)
		keys := []string{ // sorted: '-' sorts before '/'
			"p-other/x",
			"p/LATEST",
			"p/backups/01A/files/MANIFEST-000001",
			"p/backups/01A/manifest.json",
			"p/backups/01B/manifest.json",
			"p/shared/aa",
			"p/shared/ab",
			"q/y",
		}
		for _, k := range keys {
			put(t, s, k, k)
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", keys},
			{"p/", keys[1:7]},
			{"p", keys[:7]},
			{"p/backups/", keys[2:5]},
			{"p/backups/01A/", keys[2:4]},
			{"p/shared/a", keys[5:7]},
			{"p/shared/aa", keys[5:6]},
			{"p/nothing/", nil},
			{"zzz", nil},
		} {
			got := list(t, s, tc.prefix)
			if len(got) == 0 && len(tc.want) == 0 {
				continue
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
		}
	})

	t.Run("InvalidKeys", func(t *testing.T) {
		s := newStore(t)
		for _, key := range []string{"", "/abs", "a//b", "a/", "a/../b", "./a", "a\\b", "a/.tmp-x"} {
			if err := s.Put(ctx, key, strings.NewReader("v")); !errors.Is(err, backup.ErrInvalidKey) {
				t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, backup.ErrInvalidKey) {
				t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
			}
		}
		if got := list(t, s, ""); len(got) != 0 {
			t.Fatalf("List after refused Puts = %q", got)
		}
	})

	t.Run("FailedPutLeavesNothing", func(t *testing.T) {
		boom := errors.New("reader failed")
		for _, tc := range []struct {
			name     string
			previous string // "" = no previous object
			r        func(cancel context.CancelFunc) io.Reader
		}{
			{"reader error, new key", "", func(context.CancelFunc) io.Reader {
				return io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("x"), 100<<10)), errReader{boom})
			}},
			{"reader error, existing key", "old", func(context.CancelFunc) io.Reader {
				return io.MultiReader(strings.NewReader("partial"), errReader{boom})
			}},
			{"cancelled mid-copy", "old", func(cancel context.CancelFunc) io.Reader {
				return io.MultiReader(strings.NewReader("partial"), cancelReader{cancel}, strings.NewReader("more"))
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t)
				if tc.previous != "" {
					put(t, s, "p/LATEST", tc.previous)
				}
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				if err := s.Put(cctx, "p/LATEST", tc.r(cancel)); err == nil {
					t.Fatal("Put succeeded, want an error")
				}
				if tc.previous == "" {
					if ok, err := s.Exists(ctx, "p/LATEST"); ok || err != nil {
						t.Fatalf("Exists after failed Put = %v, %v; want false", ok, err)
					}
					if got := list(t, s, ""); len(got) != 0 {
						t.Fatalf("List after failed Put = %q, want empty", got)
					}
					return
				}
				if got := get(t, s, "p/LATEST"); got != tc.previous {
					t.Fatalf("Get after failed Put = %q, want the previous %q", got, tc.previous)
				}
				if got := list(t, s, ""); !slices.Equal(got, []string{"p/LATEST"}) {
					t.Fatalf("List after failed Put = %q", got)
				}
			})
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "k", "v")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Put(cctx, "k2", strings.NewReader("v")); !errors.Is(err, context.Canceled) {
			t.Errorf("Put = %v, want context.Canceled", err)
		}
		if ok, _ := s.Exists(ctx, "k2"); ok {
			t.Error("a Put with a cancelled context stored its object")
		}
		if _, err := s.List(cctx, ""); !errors.Is(err, context.Canceled) {
			t.Errorf("List = %v, want context.Canceled", err)
		}
	})
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// cancelReader cancels the Put's context when the copy reaches it.
type cancelReader struct{ cancel context.CancelFunc }

func (r cancelReader) Read([]byte) (int, error) { r.cancel(); return 0, io.EOF }
