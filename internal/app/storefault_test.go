package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

// createBlocker is an errorfs injector that, once armed, holds every file
// creation until released: a reopen of the store on a disk that does not
// answer (a full disk where Pebble keeps retrying is the case seen).
type createBlocker struct {
	armed   atomic.Bool
	hit     chan struct{}
	release chan struct{}
}

func (b *createBlocker) String() string { return "create-blocker" }

func (b *createBlocker) MaybeError(op errorfs.Op) error {
	if op.Kind == errorfs.OpCreate && b.armed.Load() {
		select {
		case b.hit <- struct{}{}:
		default:
		}
		<-b.release
	}
	return nil
}

// While the store is failing — a WAL fsync failed and the reopen that
// follows is stuck on the disk — /v1/wal and /metrics still answer, from
// memory, instead of waiting for the store.
func TestAdmin_WalAndMetricsAnswerDuringAStoreFault(t *testing.T) {
	gate := testutil.NewWALSyncGate()
	blocker := &createBlocker{hit: make(chan struct{}, 1), release: make(chan struct{})}
	cfg := config.Default()
	cfg.Node.DataDir = t.TempDir()
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	cfg.Node.Roles = []string{"ingest"}
	in, err := New(cfg, Options{Logger: testutil.Logger(t), FS: errorfs.Wrap(gate.Wrap(vfs.Default), blocker)})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		blocker.armed.Store(false)
		close(blocker.release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Stop(ctx)
	}()

	blocker.armed.Store(true)
	gate.FailNext(1)
	resp, err := http.Post("http://"+in.IngestAddr()+"/webhooks/demo", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("post whose fsync failed: %d, want 503", resp.StatusCode)
	}
	select {
	case <-blocker.hit: // the reopen is stuck creating its files
	case <-time.After(10 * time.Second):
		t.Fatal("the store was not reopened")
	}

	client := &http.Client{Timeout: 3 * time.Second}
	for _, path := range []string{"/v1/wal", "/metrics"} {
		resp, err := client.Get("http://" + in.AdminAddr() + path)
		if err != nil {
			t.Fatalf("GET %s while the store is stuck: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
	}
}

// enospc fails every file write and creation once armed, as a full disk
// does.
type enospc struct{ armed atomic.Bool }

func (e *enospc) String() string { return "enospc" }

func (e *enospc) MaybeError(op errorfs.Op) error {
	if !e.armed.Load() {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpCreate, errorfs.OpFileSync, errorfs.OpFileSyncData:
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

// A full disk under load: providers get 503 store_unavailable, and the
// log gets one line per kind of failure per interval, not one per attempt
// (dispatch's due scan alone failed ten times a second before).
func TestFullDiskLogIsRateLimited(t *testing.T) {
	full := &enospc{}
	rec := testutil.NewLogRecorder()
	cfg := config.Default()
	cfg.Node.DataDir = t.TempDir()
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	cfg.Dispatch.PollMs = 50
	in, err := New(cfg, Options{Logger: slog.New(rec), FS: errorfs.Wrap(vfs.Default, full), OnFatal: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		full.armed.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Stop(ctx)
	}()
	full.armed.Store(true)
	codes := map[int]int{}
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		resp, err := http.Post("http://"+in.IngestAddr()+"/webhooks/demo", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if len(codes) != 1 || codes[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("answers on a full disk: %v, want only 503", codes)
	}
	lines := append(rec.Matching("ERROR"), rec.Matching("WARN")...)
	shapes := map[string]int{}
	for _, l := range lines {
		msg, _, _ := strings.Cut(l, " component=")
		shapes[msg]++
	}
	t.Logf("%d refused posts in 2 s: %d warning and error lines", codes[http.StatusServiceUnavailable], len(lines))
	for msg, n := range shapes {
		if n > 1 {
			t.Errorf("%q logged %d times in 2 s, want once per %s", msg, n, logRepeatInterval)
		}
	}
}

// A node started on a full disk does not run without its store: New fails
// promptly with ErrStoreOpen (the binary exits ExitStoreOpen), and nothing
// listens.
func TestBootOnAFullDiskFails(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Node.DataDir = dir
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	in, err := New(cfg, Options{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	full := &enospc{}
	full.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		in, err := New(cfg, Options{Logger: testutil.Logger(t), FS: errorfs.Wrap(vfs.Default, full)})
		if err == nil {
			_ = in.Stop(context.Background())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStoreOpen) {
			t.Fatalf("New on a full disk: %v, want ErrStoreOpen", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("New on a full disk did not return in 20 s")
	}
}
