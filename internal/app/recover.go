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

// Recover runs boot recovery against a stopped store: the same code path as
// boot (identity, topology, replay, republish), offline.
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
	st, err := store.Open(store.Options{Dir: filepath.Join(cfg.Node.DataDir, "store"), Logger: log})
	if err != nil {
		return queue.Summary{}, err
	}
	defer st.Close()
	origin := queue.OriginExisting
	if st.Created() {
		origin = queue.OriginFresh
	}
	if !f.DryRun {
		if err := stampNode(st, cfg.Intake.NodeID); err != nil {
			return queue.Summary{}, err
		}
	}
	in, err := openIntake(cfg, log)
	if err != nil {
		return queue.Summary{}, err
	}
	defer in.Close()
	if err := in.Verify(ctx); err != nil {
		return queue.Summary{}, fmt.Errorf("recover: intake topology: %w", err)
	}
	if !f.DryRun {
		if err := stampPartition(ctx, st, in, cfg.Intake.NodeID); err != nil {
			return queue.Summary{}, err
		}
	} else if err := usePartition(ctx, st, in, cfg.Intake.NodeID); err != nil {
		return queue.Summary{}, err
	}
	if _, err := os.Stat(filepath.Join(cfg.Node.DataDir, "store", backup.MarkerName)); err == nil {
		origin = queue.OriginRestored
	}
	var refs []store.SinkRef
	for id, sc := range cfg.Sources {
		for _, k := range sc.Sinks {
			refs = append(refs, store.SinkRef{Source: id, Sink: k.ID})
		}
	}
	nums, err := st.SinkNumbers(refs)
	if err != nil {
		return queue.Summary{}, err
	}
	r := &Instance{cfg: cfg, nums: nums}
	sum, err := queue.Recover(ctx, st, queue.RecoverOptions{
		Intake: in, Node: cfg.Intake.NodeID, Origin: origin, From: from,
		AllowGap: f.AllowGap, DryRun: f.DryRun, Resolve: r.route, Logger: log,
	})
	if err == nil && !f.DryRun && origin == queue.OriginRestored {
		// The restored store is now recovered: the next boot is an
		// ordinary restart.
		err = clearRestoreMarker(filepath.Join(cfg.Node.DataDir, "store"))
	}
	return sum, err
}
