package backup

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// minRetry is the shortest wait after a failed run: a failing location is
// not hammered.
const minRetry = 5 * time.Second

// SchedulerOptions configure a Scheduler.
type SchedulerOptions struct {
	// Backup configures the Backuper every run uses. Its OnRun is still
	// called after every run.
	Backup Options
	// Interval is the time between backups (backup.interval_ms); > 0.
	Interval time.Duration
	// Close, if set, is called once by Stop or Close: the locations'
	// resources (OpenLocations' closeAll).
	Close func()
}

// Scheduler takes a backup every Interval, retries sooner after a failure,
// and takes a final backup on Stop: the periodic backups of
// ARCHITECTURE.md section 7. It owns the goroutine Start launches.
type Scheduler struct {
	b        *Backuper
	interval time.Duration
	log      *slog.Logger
	lastOK   atomic.Int64 // unix ns of this process's newest successful run

	closeOnce sync.Once
	closeLoc  func()

	mu     sync.Mutex
	cancel context.CancelFunc // REQUIRES: mu held. Set by Start.
	done   chan struct{}      // REQUIRES: mu held. Closed when Run returns.
}

// NewScheduler builds the Backuper of o.Backup. On an error o.Close has
// been called.
func NewScheduler(o SchedulerOptions) (*Scheduler, error) {
	s := &Scheduler{interval: o.Interval, closeLoc: o.Close}
	if s.closeLoc == nil {
		s.closeLoc = func() {}
	}
	if o.Interval <= 0 {
		s.closeLoc()
		return nil, fmt.Errorf("backup: interval is %s, want > 0", o.Interval)
	}
	if o.Backup.TempDir != "" {
		if err := os.MkdirAll(o.Backup.TempDir, 0o755); err != nil {
			s.closeLoc()
			return nil, fmt.Errorf("backup: temp dir: %w", err)
		}
	}
	onRun := o.Backup.OnRun
	o.Backup.OnRun = func(result string, d time.Duration) {
		if result == ResultOK {
			s.lastOK.Store(time.Now().UnixNano())
		}
		if onRun != nil {
			onRun(result, d)
		}
	}
	b, err := New(o.Backup)
	if err != nil {
		s.closeLoc()
		return nil, err
	}
	s.b = b
	s.log = b.log
	return s, nil
}

// Run takes a backup every interval until ctx ends; it returns then. A
// failed run is logged and retried after half the previous wait (at least
// minRetry, at most the interval), so a failing location is retried well
// before the backup goes stale. Run is what Start runs; a caller that
// owns its goroutine may run it instead.
func (s *Scheduler) Run(ctx context.Context) {
	wait := s.interval
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := s.b.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Error("backup failed", "err", err)
		}
		wait = nextWait(wait, s.interval, err != nil)
		t.Reset(wait)
	}
}

// nextWait is the wait after a run that took prev to come (failed or not).
func nextWait(prev, interval time.Duration, failed bool) time.Duration {
	if !failed {
		return interval
	}
	return min(max(prev/2, minRetry), interval)
}

// Start runs Run in a goroutine the Scheduler owns until Stop or Close.
// A second Start does nothing.
func (s *Scheduler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		s.Run(ctx)
	}()
}

// halt ends Start's goroutine, if any, and waits for it.
func (s *Scheduler) halt() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Stop ends the loop and takes the final backup of a clean stop (its
// intake offset is the log head, so a replacement replays nothing it did
// not need to), then closes the locations. Whether or not Start ran: a
// node that stops cleanly always leaves a backup.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.halt()
	defer s.Close()
	if _, err := s.b.Run(ctx); err != nil {
		return fmt.Errorf("final backup: %w", err)
	}
	return nil
}

// Close ends the loop and closes the locations without a final backup
// (an instance that failed to build). Safe to call more than once.
func (s *Scheduler) Close() {
	s.halt()
	s.closeOnce.Do(s.closeLoc)
}

// Now takes a backup immediately (operators' drills, tests); runs are
// serialised with the loop's.
func (s *Scheduler) Now(ctx context.Context) (Manifest, error) { return s.b.Run(ctx) }

// Age is how old this process's newest successful backup is; 0 before
// the first (the metric reads "none yet", not "stale").
func (s *Scheduler) Age() time.Duration {
	ns := s.lastOK.Load()
	if ns == 0 {
		return 0
	}
	return time.Since(time.Unix(0, ns))
}

// OpenLocations opens the backup locations by URL, primary first; an
// empty URL (no secondary) is skipped. closeAll releases every opened one.
// On an error nothing stays open.
func OpenLocations(ctx context.Context, urls ...string) (locs []Store, closeAll func(), err error) {
	var buckets []*Bucket
	closeAll = func() {
		for _, b := range buckets {
			_ = b.Close()
		}
	}
	for _, u := range urls {
		if u == "" {
			continue
		}
		b, err := OpenBucket(ctx, u)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open backup location: %w", err)
		}
		buckets = append(buckets, b)
		locs = append(locs, b)
	}
	return locs, closeAll, nil
}
