// Package apptest holds the test helpers that need the app's wiring: whole
// instances in the test process for the tests outside internal/app
// (end-to-end, console, deployment, examples; Start, Boot), so that none of
// them copies the build, start and stop block, and API-managed sources
// under the binary's source rules (SourcesEnv, sources.go). It is a package
// of its own so that plain testutil users do not link every stage of the
// binary; tests inside internal/app cannot import it (an import cycle) and
// use their own startForTest.
package apptest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

// stopBound bounds a test instance's Stop: it fails a hung stop instead of
// letting the test run to its timeout; no test asserts how fast a stop is.
const stopBound = 30 * time.Second

// Start builds an instance from cfg (the caller validates it) with opts
// (a nil Logger is testutil.Logger), starts it and stops it when the test
// ends; a failed New, Start or Stop fails the test.
func Start(t testing.TB, cfg *config.Config, opts app.Options) *app.Instance {
	t.Helper()
	in, _ := StartStoppable(t, cfg, opts)
	return in
}

// StartStoppable is Start that also returns the stop, for a test that
// stops the instance itself (to restart on the same data dir, say). The
// stop runs once, whether called or left to the cleanup.
func StartStoppable(t testing.TB, cfg *config.Config, opts app.Options) (*app.Instance, func()) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testutil.Logger(t)
	}
	in, err := app.New(cfg, opts)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := in.Start(); err != nil {
		// Start failed part way: stop what it started, as the binary does.
		_ = in.Stop(context.Background())
		t.Fatalf("Start: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), stopBound)
			defer cancel()
			if err := in.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return in, stop
}

// Boot builds, starts and stops an instance from cfg and returns the first
// error of the three, for a test about whether a boot is refused.
func Boot(t testing.TB, cfg *config.Config, opts app.Options) error {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testutil.Logger(t)
	}
	in, err := app.New(cfg, opts)
	if err != nil {
		return err
	}
	err = in.Start()
	if serr := in.Stop(context.Background()); err == nil {
		err = serr
	}
	return err
}
