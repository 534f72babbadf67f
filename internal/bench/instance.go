package bench

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
)

// instanceConfig is config.Default() (the demo source with its log sink)
// on loopback, free ports, data under dir, with the given node roles, and
// under ModeDual wal.type=dual with the memory intake log in dir/intake
// (outside the store, as the validation requires) confirming confirmMs
// after its own fsync.
func instanceConfig(dir string, mode Mode, confirmMs int, roles []string) *config.Config {
	cfg := config.Default()
	cfg.Node.DataDir = dir
	cfg.Node.Instance = "bench"
	cfg.Node.Roles = append([]string(nil), roles...)
	cfg.HTTP.IP = "127.0.0.1"
	cfg.HTTP.Port = 0
	cfg.Admin.IP = "127.0.0.1"
	cfg.Admin.Port = 0
	if mode == ModeDual {
		cfg.WAL.Type = "dual"
		cfg.Intake.Type = "memory"
		cfg.Intake.NodeID = "bench"
		cfg.Intake.Memory = &config.IntakeMemory{Path: filepath.Join(dir, "intake"), ConfirmLatencyMs: confirmMs}
		// Dual requires backups; none runs inside a measured window (the
		// interval is an hour), only the final one at stop.
		cfg.Backup = config.BackupConfig{
			Enabled: true, IntervalMs: 3_600_000, MaxAgeMs: 7_200_000, Keep: 1,
			Primary: "file://" + filepath.Join(dir, "backups"), SigningKey: "bench-signing-key-0123",
		}
	}
	return cfg
}

// startInstance validates cfg, builds and starts an instance; stop drains
// and closes it.
func startInstance(cfg *config.Config, log *slog.Logger) (in *app.Instance, stop func(), err error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	in, err = app.New(cfg, app.Options{Logger: log, Version: "bench"})
	if err != nil {
		return nil, nil, err
	}
	if err := in.Start(); err != nil {
		_ = in.Stop(context.Background())
		return nil, nil, err
	}
	return in, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = in.Stop(sctx)
	}, nil
}
