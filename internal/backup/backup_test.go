package backup_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/ankusa/ankusa/internal/backup"
)

var gen1 = map[string]string{
	"000001.sst":          "table one",
	"000002.sst":          "table two, a little longer",
	"MANIFEST-000003":     "pebble manifest v1",
	"OPTIONS-000004":      "[Options]",
	"000005.log":          "",
	"marker.format.0001":  "x",
	"sub/dir/nested.file": "nested",
}

func TestBackup_RoundTrip(t *testing.T) {
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			ctx := context.Background()
			st := newFakeStore("store-a", gen1)
			primary := loc.new(t)
			b, rec := newBackuper(t, primary, nil, st, nil)
			m := run(t, b)
			if rec.last() != backup.ResultOK {
				t.Fatalf("OnRun result %q, want ok", rec.last())
			}
			if _, err := ulid.ParseStrict(m.ID); err != nil {
				t.Fatalf("id %q: %v", m.ID, err)
			}
			if m.StoreID != "store-a" || m.WriterNonce != "writer-1" || m.IntakeOffset != 42 || m.Version != backup.ManifestVersion {
				t.Fatalf("manifest = %+v", m)
			}
			if len(m.Files) != len(gen1) {
				t.Fatalf("manifest has %d files, want %d", len(m.Files), len(gen1))
			}
			for _, f := range m.Files {
				if f.Shared != strings.HasSuffix(f.Name, ".sst") || f.Size != int64(len(gen1[f.Name])) {
					t.Errorf("file %+v", f)
				}
			}
			if got := getString(t, primary, testPrefix+"/LATEST"); got != m.ID {
				t.Fatalf("LATEST = %q, want %q", got, m.ID)
			}

			dir := filepath.Join(t.TempDir(), "data", "store")
			got, err := backup.Restore(ctx, primary, testPrefix, dir, testKey)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if got.ID != m.ID || got.IntakeOffset != 42 || got.StoreID != "store-a" {
				t.Fatalf("Restore manifest = %+v, want %+v", got, m)
			}
			sameFiles(t, readDir(t, dir), gen1)
			id, ok, err := backup.ReadMarker(dir)
			if err != nil || !ok || id != m.ID {
				t.Fatalf("ReadMarker = %q, %v, %v; want %q", id, ok, err, m.ID)
			}
			if _, err := os.Stat(dir + ".restoring"); !os.IsNotExist(err) {
				t.Fatalf("restoring dir left behind: %v", err)
			}
			if err := backup.RemoveMarker(dir); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := backup.ReadMarker(dir); ok {
				t.Fatal("marker still present after RemoveMarker")
			}
		})
	}
}

func TestBackup_SharedUploadedOnce(t *testing.T) {
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			primary := spy(loc.new(t))
			st := newFakeStore("store-a", gen1)
			b, _ := newBackuper(t, primary, nil, st, nil)
			m1 := run(t, b)

			gen2 := map[string]string{
				"000001.sst":      gen1["000001.sst"],
				"000002.sst":      gen1["000002.sst"],
				"000006.sst":      "table six",
				"MANIFEST-000003": "pebble manifest v2",
				"OPTIONS-000004":  gen1["OPTIONS-000004"],
			}
			st.set(gen2)
			m2 := run(t, b)
			m3 := run(t, b) // nothing changed

			shas := map[string]string{}
			for _, m := range []backup.Manifest{m1, m2, m3} {
				for _, f := range m.Files {
					if f.Shared {
						shas[f.Name] = f.SHA256
					}
				}
			}
			for name, sha := range shas {
				if n := primary.putCount(testPrefix + "/shared/" + sha); n != 1 {
					t.Errorf("shared %s uploaded %d times, want 1", name, n)
				}
			}
			// Per-backup files go with every backup.
			for _, m := range []backup.Manifest{m2, m3} {
				if n := primary.putCount(testPrefix + "/backups/" + m.ID + "/files/OPTIONS-000004"); n != 1 {
					t.Errorf("backup %s OPTIONS uploaded %d times, want 1", m.ID, n)
				}
			}
			if n := len(listKeys(t, primary, testPrefix+"/shared/")); n != 3 {
				t.Errorf("%d shared objects, want 3", n)
			}
			dir := filepath.Join(t.TempDir(), "store")
			if _, err := backup.Restore(context.Background(), primary, testPrefix, dir, testKey); err != nil {
				t.Fatal(err)
			}
			sameFiles(t, readDir(t, dir), gen2)
		})
	}
}

