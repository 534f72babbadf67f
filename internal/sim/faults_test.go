package sim

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// errInjected is every fault the simulator's disk returns.
var errInjected = errors.New("sim: injected disk fault")

// diskFaults is the errorfs injector of the store's disk. It fails only the
// WAL (the *.log files): the commit path's durability record. Faults are
// armed by schedule events and apply only while the node serves (on is
// false during boot, so a schedule's faults hit the commit path, not the
// open).
type diskFaults struct {
	mu          sync.Mutex
	on          bool
	failSyncs   int       // the next n WAL syncs fail
	failWrites  int       // the next n WAL writes fail
	outageUntil time.Time // every WAL sync fails until then
	// writeOutageUntil: every WAL write fails until then.
	writeOutageUntil time.Time
	syncs            int // faults injected, per kind
	writes           int
}

var _ errorfs.Injector = (*diskFaults)(nil)

func (f *diskFaults) String() string { return "sim disk faults" }

func (f *diskFaults) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	write := op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt
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
		return errInjected
	case write && (woutage || f.failWrites > 0):
		if !woutage {
			f.failWrites--
		}
		f.writes++
		return errInjected
	}
	return nil
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
