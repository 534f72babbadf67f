package sim

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// errInjected is every fault the simulator's disk returns.
var errInjected = errors.New("sim: injected disk fault")

// diskFaults is the errorfs injector of the store's disk. It fails only the
// WAL (the *.log files): the commit path's durability record. Faults are
// armed by schedule events and apply only while the node serves (on is
// false during boot, so a schedule's faults hit the commit path, not the
// open).
//
// A "write" fault is any write-side operation on a log: a write, and the
// creation or reuse of a log file (Pebble's switch to a new log after a
// full memtable, a fence's reopen), which errorfs counts as writes too.
type diskFaults struct {
	mu          sync.Mutex
	on          bool
	failSyncs   int       // the next n WAL syncs fail
	failWrites  int       // the next n WAL writes (creations and reuses included) fail
	outageUntil time.Time // every WAL sync fails until then
	// writeOutageUntil: every WAL write fails until then.
	writeOutageUntil time.Time
	syncs            int // faults injected, per kind
	writes           int
	opens            int // of writes: a log's creation or reuse refused
	recycled         int // of syncs and writes: in a recycled log (faultFS)
}

var _ errorfs.Injector = (*diskFaults)(nil)

func (f *diskFaults) String() string { return "sim disk faults" }

func (f *diskFaults) MaybeError(op errorfs.Op) error { return f.maybe(op, false) }

// maybe is MaybeError for an op on a recycled log when recycled is set
// (counted apart, so a run shows that recycled logs are faulted at all).
func (f *diskFaults) maybe(op errorfs.Op, recycled bool) error {
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	open := op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite
	write := open || op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt
	if !sync && !write {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on {
		return nil
	}
	now := time.Now()
	outage, woutage := now.Before(f.outageUntil), now.Before(f.writeOutageUntil)
	switch {
	case sync && (outage || f.failSyncs > 0):
		if !outage {
			f.failSyncs--
		}
		f.syncs++
	case write && (woutage || f.failWrites > 0):
		if !woutage {
			f.failWrites--
		}
		f.writes++
		if open {
			f.opens++
		}
	default:
		return nil
	}
	if recycled {
		f.recycled++
	}
	return errInjected
}

func (f *diskFaults) set(fn func(f *diskFaults)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// heal clears every armed fault (counts stay).
func (f *diskFaults) heal() {
	f.set(func(f *diskFaults) {
		f.failSyncs, f.failWrites, f.outageUntil, f.writeOutageUntil = 0, 0, time.Time{}, time.Time{}
	})
}

// faultFS is errorfs.Wrap(inner, faults) with recycled logs faulted too.
// Why: errorfs's ReuseForWrite hands back the inner file unwrapped, and
// Pebble recycles its WAL files, so before faultFS a long-lived node's
// log writes and syncs mostly went to files no fault could reach.
type faultFS struct {
	*errorfs.FS
	inner  vfs.FS
	faults *diskFaults
}

func newFaultFS(inner vfs.FS, faults *diskFaults) faultFS {
	return faultFS{FS: errorfs.Wrap(inner, faults), inner: inner, faults: faults}
}

// ReuseForWrite implements vfs.FS: errorfs's, with the file wrapped.
func (fs faultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.faults.maybe(errorfs.Op{Kind: errorfs.OpReuseForWrite, Path: oldname}, true); err != nil {
		return nil, err
	}
	f, err := fs.inner.ReuseForWrite(oldname, newname, category)
	if err != nil {
		return nil, err
	}
	return recycledFile{File: f, path: newname, faults: fs.faults}, nil
}

// recycledFile faults a recycled log's writes and syncs as errorfs faults
// a created one's; its other methods are the inner file's.
type recycledFile struct {
	vfs.File
	path   string
	faults *diskFaults
}

func (f recycledFile) fault(kind errorfs.OpKind) error {
	return f.faults.maybe(errorfs.Op{Kind: kind, Path: f.path}, true)
}

func (f recycledFile) Write(p []byte) (int, error) {
	if err := f.fault(errorfs.OpFileWrite); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f recycledFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fault(errorfs.OpFileWriteAt); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f recycledFile) Sync() error {
	if err := f.fault(errorfs.OpFileSync); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f recycledFile) SyncData() error {
	if err := f.fault(errorfs.OpFileSyncData); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f recycledFile) SyncTo(length int64) (bool, error) {
	if err := f.fault(errorfs.OpFileSyncTo); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}