func TestBackup_Retention(t *testing.T) {
	gens := []map[string]string{
		{"a.sst": "A", "b.sst": "B", "MANIFEST-1": "m1"},
		{"b.sst": "B", "c.sst": "C", "MANIFEST-1": "m2"},
		{"c.sst": "C", "d.sst": "D", "MANIFEST-1": "m3"},
	}
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			ctx := context.Background()
			primary := loc.new(t)
			st := newFakeStore("store-a", gens[0])
			b, _ := newBackuper(t, primary, nil, st, func(o *backup.Options) { o.Keep = 2 })
			var ms []backup.Manifest
			for i, g := range gens {
				st.set(g)
				if i == 2 {
					// A run that died before its manifest, older than the next
					// backup: retention removes it.
					old := ulid.MustNew(ulid.Timestamp(ms[1].CreatedAt), nil).String()
					putString(t, primary, testPrefix+"/backups/"+old+"/files/MANIFEST-1", "orphan")
				}
				ms = append(ms, run(t, b))
			}
			backups := map[string]bool{}
			for _, k := range listKeys(t, primary, testPrefix+"/backups/") {
				backups[strings.Split(strings.TrimPrefix(k, testPrefix+"/backups/"), "/")[0]] = true
			}
			if len(backups) != 2 || !backups[ms[1].ID] || !backups[ms[2].ID] {
				t.Fatalf("backups left %v, want %s and %s", backups, ms[1].ID, ms[2].ID)
			}
			shaOf := func(m backup.Manifest, name string) string {
				for _, f := range m.Files {
					if f.Name == name {
						return f.SHA256
					}
				}
				t.Fatalf("%s not in %s", name, m.ID)
				return ""
			}
			for _, tc := range []struct {
				name string
				sha  string
				want bool
			}{
				{"a.sst (only in the deleted backup)", shaOf(ms[0], "a.sst"), false},
				{"b.sst (in a kept backup too)", shaOf(ms[0], "b.sst"), true},
				{"c.sst", shaOf(ms[1], "c.sst"), true},
				{"d.sst", shaOf(ms[2], "d.sst"), true},
			} {
				ok, err := primary.Exists(ctx, testPrefix+"/shared/"+tc.sha)
				if err != nil || ok != tc.want {
					t.Errorf("%s: exists = %v, %v; want %v", tc.name, ok, err, tc.want)
				}
			}
			rep, err := backup.Verify(ctx, primary, testPrefix, testKey)
			if err != nil || len(rep.Backups) != 2 || len(rep.UnreferencedShared) != 0 {
				t.Fatalf("Verify after retention = %+v, %v", rep, err)
			}
		})
	}
}

