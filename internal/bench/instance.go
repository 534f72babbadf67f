package bench

import (
	"context"
	"log/slog"
	"time"

	"github.com/ankusa/ankusa/internal/app"
)

// instanceSpec is the loopback instance of mode: the default config (the
// demo source with its log sink), free ports, data under dir, the given
// node roles; under ModeDual wal.type=dual with the memory intake log
// confirming confirmMs after its own fsync (app.LocalSpec).
func instanceSpec(dir string, mode Mode, confirmMs int, roles []string) app.LocalSpec {
	return app.LocalSpec{Dir: dir, Roles: roles, Dual: mode == ModeDual, ConfirmMs: confirmMs}
}

// startInstance validates spec, builds and starts an instance; stop drains
// and closes it.
func startInstance(spec app.LocalSpec, log *slog.Logger) (in *app.Instance, stop func(), err error) {
	in, err = app.NewLocal(spec, app.Options{Logger: log, Version: "bench"})
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
