package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/store"
)

// restoreIfEmpty restores the latest backup into an empty store dir
// (primary, then secondary). It reports whether a restore happened. A
// location that cannot be read refuses boot: starting fresh could forget
// hooks it holds. No backup anywhere starts fresh.
func restoreIfEmpty(ctx context.Context, cfg *config.Config, dir string, log *slog.Logger) (bool, error) {
	if !cfg.Backup.Enabled {
		return false, nil
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return false, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", dir, err)
	}
	locs, closeAll, err := openLocations(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer closeAll()
	m, used, err := backup.RestoreFirst(ctx, locs, cfg.BackupPrefix(), dir, []byte(cfg.Backup.SigningKey))
	if errors.Is(err, backup.ErrNoBackup) {
		log.Info("no backup to restore; starting a fresh store", "prefix", cfg.BackupPrefix())
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("restore from backup: %w", err)
	}
	log.Warn("store restored from backup", "backup", m.ID, "created_at", m.CreatedAt, "intake_offset", m.IntakeOffset, "location", used)
	return true, nil
}

func openLocations(ctx context.Context, cfg *config.Config) ([]backup.Store, func(), error) {
	var locs []backup.Store
	var buckets []*backup.Bucket
	closeAll := func() {
		for _, b := range buckets {
			_ = b.Close()
		}
	}
	for _, u := range []string{cfg.Backup.Primary, cfg.Backup.Secondary} {
		if u == "" {
			continue
		}
		b, err := backup.OpenBucket(ctx, u)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open backup location: %w", err)
		}
		buckets = append(buckets, b)
		locs = append(locs, b)
	}
	return locs, closeAll, nil
}

// mintIncarnation gives a restored store a new incarnation (DUR-6), once
// per restore. It reports whether the store is (still) a restored one: the
// restore marker stays until boot recovery has succeeded (see
// clearRestoreMarker), so a refused recovery — a truncated log — is refused
// again at every boot instead of passing as an ordinary restart.
func mintIncarnation(st *store.Store, dir string) (bool, error) {
	id, ok, err := backup.ReadMarker(dir)
	if err != nil || !ok {
		return false, err
	}
	if v, _ := st.IncarnationFrom(); v == id {
		return true, nil
	}
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	b := st.NewBatch()
	defer b.Close()
	_ = b.SetIncarnation(hex.EncodeToString(raw[:]), id)
	if err := st.ApplySync(b); err != nil {
		return true, fmt.Errorf("mint incarnation: %w", err)
	}
	return true, nil
}

// clearRestoreMarker ends the restored state once nothing else needs it.
func clearRestoreMarker(dir string) error { return backup.RemoveMarker(dir) }

// incarnation reads the store's incarnation ("0" before any restore).
func incarnation(st *store.Store) string {
	v, _ := st.Incarnation()
	return v
}

// backupLoop runs a backup every interval_ms, backs off after a failure,
// and takes a final one on a clean stop.
type backupLoop struct {
	b        *backup.Backuper
	closeLoc func()
	interval time.Duration
	log      *slog.Logger
	lastOK   atomic.Int64 // unix ns of the newest successful backup
	cancel   context.CancelFunc
	done     chan struct{}
}

func newBackupLoop(ctx context.Context, cfg *config.Config, st *store.Store, onRun func(string, time.Duration), log *slog.Logger) (*backupLoop, error) {
	locs, closeAll, err := openLocations(ctx, cfg)
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
	}
	if len(locs) > 1 {
		o.Secondary = locs[1]
	}
	l := &backupLoop{closeLoc: closeAll, interval: time.Duration(cfg.Backup.IntervalMs) * time.Millisecond, log: log.With("component", "backup")}
	o.OnRun = func(result string, d time.Duration) {
		if result == "ok" {
			l.lastOK.Store(time.Now().UnixNano())
		}
		onRun(result, d)
	}
	if err := os.MkdirAll(o.TempDir, 0o755); err != nil {
		closeAll()
		return nil, err
	}
	b, err := backup.New(o)
	if err != nil {
		closeAll()
		return nil, err
	}
	l.b = b
	return l, nil
}

func (l *backupLoop) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		wait := l.interval
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if _, err := l.b.Run(ctx); err != nil && ctx.Err() == nil {
				// Back off, up to the interval, so a failing location is not
				// hammered, but retried well before the backup goes stale.
				l.log.Error("backup failed", "err", err)
				wait = min(max(wait/2, 5*time.Second), l.interval)
				continue
			}
			wait = l.interval
		}
	}()
}

// stop ends the loop and takes the final backup of a clean stop.
func (l *backupLoop) stop(ctx context.Context) error {
	if l.cancel != nil {
		l.cancel()
		<-l.done
	}
	defer l.closeLoc()
	if _, err := l.b.Run(ctx); err != nil {
		return fmt.Errorf("final backup: %w", err)
	}
	return nil
}

// age is how old the newest successful backup of this process is.
func (l *backupLoop) age() time.Duration {
	ns := l.lastOK.Load()
	if ns == 0 {
		return 0
	}
	return time.Since(time.Unix(0, ns))
}

// BackupCommand serves ankusa backup now|list|verify. "now" backs up a
// stopped node's store (a running node holds the store's lock and backs
// itself up every interval and at a clean stop).
func BackupCommand(ctx context.Context, cfg *config.Config, sub string, log *slog.Logger) (any, error) {
	locs, closeAll, err := openLocations(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	switch sub {
	case "list":
		out := map[string]any{}
		for i, l := range locs {
			ls, err := backup.List(ctx, l, cfg.BackupPrefix())
			if err != nil {
				return out, err
			}
			out[[]string{"primary", "secondary"}[i]] = ls
		}
		return out, nil
	case "verify":
		out := map[string]any{}
		var firstErr error
		for i, l := range locs {
			rep, err := backup.Verify(ctx, l, cfg.BackupPrefix(), []byte(cfg.Backup.SigningKey))
			out[[]string{"primary", "secondary"}[i]] = rep
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
		l, err := newBackupLoop(ctx, cfg, st, func(string, time.Duration) {}, log)
		if err != nil {
			return nil, err
		}
		defer l.closeLoc()
		return l.b.Run(ctx)
	}
	return nil, fmt.Errorf("unknown backup command %q", sub)
}

// BackupNow takes a backup immediately (tests and operators' drills).
func (in *Instance) BackupNow(ctx context.Context) error {
	if in.backups == nil {
		return errors.New("backup.enabled is false")
	}
	_, err := in.backups.b.Run(ctx)
	return err
}
