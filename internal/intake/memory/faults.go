package memory

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
)

var (
	// ErrInjected is wrapped by every failure a fault injection produces
	// (FailNext, FailEarliestNext, FailReplayNext, TimeoutAfterAppendNext).
	ErrInjected = errors.New("injected fault")
	// ErrAckLost is wrapped by the error of a PublishBatch whose records
	// were appended and fsynced but whose confirm did not reach the caller
	// (TimeoutAfterAppendNext, or ctx ending during the confirm latency).
	ErrAckLost = errors.New("records appended, ack lost")
)

// DefaultThrottle is the RetryAfter of a Throttled failure injected with
// FailNext. FailNextError injects any other value.
const DefaultThrottle = 100 * time.Millisecond

// faults holds the injected behaviour of PublishBatch, Earliest and
// Replay. Its methods are safe for concurrent use and never wait on an
// append in progress.
type faults struct {
	mu       sync.Mutex
	fail     []error       // FIFO, one entry per PublishBatch call to fail
	earliest []error       // FIFO, one entry per Earliest call to fail
	replay   []error       // FIFO, one entry per Replay call to fail
	reads    int           // Earliest and Replay calls failed by injection
	lostAcks int           // appends whose ack is lost
	hang     chan struct{} // non-nil while hung; closed by unhang
	hung     int           // calls blocked in waitHang
	changed  chan struct{} // closed and replaced whenever hung changes
}

func (f *faults) failNext(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.fail = append(f.fail, err)
	}
}

// takeFailure pops the next injected failure, or returns nil.
func (f *faults) takeFailure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fail) == 0 {
		return nil
	}
	err := f.fail[0]
	f.fail = f.fail[1:]
	return err
}

// failReads queues n failures on q (&f.earliest or &f.replay).
func (f *faults) failReads(q *[]error, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		*q = append(*q, err)
	}
}

// takeRead pops the next injected failure of q, or returns nil.
func (f *faults) takeRead(q *[]error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(*q) == 0 {
		return nil
	}
	err := (*q)[0]
	*q = (*q)[1:]
	f.reads++
	return err
}

func (f *faults) readFailures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *faults) loseAcks(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lostAcks += max(n, 0)
}

// takeLostAck reports whether the append that just landed loses its ack.
func (f *faults) takeLostAck() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lostAcks == 0 {
		return false
	}
	f.lostAcks--
	return true
}

func (f *faults) clear() {
	f.mu.Lock()
	f.fail = nil
	f.earliest, f.replay = nil, nil
	f.lostAcks = 0
	f.mu.Unlock()
	f.unhang()
}

func (f *faults) setHang() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hang == nil {
		f.hang = make(chan struct{})
	}
}

func (f *faults) unhang() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hang != nil {
		close(f.hang)
		f.hang = nil
	}
}

// signalLocked wakes every WaitHung. REQUIRES: f.mu held.
func (f *faults) signalLocked() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// waitHang blocks while the log is hung, until unhang (nil) or the end of
// ctx (ctx.Err()).
func (f *faults) waitHang(ctx context.Context) error {
	f.mu.Lock()
	ch := f.hang
	if ch == nil {
		f.mu.Unlock()
		return nil
	}
	f.hung++
	f.signalLocked()
	f.mu.Unlock()

	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	}

	f.mu.Lock()
	f.hung--
	f.signalLocked()
	f.mu.Unlock()
	return err
}

func (f *faults) hungCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hung
}

