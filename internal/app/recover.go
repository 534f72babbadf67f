package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// RecoverFlags are ankusa recover's options.
type RecoverFlags struct {
	Node     string // asserts the node id (step 1); "" = intake.node_id
	From     string // OFFSET | earliest | backup ("" = backup: the store's offset)
	DryRun   bool
	AllowGap bool
}

// Recover runs boot recovery against a stopped store: the same code as the
// boot (queue.RecoverNode: identity, topology, replay, republish), offline
// and one attempt.
func Recover(ctx context.Context, cfg *config.Config, f RecoverFlags, log *slog.Logger) (queue.Summary, error) {
	if cfg.WAL.Type != "dual" {
		return queue.Summary{}, fmt.Errorf("recover: wal.type is %q; recovery replays the intake log of wal.type: dual", cfg.WAL.Type)
	}
	if f.Node != "" && f.Node != cfg.Intake.NodeID {
		return queue.Summary{}, fmt.Errorf("recover: --node %q does not match intake.node_id %q", f.Node, cfg.Intake.NodeID)
	}
	var from *intake.Position
	switch f.From {
	case "", "backup":
	case "earliest":
		p := intake.Position(-1)
		from = &p
	default:
		n, err := strconv.ParseInt(f.From, 10, 64)
		if err != nil || n < 0 {
			return queue.Summary{}, fmt.Errorf("recover: --from must be an offset, earliest or backup, got %q", f.From)
		}
		p := intake.Position(n - 1) // replay starts after from
		from = &p
	}
	dir := filepath.Join(cfg.Node.DataDir, "store")
	st, err := store.Open(store.Options{Dir: dir, Logger: log})
	if err != nil {
		return queue.Summary{}, err
	}
	defer st.Close()
	origin := queue.OriginExisting
	switch _, err := os.Stat(filepath.Join(dir, backup.MarkerName)); {
	case err == nil:
		origin = queue.OriginRestored
	case st.Created():
		origin = queue.OriginFresh
	}
	in, err := openIntake(cfg, log)
	if err != nil {
		return queue.Summary{}, err
	}
	defer in.Close()
	nums, err := sinkNumbers(st, cfg)
	if err != nil {
		return queue.Summary{}, err
	}
	sum, err := queue.RecoverNode(ctx, st, queue.NodeOptions{
		RecoverOptions: queue.RecoverOptions{
			Intake: in, Node: cfg.Intake.NodeID, Origin: origin, From: from,
			AllowGap: f.AllowGap, DryRun: f.DryRun, Resolve: sourceRoutes(cfg, nums), Logger: log,
		},
		Replay:    true,
		Recovered: func() error { return clearRestoreMarker(dir) },
	})
	return sum, err
}
