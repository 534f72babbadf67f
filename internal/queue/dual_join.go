// dual_join.go owns the join of a dual group's two halves (ADR sections 2
// and 3): the group registers its pending entries and starts its publish,
// then, once the local fsync and the log's confirm are both known, answers
// its callers and leaves what did not complete to the reconciler.

package queue

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ankusa/ankusa/internal/intake"
)

// dualGroup joins the two halves of one group (ADR section 2): the local
// apply+fsync (from the syncer) and the publish (from its goroutine). The
// callers are answered once both are known, so an ack never precedes the
// local fsync even when the log confirmed first, and costs max(fsync,
// confirm), not their sum.
type dualGroup struct {
	d       *dualState
	replies []pendingReply
	entries []*pendingEntry // parallel to replies; nil for an in-group duplicate
	recs    int             // the non-nil entries: the records it publishes
	probe   bool            // the gate's half-open probe (gate invariant G1)

	mu               sync.Mutex
	localIn, logIn   bool
	localErr, logErr error
	positions        []intake.Position // per record, when the log confirmed
	// refused are the seqs of records the log refused on their own
	// (intake.ErrRecordRefused, recErr) while it took the rest: logErr is
	// nil, their positions are not valid, their callers are answered 503.
	refused map[uint64]bool
	recErr  error
}

// begin registers the group's entries and starts its publish.
func (d *dualState) begin(replies []pendingReply, entries []*pendingEntry, probe bool) *dualGroup {
	g := &dualGroup{d: d, replies: replies, entries: entries, probe: probe}
	g.recs = d.pending.add(entries)
	d.pub.submit(g)
	return g
}

func (g *dualGroup) local(err error) {
	g.mu.Lock()
	g.localIn, g.localErr = true, err
	both := g.logIn
	g.mu.Unlock()
	if both {
		g.resolve()
	}
}

func (g *dualGroup) log(pos []intake.Position, err error, refused map[uint64]bool, recErr error) {
	g.mu.Lock()
	g.logIn, g.logErr, g.positions = true, err, pos
	g.refused, g.recErr = refused, recErr
	both := g.localIn
	g.mu.Unlock()
	if both {
		g.resolve()
	}
}

// confirmedAny reports whether the log confirmed at least one of g's
// records (some were refused on their own).
func (g *dualGroup) confirmedAny() bool {
	for _, e := range g.entries {
		if e != nil && !g.refused[e.seq] {
			return true
		}
	}
	return false
}

// resolve answers the callers from the pair of outcomes (ADR section 3).
// A record whose halves did not both succeed stays in the pending set,
// carried: the reconciler completes it; nothing is undone.
func (g *dualGroup) resolve() {
	d := g.d
	switch {
	case g.logErr != nil:
		d.gate.result(false, d.now())
		d.hold(g.logErr)
	case len(g.refused) == 0 || g.confirmedAny():
		d.gate.result(true, d.now())
	case g.probe:
		// Every record refused on its own (adapters refuse an oversized
		// record before they reach the log): the log's health is unknown,
		// so the probe reports nothing and gives its slot back (G1).
		d.gate.release()
	}
	carried := false
	d.pending.mu.Lock()
	i := 0
	for _, e := range g.entries {
		if e == nil {
			continue
		}
		e.inflight = false
		if g.localErr == nil {
			e.localDone = true
		}
		switch {
		case g.logErr != nil:
		case g.refused[e.seq]:
			// Permanent: the reconciler retries it (after refusedRetry),
			// never drops it.
			e.stuck, e.retryAt = true, d.now().Add(refusedRetry)
		default:
			e.logDone = true
			e.pos = g.positions[i]
		}
		if !d.pending.settleLocked(e) {
			carried = true
		}
		i++
	}
	d.pending.mu.Unlock()
	var err error
	switch {
	case g.localErr != nil && errors.Is(g.localErr, ErrStoreUnavailable):
		err = g.localErr // the syncer already said so
	case g.localErr != nil:
		err = fmt.Errorf("%w: %w", ErrStoreUnavailable, g.localErr)
	case g.logErr != nil:
		err = fmt.Errorf("%w: %w", ErrIntakeUnavailable, g.logErr)
	}
	for _, r := range g.replies {
		switch {
		case err != nil:
			// Every record of the group exists in one half (or is an in-group
			// duplicate of one that does): carried, not refused.
			d.answer(r.it, outcome{err: &CarriedError{ID: r.res.ID, Err: err}})
		case g.refused[r.need]:
			// Its record (or, for an in-group duplicate, its original's) is
			// stored and carried, but not in the log.
			d.answer(r.it, outcome{err: &CarriedError{ID: r.res.ID, Err: fmt.Errorf("%w: %w", ErrIntakeUnavailable, g.recErr)}})
		default:
			d.answer(r.it, outcome{res: r.res})
		}
	}
	if carried {
		d.wakeReconciler()
	}
	// Nothing reads the replies any more: the syncer read them before it
	// called local, and resolve runs once, after both halves. Handed back
	// for the writer's next group (an allocation per group, and at C=64
	// groups are often one record).
	clear(g.replies)
	d.spend(g.replies[:0])
	g.replies = nil
}