func TestBackup_Refusals(t *testing.T) {
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			ctx := context.Background()
			for _, tc := range []struct {
				name  string
				setup func(t *testing.T, primary backup.Store) *backup.Backuper
				want  error
			}{
				{"foreign store id", func(t *testing.T, primary backup.Store) *backup.Backuper {
					a, _ := newBackuper(t, primary, nil, newFakeStore("store-a", gen1), nil)
					run(t, a)
					b, _ := newBackuper(t, primary, nil, newFakeStore("store-b", gen1), nil)
					return b
				}, backup.ErrForeignBackup},
				{"other signing key", func(t *testing.T, primary backup.Store) *backup.Backuper {
					a, _ := newBackuper(t, primary, nil, newFakeStore("store-a", gen1), func(o *backup.Options) {
						o.SigningKey = []byte("another-key-of-16-bytes-or-more")
					})
					run(t, a)
					b, _ := newBackuper(t, primary, nil, newFakeStore("store-a", gen1), nil)
					return b
				}, backup.ErrForeignBackup},
				{"prefix shared by another live writer", func(t *testing.T, primary backup.Store) *backup.Backuper {
					st := newFakeStore("store-a", gen1)
					w1, _ := newBackuper(t, primary, nil, st, nil)
					run(t, w1)
					// A second live copy of the same store (another nonce)
					// takes the prefix over: it has no backup of its own yet.
					w2, _ := newBackuper(t, primary, nil, st, func(o *backup.Options) { o.WriterNonce = "writer-2" })
					run(t, w2)
					return w1 // w1's LATEST was moved under it
				}, backup.ErrPrefixShared},
			} {
				t.Run(tc.name, func(t *testing.T) {
					primary := loc.new(t)
					b := tc.setup(t, primary)
					before := getString(t, primary, testPrefix+"/LATEST")
					keysBefore := listKeys(t, primary, "")
					_, err := b.Run(ctx)
					if !errors.Is(err, tc.want) {
						t.Fatalf("Run = %v, want %v", err, tc.want)
					}
					if got := getString(t, primary, testPrefix+"/LATEST"); got != before {
						t.Fatalf("LATEST moved on a refused run: %s → %s", before, got)
					}
					if got := listKeys(t, primary, ""); !slices.Equal(got, keysBefore) {
						t.Fatalf("a refused run wrote to the location:\nbefore %q\nafter  %q", keysBefore, got)
					}
				})
			}

			t.Run("a restarted writer takes over its own prefix", func(t *testing.T) {
				primary := loc.new(t)
				st := newFakeStore("store-a", gen1)
				w1, _ := newBackuper(t, primary, nil, st, nil)
				run(t, w1)
				w1b, _ := newBackuper(t, primary, nil, st, func(o *backup.Options) { o.WriterNonce = "writer-1-restarted" })
				run(t, w1b)
				run(t, w1b)
			})
		})
	}
}

func TestBackup_OnRunResults(t *testing.T) {
	primary := locations[1].new(t)
	a, _ := newBackuper(t, primary, nil, newFakeStore("store-a", gen1), nil)
	run(t, a)
	b, rec := newBackuper(t, primary, nil, newFakeStore("store-b", gen1), nil)
	if _, err := b.Run(context.Background()); err == nil {
		t.Fatal("foreign run succeeded")
	}
	if rec.last() != backup.ResultRefused {
		t.Fatalf("result %q, want refused", rec.last())
	}
	failing := spy(primary)
	failing.failGet = func(string) error { return errUnreachable }
	c, rec := newBackuper(t, failing, nil, newFakeStore("store-a", gen1), nil)
	if _, err := c.Run(context.Background()); !errors.Is(err, errUnreachable) {
		t.Fatalf("Run = %v, want the location error", err)
	}
	if rec.last() != backup.ResultError {
		t.Fatalf("result %q, want error", rec.last())
	}
}

// TestBackup_LatestWrittenLast fails each write of a second run in turn: the
// previous LATEST stays, and a restore still brings back the first backup.
func TestBackup_LatestWrittenLast(t *testing.T) {
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			ctx := context.Background()
			base := loc.new(t)
			primary := spy(base)
			st := newFakeStore("store-a", gen1)
			b, _ := newBackuper(t, primary, nil, st, nil)
			m1 := run(t, b)
			// LATEST is the last Put of a run.
			if last := primary.order[len(primary.order)-1]; last != testPrefix+"/LATEST" {
				t.Fatalf("last Put was %s, want LATEST", last)
			}
			manifestAt := slices.Index(primary.order, testPrefix+"/backups/"+m1.ID+"/manifest.json")
			if manifestAt != len(primary.order)-2 {
				t.Fatalf("manifest Put at %d of %d, want just before LATEST: %q", manifestAt, len(primary.order), primary.order)
			}

			for _, failing := range []string{"/LATEST", "/manifest.json", "/shared/", "/files/"} {
				t.Run("fail "+failing, func(t *testing.T) {
					// A table no earlier run uploaded, so the run must Put it.
					st.set(map[string]string{"000001.sst": "table one", "000009.sst": "new table " + failing, "MANIFEST-000003": "v2"})
					primary.failPut = func(key string) error {
						if strings.Contains(key, failing) {
							return errUnreachable
						}
						return nil
					}
					defer func() { primary.failPut = nil }()
					if _, err := b.Run(ctx); !errors.Is(err, errUnreachable) {
						t.Fatalf("Run = %v, want the injected error", err)
					}
					if got := getString(t, base, testPrefix+"/LATEST"); got != m1.ID {
						t.Fatalf("LATEST = %s after a failed run, want %s", got, m1.ID)
					}
					dir := filepath.Join(t.TempDir(), "store")
					got, err := backup.Restore(ctx, base, testPrefix, dir, testKey)
					if err != nil || got.ID != m1.ID {
						t.Fatalf("Restore = %s, %v; want %s", got.ID, err, m1.ID)
					}
					sameFiles(t, readDir(t, dir), gen1)
				})
			}
			// The next good run succeeds and cleans the failed runs' leftovers.
			m := run(t, b)
			rep, err := backup.Verify(ctx, base, testPrefix, testKey)
			if err != nil {
				t.Fatalf("Verify: %v %+v", err, rep)
			}
			for _, c := range rep.Backups {
				if c.Incomplete {
					t.Errorf("incomplete backup %s left after a good run (latest %s)", c.ID, m.ID)
				}
			}
		})
	}
}

