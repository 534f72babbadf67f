package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MarkerName is the file Restore writes last into the restored directory,
// holding the backup id. Its presence says the directory is a whole restore;
// boot reads it (ReadMarker) to know the store came from a backup, mints the
// store's new incarnation, and then removes it (RemoveMarker). Pebble
// ignores files it does not recognise, so the marker can sit in the store
// directory.
const MarkerName = "RESTORED"

// restoringSuffix names the sibling directory a restore downloads into.
const restoringSuffix = ".restoring"

// ErrNotEmpty: Restore's target directory exists and is not empty. Restore
// never deletes or overwrites a store.
var ErrNotEmpty = errors.New("backup: restore target directory is not empty")

// localError marks a failure on this host's disk (not the location's):
// RestoreFirst does not try another location after one.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

func local(err error) error {
	if err == nil {
		return nil
	}
	return &localError{err: err}
}

// Restore brings the backup LATEST names at loc into dir, which must be
// missing or empty (ErrNotEmpty otherwise).
//
// Protocol, in order:
//  1. read LATEST (none: ErrNoBackup), read its manifest and verify the
//     signature with signingKey (ErrBadSignature);
//  2. delete dir+".restoring" if present: it is a restore that crashed
//     before step 5, and it starts over;
//  3. download every file into dir+".restoring", checking size and sha256
//     of each (ErrChecksum) and fsyncing it;
//  4. fsync the directories, then write MarkerName (the backup id) last and
//     fsync it;
//  5. rename dir+".restoring" to dir and fsync the parent.
//
// A crash at any point leaves either no dir (a fresh restore follows) or a
// dir with its marker. It returns the restored manifest; the caller checks
// its StoreID and IntakeOffset as it sees fit.
func Restore(ctx context.Context, loc Store, prefix, dir string, signingKey []byte) (Manifest, error) {
	l, err := newLayout(prefix)
	if err != nil {
		return Manifest{}, local(err)
	}
	if len(signingKey) < minKeyLen {
		return Manifest{}, local(fmt.Errorf("restore: signing key is %d bytes, want at least %d", len(signingKey), minKeyLen))
	}
	dir = filepath.Clean(dir)
	if err := checkTarget(dir); err != nil {
		return Manifest{}, local(err)
	}
	// 1.
	id, err := readLatest(ctx, loc, l)
	if err != nil {
		return Manifest{}, fmt.Errorf("restore: %w", err)
	}
	m, err := readManifest(ctx, loc, l, id, signingKey)
	if err != nil {
		return Manifest{}, fmt.Errorf("restore: %w", err)
	}
	// 2.
	tmp := dir + restoringSuffix
	if err := os.RemoveAll(tmp); err != nil {
		return Manifest{}, local(fmt.Errorf("restore: clear %s: %w", tmp, err))
	}
	if err := mkdirAllSynced(tmp); err != nil {
		return Manifest{}, local(fmt.Errorf("restore: %w", err))
	}
	if err := fill(ctx, loc, l, m, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return Manifest{}, fmt.Errorf("restore %s: %w", m.ID, err)
	}
	// 5.
	if err := checkTarget(dir); err != nil {
		_ = os.RemoveAll(tmp)
		return Manifest{}, local(err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, local(fmt.Errorf("restore: %w", err))
	}
	if err := os.Rename(tmp, dir); err != nil {
		return Manifest{}, local(fmt.Errorf("restore: %w", err))
	}
	if err := fsyncDir(filepath.Dir(dir)); err != nil {
		return Manifest{}, local(fmt.Errorf("restore: fsync %s: %w", filepath.Dir(dir), err))
	}
	return m, nil
}

// fill runs steps 3 and 4 of Restore into tmp.
func fill(ctx context.Context, loc Store, l layout, m Manifest, tmp string) error {
	for _, f := range m.Files {
		if err := download(ctx, loc, l.fileKey(m.ID, f), filepath.Join(tmp, filepath.FromSlash(f.Name)), f); err != nil {
			return err
		}
	}
	// 4. Every directory entry on disk before the marker says "whole".
	err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return fsyncDir(p)
		}
		return nil
	})
	if err != nil {
		return local(fmt.Errorf("fsync: %w", err))
	}
	if err := writeSynced(filepath.Join(tmp, MarkerName), []byte(m.ID+"\n")); err != nil {
		return local(err)
	}
	return local(fsyncDir(tmp))
}

