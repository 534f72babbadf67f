package admin_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/admin"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/testutil"
)

func wantReady(t *testing.T, r response) {
	t.Helper()
	wantJSON(t, r, http.StatusOK)
	wantField(t, r.body, "status", "ready")
	wantField(t, r.body, "instance", testInstance)
	wantField(t, r.body, "store", "ok")
	wantField(t, r.body, "intake", "up")
}

func wantUnready(t *testing.T, r response, reason string) {
	t.Helper()
	wantJSON(t, r, http.StatusServiceUnavailable)
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After = %q, want 1", ra)
	}
	wantField(t, r.body, "status", "unready")
	wantField(t, r.body, "store", "failing")
	wantField(t, r.body, "instance", testInstance)
	wantField(t, r.body, "reason", reason)
}

func TestAdmin_Ready(t *testing.T) {
	t.Run("healthy store", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		before := e.now()
		wantReady(t, e.get(t, "/ready"))
		if got := e.probeStamp(t); got < before.UnixNano() {
			t.Fatalf("probe key = %d, want a stamp written by this check (>= %d)", got, before.UnixNano())
		}
	})

	t.Run("failed fsync", func(t *testing.T) {
		gate := testutil.NewWALSyncGate()
		e := newEnv(t, envOptions{fs: gate.Wrap(vfs.Default)})
		wantReady(t, e.get(t, "/ready"))

		gate.FailNext(1)
		if _, err := e.q.Submit(context.Background(), record([]byte(`{}`), "")); !errors.Is(err, queue.ErrStoreUnavailable) {
			t.Fatalf("submit over a failing fsync: %v, want ErrStoreUnavailable", err)
		}
		// At once, although the healthy probe above is still cached and the
		// writer may not have entered the fence yet.
		r := e.get(t, "/ready")
		wantJSON(t, r, http.StatusServiceUnavailable)
		if ra := r.header.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After = %q, want 1", ra)
		}
		wantField(t, r.body, "status", "unready")
		wantField(t, r.body, "store", "failing")

		// The fence lifts, but the failure is recent: still unready.
		testutil.Eventually(t, 10*time.Second, "fence lifted", func() bool {
			s := e.q.Stats()
			return s.Fences >= 1 && !s.Fenced
		})
		wantUnready(t, e.get(t, "/ready"), "recent_failure")

		// Past the window, a fresh probe on the reopened store passes.
		e.advance(11 * time.Second)
		wantReady(t, e.get(t, "/ready"))
	})

	t.Run("failed probe write", func(t *testing.T) {
		gate := testutil.NewWALSyncGate()
		e := newEnv(t, envOptions{fs: gate.Wrap(vfs.Default)})
		gate.FailNext(1)
		wantUnready(t, e.get(t, "/ready"), "probe_failed")
		if gate.Failed() != 1 {
			t.Fatalf("failed syncs = %d, want 1: the probe must wait for its fsync", gate.Failed())
		}
	})
}

// The probe writes at most once per second however many callers ask, and
// callers that arrive during a probe share it.
func TestReadiness_ProbeCache(t *testing.T) {
	t.Run("one write per window", func(t *testing.T) {
		e := newEnv(t, envOptions{frozenClock: true})
		t0 := e.now()
		wantReady(t, e.get(t, "/ready"))
		first := e.probeStamp(t)
		if first != t0.UnixNano() {
			t.Fatalf("probe stamp %d, want the clock at the check %d", first, t0.UnixNano())
		}
		e.advance(999 * time.Millisecond)
		for range 5 {
			wantReady(t, e.get(t, "/ready"))
		}
		if got := e.probeStamp(t); got != first {
			t.Fatalf("probe rewritten within the cache window: %d, want %d", got, first)
		}
		e.advance(time.Millisecond)
		wantReady(t, e.get(t, "/ready"))
		if got, want := e.probeStamp(t), t0.Add(time.Second).UnixNano(); got != want {
			t.Fatalf("probe after the window = %d, want a new write at %d", got, want)
		}
	})

	t.Run("concurrent callers share the probe in flight", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		rd := admin.NewReadiness(e.deps)
		var writes atomic.Int32
		entered := make(chan struct{})
		release := make(chan struct{})
		admin.WrapProbeWrite(rd, func(write func(time.Time) error) func(time.Time) error {
			return func(now time.Time) error {
				if writes.Add(1) == 1 {
					close(entered)
				}
				<-release
				return write(now)
			}
		})

		const callers = 16
		var wg sync.WaitGroup
		results := make(chan bool, callers)
		check := func() {
			defer wg.Done()
			ok, _ := rd.Check(context.Background())
			results <- ok
		}
		wg.Add(1)
		go check()
		<-entered // the first probe is in flight
		wg.Add(callers - 1)
		for range callers - 1 {
			go check()
		}
		close(release)
		wg.Wait()
		close(results)
		for ok := range results {
			if !ok {
				t.Fatal("a caller sharing a successful probe was told unready")
			}
		}
		if n := writes.Load(); n != 1 {
			t.Fatalf("probe writes = %d for %d concurrent callers, want 1", n, callers)
		}
	})

	t.Run("a failed probe is cached too", func(t *testing.T) {
		e := newEnv(t, envOptions{frozenClock: true})
		rd := admin.NewReadiness(e.deps)
		var writes atomic.Int32
		admin.WrapProbeWrite(rd, func(func(time.Time) error) func(time.Time) error {
			return func(time.Time) error {
				writes.Add(1)
				return errors.New("injected")
			}
		})
		for range 3 {
			if ok, d := rd.Check(context.Background()); ok || d["reason"] != "probe_failed" {
				t.Fatalf("check = %v %v, want unready probe_failed", ok, d)
			}
		}
		if n := writes.Load(); n != 1 {
			t.Fatalf("probe writes = %d, want 1 within the window", n)
		}
		e.advance(2 * time.Second)
		rd.Check(context.Background())
		if n := writes.Load(); n != 2 {
			t.Fatalf("probe writes after the window = %d, want 2", n)
		}
	})
}

// The admin and ingest ports share one Readiness, so one probe answers both.
func TestReadiness_SharedAcrossPorts(t *testing.T) {
	e := newEnv(t, envOptions{frozenClock: true})
	rd := admin.NewReadiness(e.deps)
	var writes atomic.Int32
	admin.WrapProbeWrite(rd, func(write func(time.Time) error) func(time.Time) error {
		return func(now time.Time) error { writes.Add(1); return write(now) }
	})
	deps := e.deps
	deps.Readiness = rd
	adminH, ingestH := admin.New(deps), admin.HealthHandler(deps, rd)
	wantReady(t, do(t, adminH, http.MethodGet, "/ready"))
	wantReady(t, do(t, ingestH, http.MethodGet, "/ready"))
	if n := writes.Load(); n != 1 {
		t.Fatalf("probe writes = %d across both ports, want 1", n)
	}
}
