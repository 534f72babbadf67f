package queue

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ankusa/ankusa/internal/store"
)

// pendingReply is a caller waiting for durable_seq to reach need.
type pendingReply struct {
	it   *item
	res  Result
	need uint64 // the seq that must be durable: its own, or its original's
}

// handoff is what the writer gives the syncer after applying a group.
type handoff struct {
	replies []pendingReply
	// join, under dual, receives the local half's outcome instead of the
	// replies being answered: it answers once the log's half is in too. (A
	// pointer, not a method value: that was an allocation per group.)
	join *dualGroup
	// committed are the group's new hooks, for Options.OnCommitted once
	// the fsync covering them returned.
	committed []store.Committed
}

// syncer runs the WAL fsyncs. It never applies anything: one fsync covers
// every group the writer applied before the fsync started, so while it
// syncs the writer is already applying the next group (DUR-4.b: the fsync
// is off the writer's critical path).
//
// Invariant S1 (wal.type: disk, max_delay_ms 0): records queued while an
// fsync runs are applied as few groups as possible, and none waits for an
// fsync more than it would have. The writer leaves fewer than holdMax of
// them queued (hold) instead of applying each as its own group; once the
// fsync returns, it is woken and applies them as one group, and the next
// fsync does not start before that group is handed over (or answered
// without one: unhold), so it covers them. Each group is a Pebble commit,
// a WAL write, a descent of the memtable per key family and a hand-over
// (issue 14: at 1 KiB and C=64 the writer committed 1.2 records per group,
// about twenty groups per fsync); the price is the held group's apply
// between two fsyncs, which holdMax bounds.
type syncer struct {
	st   *store.Store
	opts *Options

	// applied is the highest seq the writer has applied; the writer raises it
	// after a successful apply and before the handoff.
	applied atomic.Uint64
	// durable is the highest seq covered by a successful fsync (or by the
	// fence's synced cleanup). Dispatch and duplicate answers gate on it.
	durable atomic.Uint64
	// syncs counts successful fsyncs (records per fsync = the group size a
	// benchmark reports).
	syncs atomic.Uint64

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []handoff // REQUIRES: mu held
	fenced   bool      // REQUIRES: mu held; set by a failed fsync or the writer's fence, cleared by resume
	syncing  bool      // REQUIRES: mu held; an fsync is in progress
	stopping bool      // REQUIRES: mu held
	// held: the writer left records queued for the fsync in progress to
	// return (S1); the next fsync waits until it clears. REQUIRES: mu held.
	held bool
	// wake is the batcher's: an fsync that returns while records are held
	// wakes the writer.
	wake chan struct{}

	onFail func(error)          // tells the writer to fence; set by newWriter
	answer func(*item, outcome) // the batcher's answer: replies and frees the room

	// spent hands the writer back the replies slices of answered groups
	// (disk: nothing reads them after answerAll; under dual, after the
	// join answered them: dualGroup.resolve) and their committed slices
	// (OnCommitted keeps no slice it was given), cleared, for its next
	// groups; a full channel drops them (issue 14: an allocation per
	// group, and groups are often one record; the committed slice grew by
	// appends, about 150 bytes per hook).
	spent chan spentGroup

	// spareQueue is an answered batch's slice, for queue's next turn (run;
	// only the run goroutine touches it).
	spareQueue []handoff
}

// spentGroup is what an answered group leaves for the writer to reuse.
type spentGroup struct {
	replies   []pendingReply    // nil if they are not free yet (a dual join's)
	committed []store.Committed // nil if it had none
}

func newSyncer(st *store.Store, opts *Options, b *batcher) *syncer {
	s := &syncer{st: st, opts: opts, answer: b.answer, wake: b.wake, spent: make(chan spentGroup, 64)}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// submit queues a group's replies. Called by the writer only.
func (s *syncer) submit(h handoff) {
	s.mu.Lock()
	s.queue = append(s.queue, h)
	s.mu.Unlock()
	s.cond.Broadcast()
}

// hold reports whether the writer leaves the queued records (queued of
// them) for the fsync in progress to return (S1): only while one runs,
// not fenced or stopping, and below holdMax.
func (s *syncer) hold(queued int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.syncing || s.fenced || s.stopping || queued >= holdMax {
		return false
	}
	s.held = true
	return true
}

// unhold clears held once the writer applied what it held (S1).
func (s *syncer) unhold() {
	s.mu.Lock()
	if s.held {
		s.held = false
		s.cond.Broadcast()
	}
	s.mu.Unlock()
}

// resume lifts the fence once the writer's synced cleanup landed; every seq
// up to upto is now either durable or deleted by a synced write.
func (s *syncer) resume(upto uint64) {
	s.mu.Lock()
	// Everything still queued was handed over before the cleanup and may name
	// rows it deleted: refuse it, never ack it under the new durable mark.
	stale := s.queue
	s.queue = nil
	s.fenced = false
	s.held = false // what was held is refused or applied after the cleanup
	s.applied.Store(upto)
	s.durable.Store(upto)
	s.mu.Unlock()
	s.answerAll(stale, ErrStoreUnavailable)
	s.opts.OnDurable()
}

func (s *syncer) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.cond.Broadcast()
}