// ErrChecksum: a downloaded file's size or sha256 is not the manifest's.
var ErrChecksum = errors.New("backup: file does not match its manifest")

// download copies key into the new file p and checks it against want.
func download(ctx context.Context, loc Store, key, p string, want File) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return local(err)
	}
	r, err := loc.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("file %s: %w", want.Name, err)
	}
	defer r.Close()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return local(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx: ctx, r: io.LimitReader(r, want.Size+1)})
	if err != nil {
		return fmt.Errorf("file %s: %w", want.Name, err)
	}
	if n != want.Size {
		return fmt.Errorf("%w: %s is %d bytes, the manifest says %d", ErrChecksum, want.Name, n, want.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want.SHA256 {
		return fmt.Errorf("%w: %s has sha256 %s, the manifest says %s", ErrChecksum, want.Name, got, want.SHA256)
	}
	if err := f.Sync(); err != nil {
		return local(fmt.Errorf("fsync %s: %w", p, err))
	}
	return local(f.Close())
}

// RestoreFirst restores from the first of locs that has a backup that
// restores whole: a location that is empty, unreadable or corrupt (bad
// signature, bad checksum) is skipped for the next. It returns the manifest
// and the index of the location used.
//
// Only when every location is empty does the error wrap ErrNoBackup (the
// caller may start a fresh store). If some location could not be read, the
// error does not wrap ErrNoBackup: starting fresh could forget hooks that
// location holds. A failure on this host's disk (ErrNotEmpty, a failed
// write) or a cancelled ctx stops at once.
func RestoreFirst(ctx context.Context, locs []Store, prefix, dir string, signingKey []byte) (Manifest, int, error) {
	var errs []error
	empty := 0
	for i, loc := range locs {
		if loc == nil {
			continue
		}
		m, err := Restore(ctx, loc, prefix, dir, signingKey)
		if err == nil {
			return m, i, nil
		}
		var le *localError
		if errors.As(err, &le) || ctx.Err() != nil {
			return Manifest{}, -1, err
		}
		if errors.Is(err, ErrNoBackup) {
			empty++
			continue
		}
		errs = append(errs, fmt.Errorf("location %d: %w", i, err))
	}
	if len(errs) == 0 {
		return Manifest{}, -1, ErrNoBackup
	}
	return Manifest{}, -1, fmt.Errorf("restore: no location could be restored from (%d empty): %w", empty, errors.Join(errs...))
}

// checkTarget accepts a missing or empty directory.
func checkTarget(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore target %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return nil
	}
	for _, e := range entries {
		if e.Name() == MarkerName {
			return fmt.Errorf("%w: %s already holds a restore (%s present)", ErrNotEmpty, dir, MarkerName)
		}
	}
	return fmt.Errorf("%w: %s", ErrNotEmpty, dir)
}

// ReadMarker returns the backup id in dir's restore marker; ok is false if
// there is none.
func ReadMarker(dir string) (id string, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, MarkerName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return strings.TrimSpace(string(b)), true, nil
}

// RemoveMarker deletes dir's restore marker durably (boot calls it once the
// restored store's new incarnation is recorded). A missing marker is fine.
func RemoveMarker(dir string) error {
	err := os.Remove(filepath.Join(dir, MarkerName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return fsyncDir(dir)
}

// writeSynced writes a new file and fsyncs it.
func writeSynced(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// mkdirAllSynced creates dir and its parents, fsyncing each new entry.
func mkdirAllSynced(dir string) error {
	fs := &fileStore{syncDir: fsyncDir}
	return fs.mkdirAll(dir)
}
