package memory_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
)

func TestLog_FailNext(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	l.FailNext(2, intake.Unavailable)
	l.FailNext(1, intake.Throttled)
	l.FailNext(1, intake.Permanent)
	for i, want := range []intake.Class{intake.Unavailable, intake.Unavailable, intake.Throttled, intake.Permanent} {
		_, err := l.PublishBatch(ctxT(t), []intake.Record{rec("n1", uint64(i))})
		wantClass(t, err, want)
		if !errors.Is(err, memory.ErrInjected) {
			t.Fatalf("call %d: %v does not wrap ErrInjected", i, err)
		}
		if _, after := intake.ClassOf(err); want == intake.Throttled && after != memory.DefaultThrottle {
			t.Fatalf("throttled retry after %v, want %v", after, memory.DefaultThrottle)
		}
	}
	if l.Published() != 0 || len(l.Records()) != 0 {
		t.Fatalf("a failed publish appended: published %d", l.Published())
	}
	if p := mustPublish(t, l, rec("n1", 9)); p != 0 {
		t.Fatalf("first successful publish at %d, want 0", p)
	}

	custom := &intake.Error{Class: intake.Throttled, RetryAfter: 3 * time.Second, Err: errors.New("slow down")}
	l.FailNextError(1, custom)
	_, err := l.PublishBatch(ctxT(t), []intake.Record{rec("n1", 10)})
	if c, after := intake.ClassOf(err); c != intake.Throttled || after != 3*time.Second {
		t.Fatalf("FailNextError returned %v (%s, %v)", err, c, after)
	}

	l.FailNext(5, intake.Unavailable)
	l.ClearFaults()
	mustPublish(t, l, rec("n1", 11))
}

// FailEarliestNext and FailReplayNext fail exactly the calls queued, with
// the class asked for, count them, and leave the log's records untouched:
// the next call answers as usual.
func TestLog_FailReadsNext(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	r := rec("n1", 1)
	mustPublish(t, l, r)
	l.FailEarliestNext(2, intake.Unavailable)
	l.FailReplayNext(1, intake.Throttled)
	for i := range 2 {
		_, err := l.Earliest(ctxT(t))
		wantClass(t, err, intake.Unavailable)
		if !errors.Is(err, memory.ErrInjected) {
			t.Fatalf("Earliest %d: %v does not wrap ErrInjected", i, err)
		}
	}
	if p, err := l.Earliest(ctxT(t)); err != nil || p != 0 {
		t.Fatalf("Earliest after the faults = %d, %v; want 0", p, err)
	}
	called := 0
	err := l.Replay(ctxT(t), -1, func(intake.Record, intake.Position) error { called++; return nil })
	wantClass(t, err, intake.Throttled)
	if _, after := intake.ClassOf(err); after != memory.DefaultThrottle || called != 0 {
		t.Fatalf("failed Replay: retry after %v, fn called %d times; want %v and 0", after, called, memory.DefaultThrottle)
	}
	var got []intake.Record
	if err := l.Replay(ctxT(t), -1, func(r intake.Record, _ intake.Position) error { got = append(got, r); return nil }); err != nil {
		t.Fatalf("Replay after the fault: %v", err)
	}
	equalRecords(t, got, []intake.Record{r})
	if n := l.ReadFailures(); n != 3 {
		t.Fatalf("ReadFailures = %d, want 3", n)
	}
	l.FailEarliestNext(5, intake.Unavailable)
	l.FailReplayNext(5, intake.Unavailable)
	l.ClearFaults()
	if _, err := l.Earliest(ctxT(t)); err != nil {
		t.Fatalf("Earliest after ClearFaults: %v", err)
	}
	if err := l.Replay(ctxT(t), -1, func(intake.Record, intake.Position) error { return nil }); err != nil {
		t.Fatalf("Replay after ClearFaults: %v", err)
	}
}

func TestLog_TimeoutAfterAppendNext(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	r := rec("n1", 1)
	l.TimeoutAfterAppendNext(1)
	_, err := l.PublishBatch(ctxT(t), []intake.Record{r})
	wantClass(t, err, intake.Unavailable)
	if !errors.Is(err, memory.ErrAckLost) || !errors.Is(err, memory.ErrInjected) {
		t.Fatalf("%v does not wrap ErrAckLost and ErrInjected", err)
	}
	// The log holds the record the caller thinks failed; the republish
	// writes it twice, and replay returns both.
	equalRecords(t, l.Records(), []intake.Record{r})
	if p := mustPublish(t, l, r); p != 1 {
		t.Fatalf("republish at %d, want 1", p)
	}
	equalRecords(t, l.Records(), []intake.Record{r, r})
	if l.Published() != 2 {
		t.Fatalf("published %d, want 2", l.Published())
	}
}

