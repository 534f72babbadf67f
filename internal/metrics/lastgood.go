package metrics

import (
	"sync"
	"time"
)

// scrapeWait is how long a scrape waits for a reading that touches the
// store before it answers the last one.
const scrapeWait = 250 * time.Millisecond

// lastGood serves a reading that may block on the store (a scan) so that a
// scrape never waits for a failing disk: each get starts fn unless a run is
// still going, waits at most scrapeWait, and answers the newest value it
// has. At most one run is in progress at any time, so a stuck store costs
// one goroutine, which ends when the store answers.
//
// Before the first run finishes there is no reading: get says so (ok
// false) rather than answering T's zero value as if it had been measured
// (issue 14: ankusa_queue_pending read 0 with a million rows due, the
// first scrape's reading being slower than scrapeWait).
type lastGood[T any] struct {
	fn func() T

	mu      sync.Mutex
	last    T
	have    bool          // last holds a reading
	running chan struct{} // non-nil while a run is in progress
}

func (l *lastGood[T]) get() (v T, ok bool) {
	l.mu.Lock()
	if l.running == nil {
		done := make(chan struct{})
		l.running = done
		go func() {
			v := l.fn()
			l.mu.Lock()
			l.last, l.have, l.running = v, true, nil
			l.mu.Unlock()
			close(done)
		}()
	}
	done := l.running
	l.mu.Unlock()
	t := time.NewTimer(scrapeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.have
}
