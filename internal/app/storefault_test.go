package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
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
