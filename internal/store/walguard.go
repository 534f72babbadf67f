package store

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walGuard is the file system one DB generation's Pebble writes through.
// It keeps this invariant:
//
// F1. A failed WAL write or sync fails the store's generation, never the
// process. Pebble panics when it cannot close a WAL (rotateWAL: a full
// memtable's switch to a new log closes the old one, and the close flushes
// and syncs it, or returns the log writer's kept error), and that panic
// unwinds through a deferred unlock of a mutex rotateWAL had released: a
// fatal error, which no recover catches. So Pebble never sees a WAL
// fault. The guard records the first one as the generation's fatal error,
// the record Pebble's own Fatalf leaves (fatalLogger), before it answers;
// from then on every WAL write and sync of the generation does nothing and
// reports success. Nothing written after the fault reaches a WAL on disk,
// as when Pebble's log writer keeps the error, and every store call checks
// the record after Pebble returns, so no caller is told that a write made
// at or after the fault is durable; the generation is then only closed
// and reopened (Reopen).
//
// Pebble reads a torn end only in the newest log: an older log must end
// cleanly, or Open refuses the store. So once the generation has failed,
// a new log (Pebble's switch after a full memtable, a recycled log) is
// not made on the disk but in memory, where its writes go nowhere: the
// torn log stays the newest, and a Reopen or a restart replays it. Only
// the store's own logs are guarded; a checkpoint's copies of them, in
// another directory, are not (Checkpoint checks the record itself).
//
// A failed create, reuse or close of a log is a fault like a failed write:
// recorded, and the new log made in memory. Not kept from Pebble, and
// still fatal to the process: a failed sync of the store's directory,
// which Pebble makes after it creates a log (skipping it would risk the
// durability of the sstables and manifest a failed generation still
// writes). Found by the simulator (docs/testing.md, seed 203506).
type walGuard struct {
	vfs.FS
	dir     string // the store's: only its *.log files are guarded
	fatal   *fatalLogger
	scratch vfs.FS // where a failed generation's new logs go
}

func newWALGuard(fs vfs.FS, dir string, fatal *fatalLogger) *walGuard {
	// Cleaned as Pebble's PathJoin cleans the names it opens, so that a dir
	// given as "./store" or "/data/store/" still matches its logs.
	dir = fs.PathDir(fs.PathJoin(dir, "x"))
	return &walGuard{FS: fs, dir: dir, fatal: fatal, scratch: vfs.NewMem()}
}

func (g *walGuard) isWAL(name string) bool {
	return strings.HasSuffix(name, ".log") && g.FS.PathDir(name) == g.dir
}

func (g *walGuard) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if !g.isWAL(name) {
		return g.FS.Create(name, category)
	}
	return g.openLog(name, "create", category, func() (vfs.File, error) { return g.FS.Create(name, category) })
}

func (g *walGuard) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if !g.isWAL(name) {
		return g.FS.OpenReadWrite(name, category, opts...)
	}
	return g.openLog(name, "open", category, func() (vfs.File, error) { return g.FS.OpenReadWrite(name, category, opts...) })
}

// ReuseForWrite of a failed generation leaves the old log on the disk under
// its old name, obsolete: an open ignores a log below the manifest's first
// unflushed one.
func (g *walGuard) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if !g.isWAL(newname) {
		return g.FS.ReuseForWrite(oldname, newname, category)
	}
	return g.openLog(newname, "reuse", category, func() (vfs.File, error) { return g.FS.ReuseForWrite(oldname, newname, category) })
}

// openLog opens one of the store's logs with open while the generation is
// healthy; a failed open is a fault (op names it), and a failed
// generation's new log is made in memory (F1).
func (g *walGuard) openLog(name, op string, category vfs.DiskWriteCategory, open func() (vfs.File, error)) (vfs.File, error) {
	if !g.failed() {
		f, err := open()
		if err == nil {
			return &walFile{File: f, name: name, g: g}, nil
		}
		g.fault(op, name, err)
	}
	f, err := g.scratch.Create(g.FS.PathBase(name), category)
	if err != nil {
		return nil, err
	}
	return &walFile{File: f, name: name, g: g}, nil
}

// failed says whether the generation has a fatal error (F1: then WAL
// writes and syncs do nothing).
func (g *walGuard) failed() bool { return g.fatal.err.Load() != nil }

// fault records a WAL fault as the generation's fatal error (F1).
func (g *walGuard) fault(op, name string, err error) {
	g.fatal.record(fmt.Errorf("pebble WAL %s of %s: %w", op, name, err))
}

// walFile is one WAL file of a guarded generation (F1).
type walFile struct {
	vfs.File
	name string
	g    *walGuard
}

// Close records a failed close as a fault: Pebble panics on it as on a
// failed sync (F1). Every ack before it was covered by a sync that
// succeeded.
func (f *walFile) Close() error {
	if err := f.File.Close(); err != nil && !f.g.failed() {
		f.g.fault("close", f.name, err)
	}
	return nil
}

func (f *walFile) Write(p []byte) (int, error) {
	if f.g.failed() {
		return len(p), nil
	}
	if _, err := f.File.Write(p); err != nil {
		f.g.fault("write", f.name, err)
	}
	return len(p), nil
}

func (f *walFile) WriteAt(p []byte, off int64) (int, error) {
	if f.g.failed() {
		return len(p), nil
	}
	if _, err := f.File.WriteAt(p, off); err != nil {
		f.g.fault("write", f.name, err)
	}
	return len(p), nil
}

func (f *walFile) Sync() error {
	if !f.g.failed() {
		if err := f.File.Sync(); err != nil {
			f.g.fault("sync", f.name, err)
		}
	}
	return nil
}

func (f *walFile) SyncData() error {
	if !f.g.failed() {
		if err := f.File.SyncData(); err != nil {
			f.g.fault("sync", f.name, err)
		}
	}
	return nil
}

func (f *walFile) SyncTo(length int64) (fullSync bool, err error) {
	if f.g.failed() {
		return true, nil
	}
	full, err := f.File.SyncTo(length)
	if err != nil {
		f.g.fault("sync", f.name, err)
		return true, nil
	}
	return full, nil
}