// waitHung blocks until at least n calls are hung, or ctx ends.
func (f *faults) waitHung(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if f.hung >= n {
			f.mu.Unlock()
			return nil
		}
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SetConfirmLatency sets the least time from a batch's append to its
// confirm (Options.ConfirmLatency at Open): the append and fsync run inside
// it, so a confirm comes after both the fsync and the latency. Concurrent
// publishes wait theirs in parallel, as a broker pipelines acks.
func (l *Log) SetConfirmLatency(d time.Duration) { l.latency.Store(int64(max(d, 0))) }

// FailNext makes the next n PublishBatch calls fail with an error of class
// c, wrapping ErrInjected, without appending anything. A Throttled failure
// carries RetryAfter DefaultThrottle. Calls queue: FailNext(1, Unavailable)
// then FailNext(1, Permanent) fails one call of each, in that order.
func (l *Log) FailNext(n int, c intake.Class) { l.faults.failNext(n, injected(c)) }

// FailNextError is FailNext with the exact error to return (for example an
// *intake.Error with a chosen RetryAfter, or an unclassified error).
func (l *Log) FailNextError(n int, err error) { l.faults.failNext(n, err) }

// injected is the classified error FailNext and the read faults return.
func injected(c intake.Class) error {
	e := &intake.Error{Class: c, Err: ErrInjected}
	if c == intake.Throttled {
		e.RetryAfter = DefaultThrottle
	}
	return e
}

// FailEarliestNext makes the next n Earliest calls fail with an error of
// class c wrapping ErrInjected (Throttled: RetryAfter DefaultThrottle): a
// log that answers "temporarily unavailable" to boot recovery's truncation
// check, as JetStream does just after its servers come back.
func (l *Log) FailEarliestNext(n int, c intake.Class) {
	l.faults.failReads(&l.faults.earliest, n, injected(c))
}

// FailReplayNext makes the next n Replay calls fail with an error of class
// c wrapping ErrInjected (Throttled: RetryAfter DefaultThrottle), before
// any record is passed to fn.
func (l *Log) FailReplayNext(n int, c intake.Class) {
	l.faults.failReads(&l.faults.replay, n, injected(c))
}

// ReadFailures returns how many Earliest and Replay calls an injected
// failure has failed so far: a test waits on it to know that a caller met
// the fault (and retried), without a sleep.
func (l *Log) ReadFailures() int { return l.faults.readFailures() }

// TimeoutAfterAppendNext makes the next n appends lose their ack: the
// records are appended and fsynced (they are in the log, and Replay returns
// them), then PublishBatch returns an Unavailable error wrapping ErrAckLost
// and ErrInjected, as if the confirm timed out. Only calls that reach the
// append consume one.
func (l *Log) TimeoutAfterAppendNext(n int) { l.faults.loseAcks(n) }

// Hang makes PublishBatch block before appending, until ctx ends (it then
// returns an Unavailable error wrapping ctx.Err(), having appended nothing)
// or Unhang (it then proceeds as usual). Hung and WaitHung observe the
// blocked calls, so a test needs no sleep to know a publish is held.
func (l *Log) Hang() { l.faults.setHang() }

// Unhang releases every call blocked by Hang; later calls do not block.
func (l *Log) Unhang() { l.faults.unhang() }

// Hung returns how many PublishBatch calls are blocked by Hang now.
func (l *Log) Hung() int { return l.faults.hungCalls() }

// WaitHung blocks until at least n PublishBatch calls are blocked by Hang,
// or ctx ends.
func (l *Log) WaitHung(ctx context.Context, n int) error { return l.faults.waitHung(ctx, n) }

// ClearFaults drops the queued FailNext, FailEarliestNext and
// FailReplayNext failures and lost acks and
// releases a Hang. The confirm latency and the ready flag are settings and
// stay as they are.
func (l *Log) ClearFaults() { l.faults.clear() }

// SetReady sets what Ready reports (true at Open).
func (l *Log) SetReady(ready bool) { l.ready.Store(ready) }

// CopyTo writes a copy of this node's log, as it stands at one instant, to
// dir (created): what the log host held when a drill cuts the node's power.
// Appends wait while it copies, so the copy holds whole records only. Open
// the copy with the same node id.
func (l *Log) CopyTo(dir string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ErrClosed
	}
	if err := mkdirSynced(dir); err != nil {
		return err
	}
	data := make([]byte, l.end)
	if _, err := l.f.ReadAt(data, 0); err != nil && l.end > 0 {
		return fmt.Errorf("memory intake: copy %s: %w", l.path, err)
	}
	if err := writeFileSynced(filepath.Join(dir, filepath.Base(l.path)), data); err != nil {
		return err
	}
	if l.start > 0 {
		start := []byte(strconv.FormatInt(int64(l.start), 10) + "\n")
		return writeFileSynced(filepath.Join(dir, filepath.Base(l.startPath)), start)
	}
	return nil
}
