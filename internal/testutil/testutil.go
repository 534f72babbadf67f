// Package testutil holds the setup that store, queue, edge and drill tests
// share, so that no test copies another's scaffolding.
package testutil

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// Logger discards everything unless the test runs with -v, in which case
// it writes through t.Log so output stays attached to its test.
func Logger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// OpenStore opens a store at dir on fs (nil: the real disk) and closes it
// when the test ends.
func OpenStore(t testing.TB, dir string, fs vfs.FS) *store.Store {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, FS: fs, Logger: Logger(t)})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TempStoreDir is a fresh store directory on the real disk.
func TempStoreDir(t testing.TB) string {
	return filepath.Join(t.TempDir(), "store")
}

// StartQueue builds and starts a queue over st; it is closed when the test
// ends. A failed reopen inside the fence fails the test instead of exiting.
func StartQueue(t testing.TB, st *store.Store, opts queue.Options) *queue.Queue {
	t.Helper()
	if opts.OnFatal == nil {
		opts.OnFatal = func(err error) { t.Errorf("queue fatal: %v", err) }
	}
	if opts.Logger == nil {
		opts.Logger = Logger(t)
	}
	if opts.FenceRetry == 0 {
		opts.FenceRetry = 10 * time.Millisecond
	}
	q, err := queue.New(st, opts)
	if err != nil {
		t.Fatalf("new queue: %v", err)
	}
	q.Start()
	t.Cleanup(q.Close)
	return q
}

// Eventually polls cond until it holds or the deadline passes. It is the one
// polling helper: use it only where no event can be waited on.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Poll is Eventually for a caller that handles the timeout itself (it
// starts again, say): it reports whether cond held before the deadline.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// WALSyncGate is an errorfs injector that controls the WAL's fsyncs: each
// one can be held until released, or failed. It can also fail every open of
// the store (FailOpens), so a Store.Reopen fails. Other file operations pass.
type WALSyncGate struct {
	mu        sync.Mutex
	hold      bool
	failOpens bool
	failN     int           // fail this many upcoming WAL syncs
	stall     time.Duration // every WAL sync takes at least this long
	held      chan chan struct{}
	failed    int
}

// NewWALSyncGate returns a gate that lets everything through until told.
func NewWALSyncGate() *WALSyncGate {
	return &WALSyncGate{held: make(chan chan struct{}, 64)}
}

// Wrap returns fs with the gate in front of it.
func (g *WALSyncGate) Wrap(fs vfs.FS) vfs.FS { return errorfs.Wrap(fs, g) }

// String implements errorfs.Injector.
func (g *WALSyncGate) String() string { return "wal-sync-gate" }

// MaybeError implements errorfs.Injector.
func (g *WALSyncGate) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	case errorfs.OpLock:
		// Pebble takes its LOCK file first thing in every open: failing it
		// fails a Store.Reopen without touching the data.
		g.mu.Lock()
		fail := g.failOpens
		g.mu.Unlock()
		if fail {
			return errorfs.ErrInjected
		}
		return nil
	default:
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	g.mu.Lock()
	hold, fail, stall := g.hold, g.failN > 0, g.stall
	if fail {
		g.failN--
		g.failed++
	}
	g.mu.Unlock()
	if stall > 0 {
		time.Sleep(stall) // the injected fault is a slow disk: it is meant to take this long
	}
	if hold {
		release := make(chan struct{})
		g.held <- release
		<-release
	}
	if fail {
		return errorfs.ErrInjected
	}
	return nil
}

// Hold makes every later WAL sync wait for a Release.
func (g *WALSyncGate) Hold() {
	g.mu.Lock()
	g.hold = true
	g.mu.Unlock()
}

// Open lets later WAL syncs through without waiting.
func (g *WALSyncGate) Open() {
	g.mu.Lock()
	g.hold = false
	g.mu.Unlock()
}

// Held waits for the next WAL sync to be held and returns its release.
func (g *WALSyncGate) Held(t testing.TB) chan struct{} {
	t.Helper()
	return Receive(t, g.held, "no WAL sync reached the gate")
}

// Receive returns the next value from ch, or fails the test with missing
// if none comes within 10 s.
func Receive[T any](t testing.TB, ch <-chan T, missing string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(missing)
		var zero T
		return zero
	}
}

// FailNext makes the next n WAL syncs return an injected error (after any hold).
func (g *WALSyncGate) FailNext(n int) {
	g.mu.Lock()
	g.failN += n
	g.mu.Unlock()
}

// FailOpens makes every later open of the store fail (on) or succeed again.
func (g *WALSyncGate) FailOpens(on bool) {
	g.mu.Lock()
	g.failOpens = on
	g.mu.Unlock()
}

// StallSyncs makes every later WAL sync take d longer (0: no stall): a
// slow disk, for latency cases.
func (g *WALSyncGate) StallSyncs(d time.Duration) {
	g.mu.Lock()
	g.stall = d
	g.mu.Unlock()
}

// StopFailing cancels the failures FailNext asked for and not yet used.
func (g *WALSyncGate) StopFailing() {
	g.mu.Lock()
	g.failN = 0
	g.mu.Unlock()
}

// Failed counts the syncs failed so far.
func (g *WALSyncGate) Failed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// ReleaseAll stops holding and releases every sync held so far.
func (g *WALSyncGate) ReleaseAll() {
	g.Open()
	for {
		select {
		case r := <-g.held:
			close(r)
		default:
			return
		}
	}
}

// StoredRows reads the rows of stored hook seq (store.Store.StoredRows),
// failing the test when the hook is not there.
func StoredRows(t testing.TB, st *store.Store, seq uint64) *store.StoredRows {
	t.Helper()
	v, err := st.ReadHook(seq)
	if err != nil || v == nil {
		t.Fatalf("read hook %d: %v (found: %v)", seq, err, v != nil)
	}
	env, err := store.DecodeEnvelope(v)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.StoredRows(env)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
