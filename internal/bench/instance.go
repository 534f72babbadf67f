package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ankusa/ankusa/internal/app"
)

// instanceSpec is the loopback instance of mode: the default config (the
// demo source with its log sink), free ports, data under dir, the given
// node roles; under ModeDual wal.type=dual with the memory intake log
// confirming confirmMs after its own fsync, in intakeDir ("" : under dir)
// (app.LocalSpec).
func instanceSpec(dir string, mode Mode, confirmMs int, roles []string, intakeDir string) app.LocalSpec {
	return app.LocalSpec{Dir: dir, Roles: roles, Dual: mode == ModeDual, ConfirmMs: confirmMs, IntakeDir: intakeDir}
}

// IntakeAuto and IntakeSame are the two named places of the dual mode's
// memory intake log (Options.IntakeDir).
const (
	// IntakeAuto puts the log on /dev/shm when that is a tmpfs, else on
	// the data dir's disk.
	IntakeAuto = "auto"
	// IntakeSame puts the log on the data dir's disk, beside the store.
	IntakeSame = "same"
)

// intakeRoot resolves Options.IntakeDir to the parent of the per-run log
// dirs: "" for the run's own data dir.
func intakeRoot(opt string) string {
	switch opt {
	case "", IntakeSame:
		return ""
	case IntakeAuto:
		if fsType("/dev/shm") == "tmpfs" {
			return "/dev/shm"
		}
		return ""
	}
	return opt
}

// runIntakeDir makes a fresh memory intake log dir for one run of mode
// under the place opt names (Options.IntakeDir), and returns a remover;
// "" when the run has no log (disk) or keeps it in its own data dir.
func runIntakeDir(mode Mode, opt, prefix string) (string, func(), error) {
	root := intakeRoot(opt)
	if mode != ModeDual || root == "" {
		return "", func() {}, nil
	}
	d, err := os.MkdirTemp(root, "ankusa-intake-"+prefix)
	if err != nil {
		return "", nil, fmt.Errorf("bench: intake dir: %w", err)
	}
	return d, func() { _ = os.RemoveAll(d) }, nil
}

// intakeWhere describes where the dual mode's log is, for the headers.
func intakeWhere(root string) string {
	if root == "" {
		return "a file-backed log on the same disk as the store, fsynced per publish"
	}
	return fmt.Sprintf("a file-backed log on %s (%s), fsynced per publish: like a broker's, its fsync does not share the store's disk (-intake-dir same puts it there)", root, dataDirFS(root))
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