func (s *syncer) run() {
	for {
		s.mu.Lock()
		// S1: while the writer holds records for this fsync's successor,
		// the successor waits for their group.
		for (len(s.queue) == 0 || s.held && !s.fenced) && !s.stopping {
			s.cond.Wait()
		}
		if len(s.queue) == 0 && s.stopping {
			s.mu.Unlock()
			return
		}
		batch := s.queue
		// The last batch's slice, answered and cleared, takes the writer's
		// next handoffs (a growing append per batch, issue 14); only this
		// goroutine holds it meanwhile.
		s.queue, s.spareQueue = s.spareQueue, nil
		if s.fenced {
			s.mu.Unlock()
			s.answerAll(batch, ErrStoreUnavailable)
			s.recycle(batch)
			continue
		}
		need := uint64(0)
		for _, h := range batch {
			for _, r := range h.replies {
				need = max(need, r.need)
			}
		}
		if need <= s.durable.Load() {
			// Duplicates of originals that are already durable: no fsync owed.
			s.mu.Unlock()
			s.answerAll(batch, nil)
			s.recycle(batch)
			continue
		}
		// Read applied before the fsync starts: everything up to it was
		// applied before this fsync, so a successful fsync covers it (ack rule 1).
		upto := s.applied.Load()
		s.syncing = true
		s.mu.Unlock()

		start := time.Now()
		err := s.st.SyncWAL()
		s.opts.Observer.Sync(time.Since(start), err)

		s.mu.Lock()
		s.syncing = false
		if s.held {
			// S1: the writer applies what it held now.
			select {
			case s.wake <- struct{}{}:
			default: // a wake is already pending
			}
		}
		if err != nil {
			s.fenced = true
		} else {
			s.syncs.Add(1)
		}
		if err == nil && upto > s.durable.Load() {
			// Raised under mu so that enterFence, once it holds mu with no
			// sync in progress, reads the final value.
			s.durable.Store(upto)
		}
		s.cond.Broadcast()
		s.mu.Unlock()

		if err != nil {
			s.answerAll(batch, fmt.Errorf("%w: %w", ErrStoreUnavailable, err))
			s.recycle(batch)
			s.onFail(err)
			continue
		}
		s.answerAll(batch, nil)
		s.recycle(batch)
		s.opts.OnDurable()
	}
}

// recycle keeps batch, answered, as the next batch's queue (run).
func (s *syncer) recycle(batch []handoff) {
	clear(batch)
	s.spareQueue = batch[:0]
}

func (s *syncer) answerAll(batch []handoff, err error) {
	d := s.durable.Load()
	for _, h := range batch {
		if err == nil && len(h.committed) > 0 && s.opts.OnCommitted != nil && h.committed[len(h.committed)-1].Seq <= d {
			// Before the replies: a hook is in dispatch's hands before its
			// caller hears 201 (the due scan would find it anyway). Under
			// dual before the join too: the local half is durable whatever
			// the log answers, and the due scan would deliver it as well.
			s.opts.OnCommitted(h.committed)
		}
		if h.join != nil {
			lerr := err
			for _, r := range h.replies {
				if lerr == nil && r.need > d {
					lerr = fmt.Errorf("%w: seq %d not durable (durable %d)", ErrStoreUnavailable, r.need, d)
				}
			}
			h.join.local(lerr)
			s.spend(nil, h.committed)
			continue
		}
		for _, r := range h.replies {
			switch {
			case err != nil:
				s.answer(r.it, outcome{err: err})
			case r.need <= d:
				s.answer(r.it, outcome{res: r.res})
			default:
				// Unreachable by construction (need ≤ applied ≤ upto); refusing
				// is the safe answer if it ever happens.
				s.answer(r.it, outcome{err: fmt.Errorf("%w: seq %d not durable (durable %d)", ErrStoreUnavailable, r.need, d)})
			}
		}
		clear(h.replies)
		s.spend(h.replies[:0], h.committed)
	}
}

// spend hands a group's replies (cleared by the caller) and committed
// slices back to the writer; nothing reads them any more.
func (s *syncer) spend(replies []pendingReply, committed []store.Committed) {
	if committed != nil {
		clear(committed) // the reused slice must not keep values alive
		committed = committed[:0]
	}
	if replies == nil && committed == nil {
		return
	}
	select {
	case s.spent <- spentGroup{replies: replies, committed: committed}:
	default:
	}
}

// enterFence stops the syncer from starting fsyncs and waits for one in
// progress to finish, so that durable_seq is final when the writer reads it.
func (s *syncer) enterFence() {
	s.mu.Lock()
	s.fenced = true
	for s.syncing {
		s.cond.Wait()
	}
	s.mu.Unlock()
}
