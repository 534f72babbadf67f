package sources

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/testutil"
)

type holdSink struct {
	entered chan struct{}
	release chan struct{}
	closed  atomic.Int32
	after   atomic.Bool // Deliver ran after Close
}

func (h *holdSink) Deliver(ctx context.Context, _ *sink.Message) error {
	if h.closed.Load() > 0 {
		h.after.Store(true)
	}
	h.entered <- struct{}{}
	<-h.release
	return nil
}

func (h *holdSink) Close() error { h.closed.Add(1); return nil }

func TestGuarded_ClosesAfterLastAttempt(t *testing.T) {
	h := &holdSink{entered: make(chan struct{}, 1), release: make(chan struct{})}
	g := newGuarded("out", h, testutil.Logger(t))
	done := make(chan error, 1)
	go func() { done <- g.Deliver(context.Background(), &sink.Message{}) }()
	<-h.entered

	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if n := h.closed.Load(); n != 0 {
		t.Fatalf("inner closed %d times while an attempt runs", n)
	}
	if err := g.Deliver(context.Background(), &sink.Message{}); !errors.Is(err, errRetired) {
		t.Errorf("Deliver after Close = %v, want errRetired", err)
	}
	close(h.release)
	if err := <-done; err != nil {
		t.Errorf("running attempt = %v", err)
	}
	if n := h.closed.Load(); n != 1 {
		t.Errorf("inner closed %d times after the last attempt, want 1", n)
	}
	_ = g.Close()
	if n := h.closed.Load(); n != 1 || h.after.Load() {
		t.Errorf("closed %d times, delivered after close: %v", n, h.after.Load())
	}
	if permanent, _ := sink.Classify(errRetired); permanent {
		t.Error("errRetired must be transient: the retry finds the current target")
	}
}

func TestGuarded_IdleCloseIsImmediate(t *testing.T) {
	h := &holdSink{entered: make(chan struct{}, 1), release: make(chan struct{})}
	g := newGuarded("out", h, testutil.Logger(t))
	_ = g.Close()
	_ = g.Close()
	if n := h.closed.Load(); n != 1 {
		t.Errorf("closed %d times, want 1", n)
	}
}
