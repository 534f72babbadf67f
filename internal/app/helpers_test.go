package app

import (
	"context"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

// startForTest builds an instance from cfg (the caller validates it),
// starts it and stops it when the test ends; a failed New, Start or Stop
// fails the test. It is app/apptest.Start for the tests inside this
// package, which cannot import that package (an import cycle).
func startForTest(t *testing.T, cfg *config.Config) *Instance {
	t.Helper()
	in, err := New(cfg, Options{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := in.Start(); err != nil {
		_ = in.Stop(context.Background())
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		// A bound, not an assertion: a hung stop fails the test.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := in.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return in
}