func TestBackup_Secondary(t *testing.T) {
	ctx := context.Background()
	t.Run("same backup on both", func(t *testing.T) {
		primary, secondary := locations[0].new(t), locations[1].new(t)
		b, _ := newBackuper(t, primary, secondary, newFakeStore("store-a", gen1), nil)
		m := run(t, b)
		for _, loc := range []backup.Store{primary, secondary} {
			if got := getString(t, loc, testPrefix+"/LATEST"); got != m.ID {
				t.Fatalf("LATEST = %s, want %s", got, m.ID)
			}
		}
		if getString(t, primary, testPrefix+"/backups/"+m.ID+"/manifest.json") != getString(t, secondary, testPrefix+"/backups/"+m.ID+"/manifest.json") {
			t.Fatal("the two locations hold different manifests")
		}
	})
	t.Run("secondary failure keeps the primary backup", func(t *testing.T) {
		primary := locations[0].new(t)
		secondary := spy(locations[1].new(t))
		secondary.failPut = func(string) error { return errUnreachable }
		b, rec := newBackuper(t, primary, secondary, newFakeStore("store-a", gen1), nil)
		m, err := b.Run(ctx)
		if !errors.Is(err, backup.ErrSecondaryFailed) || !errors.Is(err, errUnreachable) {
			t.Fatalf("Run = %v, want ErrSecondaryFailed wrapping the cause", err)
		}
		if rec.last() != backup.ResultSecondaryFailed {
			t.Fatalf("result %q", rec.last())
		}
		if got := getString(t, primary, testPrefix+"/LATEST"); got != m.ID {
			t.Fatalf("primary LATEST = %s, want %s", got, m.ID)
		}
		secondary.failPut = nil
		m2 := run(t, b)
		if got := getString(t, secondary, testPrefix+"/LATEST"); got != m2.ID {
			t.Fatalf("secondary LATEST = %s after recovery, want %s", got, m2.ID)
		}
	})
}

