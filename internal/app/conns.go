package app

import (
	"fmt"
	"syscall"

	"github.com/ankusa/ankusa/internal/config"
)

// capConns sets the listeners' connection caps under the descriptor limit:
// node.fd_reserve descriptors (at most half the limit) stay for the store's
// files, the sinks and the logs, and the two listeners share the rest, so a
// flood of connections ends at a 503 from the cap instead of the store's
// "too many open files". The binary raises the soft limit to the hard one
// before this runs.
func (in *Instance) capConns() error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("read the descriptor limit: %w", err)
	}
	ingest, admin, reserve := connCaps(rl.Cur, in.cfg.Node.FDReserve, in.cfg.HTTP.MaxConns, in.cfg.Admin.MaxConns)
	if ingest < 1 {
		return fmt.Errorf("descriptor limit %d leaves no connections after node.fd_reserve (%d) and admin.max_conns (%d)", rl.Cur, reserve, admin)
	}
	in.ingestOpts.MaxConns, in.adminOpts.MaxConns = ingest, admin
	in.log.Info("connection caps", "ingest", ingest, "admin", admin, "fd_limit", rl.Cur, "fd_reserve", reserve)
	return nil
}

// connCaps is the arithmetic of capConns: reserve = min(fd_reserve,
// limit/2); admin = min(admin.max_conns, (limit-reserve)/10, at least 1);
// ingest = min(http.max_conns, limit-reserve-admin).
func connCaps(limit uint64, fdReserve, maxConns, adminMax int) (ingest, admin, reserve int) {
	lim := int(min(limit, 1<<30))
	reserve = min(fdReserve, lim/2)
	left := lim - reserve
	admin = max(min(adminMax, left/10), 1)
	ingest = min(maxConns, left-admin)
	return ingest, admin, reserve
}

// baseMemory is the ceiling's allowance for everything but bodies: the
// store's memtables (64 MiB) and caches, the runtime, and the buffers of a
// few thousand connections.
const baseMemory = 256 << 20

// MemoryCeiling is the memory a node is sized for (docs/deployment.md
// "Limits to size for"):
//
//	2 × (http.max_inflight_body_bytes + batcher.max_queue_bytes)
//	  + dispatch.max_inflight_bytes + 256 MiB
//
// The edge holds at most the first in bodies, the queue at most the second
// (records whose request already ended are no longer in the edge's
// budget); each is counted twice because a record is copied into the
// store's batch, which Pebble keeps whole until flushed when it outgrows
// half a memtable. Measured at the defaults (1 344 MiB): 300 × 7.5 MB and
// 2 000 × 1 MB concurrent uploads peaked at 974–1 234 MiB RSS. The binary
// sets it as the Go runtime's soft memory limit unless GOMEMLIMIT is set.
func MemoryCeiling(cfg *config.Config) int64 {
	return 2*(cfg.HTTP.MaxInflightBodyBytes+cfg.Batcher.MaxQueueBytes) + cfg.Dispatch.MaxInflightBytes + baseMemory
}
