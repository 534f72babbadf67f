package store

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// The due count: how many due rows (q keys) the open generation holds,
// kept as batches apply so that reading it costs no walk. Issue 14: the
// ankusa_queue_pending gauge walked every due row on every scrape (CountDue:
// a million rows parked behind a dead sink, walked per scrape), and a walk
// longer than the scrape's wait answered 0.
//
// Rejected: a counter row in the store (one more write in every commit
// group and every outcome batch, for a figure a boot can recount), and a
// count kept by the dispatcher (the queue writer, boot replay, complete-
// local and archive replay write due rows too, and each would have to
// report them).
//
// Invariants:
//
//	C1. Every batch operation that sets a due key sets one that is absent,
//	    and every one that deletes a due key deletes one that is present: a
//	    delivery is named by exactly one index row (delivery.go), the commit
//	    path writes the rows of new seqs only (replays check first), and the
//	    dispatcher — the one writer of delivery rows after that — deletes
//	    the due keys its scan read from the open generation. So an applied batch moves the count by
//	    its due sets minus its due deletes (Batch.dueDelta), and a raw Set
//	    or Delete of a due key is bound by C1 too.
//	C2. Where C1 cannot be vouched for, the count is stale and the next read
//	    walks the due rows once (recountDue): at open (the count lives in
//	    memory only), after a reopen (the new generation holds what the WAL
//	    kept, not what was applied), after a failed apply (its rows may or
//	    may not be in the next generation), and after a batch that removed
//	    rows which may already be gone (DeleteRows: the fence undoes groups
//	    a reopen may have lost; Batch.DueUnsure: an outcome of a claim its
//	    scan read from a generation a reopen since replaced).
//	C3. A recount and the applies around it agree: the recount opens its
//	    iterator (a point-in-time view) and zeroes the count while no apply
//	    is between Pebble's apply and its add (dueCount.mu), so every batch
//	    is counted once — by the walk if it was applied before the view, by
//	    its delta if after.
type dueCount struct {
	// mu: applies hold it shared from Pebble's apply to the add of their
	// delta; a recount holds it exclusively while it opens its iterator
	// and zeroes n (C3). Taken inside Store.mu, never the other way round.
	mu sync.RWMutex
	n  atomic.Int64
	// state is dueExact, dueStale or dueCounting.
	state atomic.Int32
	// countMu lets one recount run at a time; readers of a stale count
	// wait for it.
	countMu sync.Mutex
}

const (
	dueStale int32 = iota // the zero value: a new store counts before its first read (C2)
	dueCounting
	dueExact
)

// markStale makes the next read recount (C2). A recount in progress then
// ends stale and runs again.
func (c *dueCount) markStale() { c.state.Store(dueStale) }

// DueRows is how many due rows the store holds: new, waiting for a retry,
// or parked behind an open breaker. It reads a count the batches keep (C1),
// walking the due rows only when the count is stale (C2: the first read
// after an open, a reopen or a failed write). Errors are the walk's.
func (s *Store) DueRows() (uint64, error) {
	for {
		if s.due.state.Load() == dueExact {
			return uint64(max(s.due.n.Load(), 0)), nil
		}
		if err := s.recountDue(); err != nil {
			return 0, err
		}
	}
}

// recountDue walks the due rows unless another recount made the count
// exact meanwhile.
func (s *Store) recountDue() error {
	s.due.countMu.Lock()
	defer s.due.countMu.Unlock()
	if s.due.state.Load() == dueExact {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return ErrClosed
	}
	s.due.mu.Lock()
	s.due.state.Store(dueCounting)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{PrefixDue}, UpperBound: []byte{PrefixDue + 1}})
	if err != nil {
		s.due.state.Store(dueStale)
		s.due.mu.Unlock()
		return fmt.Errorf("count due rows: %w", err)
	}
	s.due.n.Store(0) // from here on applies add to it (C3)
	s.due.mu.Unlock()
	var n int64
	for ok := it.First(); ok && it.Valid(); ok = it.Next() {
		n++
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.due.state.CompareAndSwap(dueCounting, dueStale)
		return fmt.Errorf("count due rows: %w", err)
	}
	s.due.n.Add(n)
	// A failure marked stale during the walk: the loop in DueRows walks again.
	s.due.state.CompareAndSwap(dueCounting, dueExact)
	return nil
}
