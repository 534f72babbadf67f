package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/ops"
)

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", "", "config file (default $ANKUSA_CONFIG, then ./ankusa.yml, then the built-in demo)")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	cfg, err := config.Load(*path, nil)
	if err != nil {
		return configError(err)
	}
	log := newLogger(cfg.Log)
	slog.SetDefault(log)
	raiseFDLimit(log)
	var memLimit int64
	if os.Getenv("GOMEMLIMIT") == "" {
		// The garbage collector works harder as the heap nears the
		// ceiling instead of letting it double past it (GOGC's default).
		memLimit = app.MemoryCeiling(cfg)
		debug.SetMemoryLimit(memLimit)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fatal := make(chan error, 1)
	in, err := app.New(cfg, app.Options{
		Logger:  log,
		Version: version,
		Commit:  commit,
		OnFatal: func(err error) {
			select {
			case fatal <- err:
			default:
			}
		},
	})
	var cerr *config.Error
	if errors.As(err, &cerr) {
		return configError(err) // a certificate file named by the config
	}
	if err != nil {
		log.Error("start failed", "err", err)
		if errors.Is(err, app.ErrStoreOpen) {
			return app.ExitStoreOpen
		}
		return 1
	}
	if memLimit > 0 {
		log.Info("memory limit", "bytes", memLimit)
	}
	// SIGHUP reloads the TLS certificates (a rotation by cert-manager or
	// certbot); nothing else is re-read.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	hupDone := make(chan struct{})
	defer close(hupDone)
	go func() {
		for {
			select {
			case <-hup:
				if err := in.ReloadTLS(); err != nil {
					log.Error("TLS reload failed; the certificates in use stay", "err", err)
				}
			case <-hupDone:
				return
			}
		}
	}()
	if err := in.StartContext(ctx); err != nil {
		log.Error("start failed", "err", err)
		_ = in.Stop(context.Background())
		return 1
	}
	// StartContext returns once the node serves (boot recovery done), which
	// is what Type=notify's READY=1 means to systemd.
	notify := ops.NewNotifier(nil)
	if err := notify.Notify(ops.StateReady, "STATUS=serving"); err != nil {
		log.Warn("systemd notify", "err", err)
	}
	code := 0
	select {
	case <-ctx.Done():
	case err := <-fatal:
		log.Error("store cannot be reopened after a write failure; exiting so the supervisor restarts the node", "err", err)
		code = app.ExitStoreFatal
	}
	if err := notify.Notify(ops.StateStopping, "STATUS=draining"); err != nil {
		log.Warn("systemd notify", "err", err)
	}
	// The drain is bounded by http.shutdown_timeout_ms; a drain that had
	// to cut requests still in progress exits 1, so a supervisor (and an
	// operator reading the exit status) knows some client got no answer.
	drain := time.Duration(cfg.HTTP.ShutdownTimeoutMs) * time.Millisecond
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := in.Stop(sctx); err != nil {
		log.Error("stop did not finish cleanly", "err", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// raiseFDLimit lifts the soft descriptor limit to the hard one: the
// connection caps are sized from it (app.capConns), and a low soft limit
// would otherwise cap a node far below what the host allows. Go's runtime
// does the same at start on Linux; doing it here too logs it and does not
// depend on that.
func raiseFDLimit(log *slog.Logger) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("cannot read the descriptor limit", "err", err)
		return
	}
	if rl.Cur >= rl.Max {
		return
	}
	old := rl.Cur
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("cannot raise the descriptor limit", "soft", old, "hard", rl.Max, "err", err)
		return
	}
	log.Info("raised the descriptor limit", "from", old, "to", rl.Max)
}

// configError prints one line naming every violated key and its rule, and
// returns 78 (EX_CONFIG) so a supervisor does not restart into the same error.
func configError(err error) int {
	// err names the file ("config ./ankusa.yml: …") and every violation,
	// joined with "; ". Folding white space keeps YAML parser output on the
	// one line too.
	msg := strings.Join(strings.Fields(err.Error()), " ")
	fmt.Fprintf(os.Stderr, "ankusa: invalid config: %s\n", msg)
	return config.ExitConfig
}

func newLogger(c config.LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
