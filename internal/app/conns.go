package app

import (
	"fmt"
	"syscall"
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
