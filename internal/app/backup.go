package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/store"
)

// restoreIfEmpty restores the latest backup into an empty store dir
// (backup.RestoreIfEmpty over primary, then secondary) when backups are on.
func restoreIfEmpty(ctx context.Context, cfg *config.Config, dir string, log *slog.Logger) (bool, error) {
	if !cfg.Backup.Enabled {
		return false, nil
	}
	locs, closeAll, err := backup.OpenLocations(ctx, cfg.Backup.Primary, cfg.Backup.Secondary)
	if err != nil {
		return false, err
	}
	defer closeAll()
	return backup.RestoreIfEmpty(ctx, locs, cfg.BackupPrefix(), dir, []byte(cfg.Backup.SigningKey), log)
}

// newScheduler wires backup.* into the store's backup scheduler; onRun is
// the metrics' run counter.
func newScheduler(ctx context.Context, cfg *config.Config, st *store.Store, onRun func(string, time.Duration), log *slog.Logger) (*backup.Scheduler, error) {
	locs, closeAll, err := backup.OpenLocations(ctx, cfg.Backup.Primary, cfg.Backup.Secondary)
	if err != nil {
		return nil, err
	}
	o := backup.Options{
		Primary: locs[0], Prefix: cfg.BackupPrefix(), SigningKey: []byte(cfg.Backup.SigningKey),
		Keep: cfg.Backup.Keep, Store: st, Logger: log,
		TempDir: filepath.Join(cfg.Node.DataDir, "tmp", "backup"),
		IntakeOffset: func() int64 {
			if n, ok, err := st.IntakeOffset(); err == nil && ok {
				return n
			}
			return -1
		},
		OnRun: onRun,
	}
	if len(locs) > 1 {
		o.Secondary = locs[1]
	}
	return backup.NewScheduler(backup.SchedulerOptions{
		Backup: o, Interval: time.Duration(cfg.Backup.IntervalMs) * time.Millisecond, Close: closeAll,
	})
}

// incarnations is the store's incarnation rows (store/meta.go) as
// backup.MintIncarnation needs them.
type incarnations struct{ st *store.Store }

func (i incarnations) IncarnationFrom() (string, error) { return i.st.IncarnationFrom() }

// SetIncarnation writes both rows in one synced batch.
func (i incarnations) SetIncarnation(inc, from string) error {
	b := i.st.NewBatch()
	defer b.Close()
	if err := b.SetIncarnation(inc, from); err != nil {
		return err
	}
	return i.st.ApplySync(b)
}

// clearRestoreMarker ends the restored state once nothing else needs it.
func clearRestoreMarker(dir string) error { return backup.RemoveMarker(dir) }

// incarnation reads the store's incarnation ("0" before any restore).
func incarnation(st *store.Store) string {
	v, _ := st.Incarnation()
	return v
}

// BackupCommand serves ankusa backup now|list|verify. "now" backs up a
// stopped node's store (a running node holds the store's lock and backs
// itself up every interval and at a clean stop).
func BackupCommand(ctx context.Context, cfg *config.Config, sub string, log *slog.Logger) (any, error) {
	switch sub {
	case "list", "verify":
		locs, closeAll, err := backup.OpenLocations(ctx, cfg.Backup.Primary, cfg.Backup.Secondary)
		if err != nil {
			return nil, err
		}
		defer closeAll()
		out := map[string]any{}
		var firstErr error
		for i, l := range locs {
			name := []string{"primary", "secondary"}[i]
			if sub == "list" {
				ls, err := backup.List(ctx, l, cfg.BackupPrefix())
				if err != nil {
					return out, err
				}
				out[name] = ls
				continue
			}
			rep, err := backup.Verify(ctx, l, cfg.BackupPrefix(), []byte(cfg.Backup.SigningKey))
			out[name] = rep
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}
		return out, firstErr
	case "now":
		st, err := store.Open(store.Options{Dir: filepath.Join(cfg.Node.DataDir, "store"), Logger: log})
		if err != nil {
			return nil, err
		}
		defer st.Close()
		s, err := newScheduler(ctx, cfg, st, func(string, time.Duration) {}, log)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		return s.Now(ctx)
	}
	return nil, fmt.Errorf("unknown backup command %q", sub)
}

// BackupNow takes a backup immediately (tests and operators' drills).
func (in *Instance) BackupNow(ctx context.Context) error {
	if in.backups == nil {
		return errors.New("backup.enabled is false")
	}
	_, err := in.backups.Now(ctx)
	return err
}