func TestRestore_Errors(t *testing.T) {
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			ctx := context.Background()
			for _, tc := range []struct {
				name   string
				tamper func(t *testing.T, s backup.Store, m backup.Manifest)
				key    []byte
				want   error
			}{
				{"manifest edited", func(t *testing.T, s backup.Store, m backup.Manifest) {
					k := testPrefix + "/backups/" + m.ID + "/manifest.json"
					putString(t, s, k, strings.Replace(getString(t, s, k), `"intake_offset":42`, `"intake_offset":43`, 1))
				}, testKey, backup.ErrBadSignature},
				{"signature edited", func(t *testing.T, s backup.Store, m backup.Manifest) {
					k := testPrefix + "/backups/" + m.ID + "/manifest.json"
					env := getString(t, s, k)
					i := strings.Index(env, "hmac-sha256:") + len("hmac-sha256:")
					c := "0"
					if env[i] == '0' {
						c = "1"
					}
					putString(t, s, k, env[:i]+c+env[i+1:])
				}, testKey, backup.ErrBadSignature},
				{"wrong key", func(*testing.T, backup.Store, backup.Manifest) {}, []byte("not-the-signing-key!"), backup.ErrBadSignature},
				{"shared file changed, same size", func(t *testing.T, s backup.Store, m backup.Manifest) {
					for _, f := range m.Files {
						if f.Shared {
							k := testPrefix + "/shared/" + f.SHA256
							v := []byte(getString(t, s, k))
							v[0] ^= 1
							putString(t, s, k, string(v))
							return
						}
					}
				}, testKey, backup.ErrChecksum},
				{"per-backup file truncated", func(t *testing.T, s backup.Store, m backup.Manifest) {
					k := testPrefix + "/backups/" + m.ID + "/files/MANIFEST-000003"
					v := getString(t, s, k)
					putString(t, s, k, v[:len(v)-1])
				}, testKey, backup.ErrChecksum},
				{"per-backup file grown", func(t *testing.T, s backup.Store, m backup.Manifest) {
					k := testPrefix + "/backups/" + m.ID + "/files/OPTIONS-000004"
					putString(t, s, k, getString(t, s, k)+"!")
				}, testKey, backup.ErrChecksum},
				{"file missing", func(t *testing.T, s backup.Store, m backup.Manifest) {
					if err := s.Delete(context.Background(), testPrefix+"/backups/"+m.ID+"/files/sub/dir/nested.file"); err != nil {
						t.Fatal(err)
					}
				}, testKey, backup.ErrNotFound},
				{"LATEST garbage", func(t *testing.T, s backup.Store, m backup.Manifest) {
					putString(t, s, testPrefix+"/LATEST", "../../etc/passwd")
				}, testKey, backup.ErrCorrupt},
			} {
				t.Run(tc.name, func(t *testing.T) {
					s := loc.new(t)
					b, _ := newBackuper(t, s, nil, newFakeStore("store-a", gen1), nil)
					m := run(t, b)
					tc.tamper(t, s, m)
					dir := filepath.Join(t.TempDir(), "store")
					_, err := backup.Restore(ctx, s, testPrefix, dir, tc.key)
					if !errors.Is(err, tc.want) {
						t.Fatalf("Restore = %v, want %v", err, tc.want)
					}
					for _, d := range []string{dir, dir + ".restoring"} {
						if _, err := os.Stat(d); !os.IsNotExist(err) {
							t.Errorf("%s exists after a failed restore", d)
						}
					}
					if _, err := backup.Verify(ctx, s, testPrefix, tc.key); !errors.Is(err, backup.ErrVerifyFailed) {
						t.Errorf("Verify = %v, want ErrVerifyFailed", err)
					}
				})
			}

			t.Run("empty location", func(t *testing.T) {
				_, err := backup.Restore(ctx, loc.new(t), testPrefix, filepath.Join(t.TempDir(), "store"), testKey)
				if !errors.Is(err, backup.ErrNoBackup) {
					t.Fatalf("Restore = %v, want ErrNoBackup", err)
				}
			})
		})
	}
}