// A lost ack is consumed only by a call that appends.
func TestLog_TimeoutAfterAppendNextSkipsFailedCalls(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	l.FailNext(1, intake.Unavailable)
	l.TimeoutAfterAppendNext(1)
	_, err := l.PublishBatch(ctxT(t), []intake.Record{rec("n1", 1)})
	if errors.Is(err, memory.ErrAckLost) {
		t.Fatalf("the FailNext call consumed the lost ack: %v", err)
	}
	_, err = l.PublishBatch(ctxT(t), []intake.Record{rec("n1", 1)})
	if !errors.Is(err, memory.ErrAckLost) {
		t.Fatalf("second call: %v, want a lost ack", err)
	}
	mustPublish(t, l, rec("n1", 2))
}

func TestLog_HangUntilDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := open(t, t.TempDir(), "n1")
		l.Hang()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := l.PublishBatch(ctx, []intake.Record{rec("n1", 1)})
		wantClass(t, err, intake.Unavailable)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v does not wrap the deadline", err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("returned after %v, want the 2s deadline", d)
		}
		if l.Published() != 0 || l.Hung() != 0 {
			t.Fatalf("published %d, hung %d after the deadline", l.Published(), l.Hung())
		}
	})
}

func TestLog_HangUntilUnhang(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	l.Hang()
	type result struct {
		pos intake.Position
		err error
	}
	done := make(chan result, 2)
	for i := range 2 {
		go func() {
			p, err := l.PublishBatch(ctxT(t), []intake.Record{rec("n1", uint64(i))})
			done <- result{p, err}
		}()
	}
	if err := l.WaitHung(ctxT(t), 2); err != nil {
		t.Fatal(err)
	}
	if l.Published() != 0 {
		t.Fatal("a hung publish appended")
	}
	select {
	case r := <-done:
		t.Fatalf("a hung publish returned %+v", r)
	default:
	}
	l.Unhang()
	seen := map[intake.Position]bool{}
	for range 2 {
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		seen[r.pos] = true
	}
	if !seen[0] || !seen[1] || l.Published() != 2 {
		t.Fatalf("positions %v, published %d", seen, l.Published())
	}
	mustPublish(t, l, rec("n1", 3)) // no longer hung
}

func TestLog_CloseReleasesHang(t *testing.T) {
	dir := t.TempDir()
	l, err := memory.Open(memory.Options{Dir: dir, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	l.Hang()
	done := make(chan error, 1)
	go func() {
		_, err := l.PublishBatch(ctxT(t), []intake.Record{rec("n1", 1)})
		done <- err
	}()
	if err := l.WaitHung(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, memory.ErrClosed) {
		t.Fatalf("hung publish after close: %v", err)
	}
}

func TestLog_ConfirmLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := memory.Open(memory.Options{Dir: t.TempDir(), Node: "n1", ConfirmLatency: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		start := time.Now()
		mustPublish(t, l, rec("n1", 1))
		if d := time.Since(start); d != 5*time.Millisecond {
			t.Fatalf("confirmed after %v, want 5ms", d)
		}

		// Concurrent publishes wait their latency in parallel.
		l.SetConfirmLatency(30 * time.Millisecond)
		start = time.Now()
		errs := make(chan error, 3)
		for i := range 3 {
			go func() {
				_, err := l.PublishBatch(t.Context(), []intake.Record{rec("n1", uint64(10+i))})
				errs <- err
			}()
		}
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != 30*time.Millisecond {
			t.Fatalf("three concurrent confirms took %v, want 30ms", d)
		}
	})
}

// ctx ending during the confirm latency is a lost ack: the records are in
// the log, the call fails.
func TestLog_ConfirmLatencyHonoursCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := open(t, t.TempDir(), "n1")
		l.SetConfirmLatency(time.Hour)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		r := rec("n1", 1)
		_, err := l.PublishBatch(ctx, []intake.Record{r})
		wantClass(t, err, intake.Unavailable)
		if !errors.Is(err, memory.ErrAckLost) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v does not wrap ErrAckLost and the deadline", err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("returned after %v, want the 2s deadline", d)
		}
		equalRecords(t, l.Records(), []intake.Record{r})
	})
}

// A ctx that ended before the append appends nothing.
func TestLog_PublishWithEndedCtx(t *testing.T) {
	l := open(t, t.TempDir(), "n1")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := l.PublishBatch(ctx, []intake.Record{rec("n1", 1)})
	wantClass(t, err, intake.Unavailable)
	if !errors.Is(err, context.Canceled) || l.Published() != 0 {
		t.Fatalf("%v, published %d", err, l.Published())
	}
}
