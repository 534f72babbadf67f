package sources

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/logsink"
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

// boundedHold is a holdSink that bounds its attempts itself (sink.Bounded).
type boundedHold struct{ *holdSink }

func (boundedHold) AttemptBound() time.Duration { return 1500 * time.Millisecond }

// TestGuarded_TargetDoesNoIOExactlyWhenItsSinkDoesNone: an API source's
// log sink reaches the dispatcher as a sink that does no I/O (sink.NoIO),
// so its attempts get no deadline and their own worker, as a configured
// source's do, and that reads no body (sink.BodyFree), so none is read
// back for it; an http sink keeps its own bound (sink.Bounded), so its
// attempts get that one deadline; any other sink is none of these.
// Before, the guard hid them.
func TestGuarded_TargetDoesNoIOExactlyWhenItsSinkDoesNone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner sink.Sink
		noIO  bool // and body-free: the log sink is both
		bound time.Duration
	}{
		{"the log sink", logsink.New(testutil.Logger(t)), true, 0},
		{"a sink that bounds its attempts", boundedHold{&holdSink{}}, false, 1500 * time.Millisecond},
		{"a sink that does I/O", &holdSink{}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := newGuarded("out", tc.inner, testutil.Logger(t)).target()
			if _, got := target.(sink.NoIO); got != tc.noIO {
				t.Fatalf("target implements sink.NoIO: %v, want %v", got, tc.noIO)
			}
			if _, got := target.(sink.BodyFree); got != tc.noIO {
				t.Fatalf("target implements sink.BodyFree: %v, want %v", got, tc.noIO)
			}
			var bound time.Duration
			if b, ok := target.(sink.Bounded); ok {
				bound = b.AttemptBound()
			}
			if bound != tc.bound {
				t.Fatalf("target's attempt bound: %v, want %v (0: not sink.Bounded)", bound, tc.bound)
			}
			if tc.noIO {
				if err := target.Deliver(context.Background(), &sink.Message{}); err != nil {
					t.Fatalf("Deliver through the guard: %v", err)
				}
			}
			if err := target.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