// TestRestore_CrashMidRestore: a restore that crashed leaves the
// ".restoring" directory without its marker (or with it, before the
// rename); the next restore deletes it and starts over. A target that holds
// anything is never touched.
func TestRestore_CrashMidRestore(t *testing.T) {
	ctx := context.Background()
	s := locations[0].new(t)
	b, _ := newBackuper(t, s, nil, newFakeStore("store-a", gen1), nil)
	m := run(t, b)

	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
		want    error
	}{
		{"partial download, no marker", func(t *testing.T, dir string) {
			tmp := dir + ".restoring"
			mustWrite(t, filepath.Join(tmp, "000001.sst"), "tab") // truncated
			mustWrite(t, filepath.Join(tmp, "stale-extra-file"), "junk")
		}, nil},
		{"whole download, marker, not renamed", func(t *testing.T, dir string) {
			tmp := dir + ".restoring"
			mustWrite(t, filepath.Join(tmp, "000001.sst"), "wrong")
			mustWrite(t, filepath.Join(tmp, backup.MarkerName), "01OLDER")
		}, nil},
		{"empty target dir", func(t *testing.T, dir string) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"target holds a store", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "CURRENT"), "live store")
		}, backup.ErrNotEmpty},
		{"target already restored", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, backup.MarkerName), m.ID)
		}, backup.ErrNotEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			tc.prepare(t, dir)
			before, _ := os.ReadDir(dir)
			got, err := backup.Restore(ctx, s, testPrefix, dir, testKey)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Restore = %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				after, _ := os.ReadDir(dir)
				if len(after) != len(before) {
					t.Fatalf("a refused restore changed the target: %v → %v", before, after)
				}
				_, _, rfErr := backup.RestoreFirst(ctx, []backup.Store{s}, testPrefix, dir, testKey)
				if !errors.Is(rfErr, tc.want) {
					t.Fatalf("RestoreFirst = %v, want %v (a local error stops it)", rfErr, tc.want)
				}
				return
			}
			if got.ID != m.ID {
				t.Fatalf("restored %s, want %s", got.ID, m.ID)
			}
			sameFiles(t, readDir(t, dir), gen1)
			if id, ok, _ := backup.ReadMarker(dir); !ok || id != m.ID {
				t.Fatalf("marker %q %v", id, ok)
			}
			if _, err := os.Stat(dir + ".restoring"); !os.IsNotExist(err) {
				t.Fatal("restoring dir left behind")
			}
		})
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRestoreFirst(t *testing.T) {
	ctx := context.Background()
	gen2 := map[string]string{"x.sst": "secondary's table", "MANIFEST-1": "m"}
	withBackup := func(t *testing.T, files map[string]string) backup.Store {
		s := locations[1].new(t)
		b, _ := newBackuper(t, s, nil, newFakeStore("store-a", files), nil)
		run(t, b)
		return s
	}
	empty := func(t *testing.T) backup.Store { return locations[0].new(t) }
	unreadable := func(t *testing.T) backup.Store {
		s := spy(withBackup(t, gen1))
		s.failGet = func(string) error { return errUnreachable }
		return s
	}
	corrupt := func(t *testing.T) backup.Store {
		s := withBackup(t, gen1)
		putString(t, s, testPrefix+"/LATEST", "not-an-id")
		return s
	}
	for _, tc := range []struct {
		name      string
		primary   func(t *testing.T) backup.Store
		secondary func(t *testing.T) backup.Store
		wantIdx   int
		wantFiles map[string]string
		wantErr   error // nil: success
		notErr    error // the error must not wrap this
	}{
		{"primary has a backup", func(t *testing.T) backup.Store { return withBackup(t, gen1) }, func(t *testing.T) backup.Store { return withBackup(t, gen2) }, 0, gen1, nil, nil},
		{"primary empty", empty, func(t *testing.T) backup.Store { return withBackup(t, gen2) }, 1, gen2, nil, nil},
		{"primary unreadable", unreadable, func(t *testing.T) backup.Store { return withBackup(t, gen2) }, 1, gen2, nil, nil},
		{"primary corrupt", corrupt, func(t *testing.T) backup.Store { return withBackup(t, gen2) }, 1, gen2, nil, nil},
		{"no secondary configured", func(t *testing.T) backup.Store { return withBackup(t, gen1) }, nil, 0, gen1, nil, nil},
		{"both empty", empty, empty, -1, nil, backup.ErrNoBackup, nil},
		{"primary unreadable, secondary empty", unreadable, empty, -1, nil, errUnreachable, backup.ErrNoBackup},
		{"both unreadable", unreadable, unreadable, -1, nil, errUnreachable, backup.ErrNoBackup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locs := []backup.Store{tc.primary(t), nil}
			if tc.secondary != nil {
				locs[1] = tc.secondary(t)
			}
			dir := filepath.Join(t.TempDir(), "store")
			_, idx, err := backup.RestoreFirst(ctx, locs, testPrefix, dir, testKey)
			if tc.wantErr == nil {
				if err != nil || idx != tc.wantIdx {
					t.Fatalf("RestoreFirst = %d, %v; want location %d", idx, err, tc.wantIdx)
				}
				sameFiles(t, readDir(t, dir), tc.wantFiles)
				return
			}
			if !errors.Is(err, tc.wantErr) || (tc.notErr != nil && errors.Is(err, tc.notErr)) {
				t.Fatalf("RestoreFirst = %v; want %v and not %v", err, tc.wantErr, tc.notErr)
			}
			if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) {
				t.Fatal("a failed RestoreFirst left the target behind")
			}
		})
	}
}

func TestVerifyAndList(t *testing.T) {
	ctx := context.Background()
	for _, loc := range locations {
		t.Run(loc.name, func(t *testing.T) {
			s := loc.new(t)
			st := newFakeStore("store-a", gen1)
			b, _ := newBackuper(t, s, nil, st, nil)
			m1 := run(t, b)
			st.set(map[string]string{"000001.sst": gen1["000001.sst"], "MANIFEST-9": "nine"})
			m2 := run(t, b)

			rep, err := backup.Verify(ctx, s, testPrefix, testKey)
			if err != nil || !rep.OK() || rep.Latest != m2.ID || len(rep.Backups) != 2 {
				t.Fatalf("Verify = %+v, %v", rep, err)
			}
			if rep.Backups[0].Files != len(m1.Files) || rep.Backups[0].Bytes != m1.Bytes() {
				t.Fatalf("Verify backup 0 = %+v", rep.Backups[0])
			}

			ls, err := backup.List(ctx, s, testPrefix)
			if err != nil || len(ls) != 2 {
				t.Fatalf("List = %+v, %v", ls, err)
			}
			if ls[0].ID != m1.ID || ls[0].Latest || ls[1].ID != m2.ID || !ls[1].Latest || !ls[1].Complete || ls[1].Manifest.IntakeOffset != 42 {
				t.Fatalf("List = %+v", ls)
			}

			// A shared file of the older backup only: Verify names it.
			var sha string
			for _, f := range m1.Files {
				if f.Name == "000002.sst" {
					sha = f.SHA256
				}
			}
			putString(t, s, testPrefix+"/shared/"+sha, "rotten")
			rep, err = backup.Verify(ctx, s, testPrefix, testKey)
			if !errors.Is(err, backup.ErrVerifyFailed) || rep.OK() {
				t.Fatalf("Verify after corruption = %v", err)
			}
			if len(rep.Backups[0].Problems) != 1 || !strings.Contains(rep.Backups[0].Problems[0], "000002.sst") || len(rep.Backups[1].Problems) != 0 {
				t.Fatalf("problems = %+v", rep.Backups)
			}

			ls, err = backup.List(ctx, locations[1].new(t), testPrefix)
			if err != nil || len(ls) != 0 {
				t.Fatalf("List of an empty location = %+v, %v", ls, err)
			}
		})
	}
}

func TestNew_Refuses(t *testing.T) {
	ok := backup.Options{Primary: locations[1].new(t), Store: newFakeStore("s", nil), SigningKey: testKey, Keep: 1}
	for _, tc := range []struct {
		name string
		mod  func(*backup.Options)
	}{
		{"no primary", func(o *backup.Options) { o.Primary = nil }},
		{"no store", func(o *backup.Options) { o.Store = nil }},
		{"short key", func(o *backup.Options) { o.SigningKey = []byte("short") }},
		{"keep 0", func(o *backup.Options) { o.Keep = 0 }},
		{"bad prefix", func(o *backup.Options) { o.Prefix = "a/../b" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.mod(&o)
			if _, err := backup.New(o); err == nil {
				t.Fatal("New accepted bad options")
			}
		})
	}
	if b, err := backup.New(ok); err != nil || b.WriterNonce() == "" {
		t.Fatalf("New(ok) = %v, nonce %q", err, b.WriterNonce())
	}
}

// TestBackup_TempDir: a run leaves no checkpoint behind, New clears what a
// crashed run left, and concurrent runs are serialised.
func TestBackup_TempDir(t *testing.T) {
	tmp := filepath.Join(t.TempDir(), "tmp", "backup")
	mustWrite(t, filepath.Join(tmp, "ankusa-backup-123", "checkpoint", "000001.sst"), "stale")
	mustWrite(t, filepath.Join(tmp, "unrelated"), "kept")
	loc := locations[1].new(t)
	b, _ := newBackuper(t, loc, nil, newFakeStore("store-a", gen1), func(o *backup.Options) { o.TempDir = tmp })
	entries, err := os.ReadDir(tmp)
	if err != nil || len(entries) != 1 || entries[0].Name() != "unrelated" {
		t.Fatalf("TempDir after New = %v, %v; want only the unrelated file", entries, err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := b.Run(context.Background())
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 1 {
		t.Fatalf("TempDir after runs = %v", entries)
	}
	ls, err := backup.List(context.Background(), loc, testPrefix)
	if err != nil || len(ls) != 3 { // keep 3
		t.Fatalf("List = %d, %v", len(ls), err)
	}
}
