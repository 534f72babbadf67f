package queue

import (
	"errors"
	"time"
)

// Fleet dedupe claims of carried records (ADR section 3, "hold"). A record
// answered 503 because one half failed is not refused: it is carried, and
// its claim must stay pending — a retry meeting it is answered 409, never
// admitted as a second hook — until the record is confirmed in both places
// (promote: a retry is then a 201 duplicate with the first id) or is stuck
// past reconcile_deadline_ms (release: the one sanctioned second hook id).
//
// Invariants, kept by pendingSet.hold, removeLocked and releaseStuckClaims,
// all under pendingSet.mu:
//  1. A held claim is settled exactly once: promote when its entry leaves
//     the set (both halves confirmed), or release when the entry is first
//     seen past the deadline, whichever comes first.
//  2. Hold on an entry that already left the set returns false ("completed",
//     the race of the ADR): the caller promotes the claim itself.

// ClaimHolder is a held fleet claim. Its methods run under the pending
// set's lock, so they must not block (dedupe.Settler queues them).
type ClaimHolder interface {
	Promote(id [16]byte)
	Release()
}

// CarriedError is the answer for a record that exists in one half and is
// carried to completion (it was not refused; the provider still got 503).
// It unwraps to ErrIntakeUnavailable or ErrStoreUnavailable, whose 503 the
// edge answers; ID is the record's hook id, for Hold.
type CarriedError struct {
	ID  [16]byte
	Err error
}

func (e *CarriedError) Error() string { return "carried: " + e.Err.Error() }
func (e *CarriedError) Unwrap() error { return e.Err }

// Carried reports the hook id of a carried record's answer.
func Carried(err error) ([16]byte, bool) {
	var ce *CarriedError
	if errors.As(err, &ce) {
		return ce.ID, true
	}
	return [16]byte{}, false
}

// MayUndo reports whether the local rows of a record with hook id id, as
// a reader sees them now, may still be undone (ack rule 7): while the
// queue is fenced, or while its hook's group is above durable_seq (a
// failed fsync's fence deletes it and puts back the pen row it took). A
// hook at or below durable_seq is durable in this store, whatever its log
// half (under dual a carried record's local half, once complete-local
// wrote it, is synced). A caller that reads rows the record wrote asks
// after its read, and compares FenceEpoch around both.
func (q *Queue) MayUndo(id [16]byte) bool {
	if q.writer.fenced.Load() {
		return true
	}
	seq, found, err := q.writer.st.LookupHookID(id)
	if err != nil {
		return true
	}
	return found && seq > q.Durable()
}

// FenceEpoch is odd while the queue is fenced, and moves at every fence's
// start and end: equal values around a read mean no fence ran meanwhile.
func (q *Queue) FenceEpoch() uint64 {
	e := 2 * q.writer.fences.Load()
	if q.writer.fenced.Load() {
		e++
	}
	return e
}

// Hold gives the queue the claim of a carried record (invariant 2: false
// means the record already completed and the caller must promote).
func (q *Queue) Hold(id [16]byte, h ClaimHolder) bool {
	d := q.writer.dual
	if d == nil {
		return false
	}
	return d.pending.hold(id, h)
}

func (p *pendingSet) hold(id [16]byte, h ClaimHolder) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.byID[id]
	if !ok {
		return false
	}
	e.claim = h
	return true
}

// settleClaimLocked promotes a held claim as its entry leaves the set.
// REQUIRES: p.mu held.
func (e *pendingEntry) settleClaimLocked() {
	if e.claim != nil {
		e.claim.Promote(e.id)
		e.claim = nil
	}
}

// LogClaimReleased is the message of the line the reconciler logs, at
// info, for each held claim it releases past intake.reconcile_deadline_ms,
// with the hook's "id" and the record's "age": from then on a provider
// retry of that dedupe key may become the one sanctioned second hook id,
// and the line is how an operator, or the fleet drill, tells such a second
// hook from a dedupe failure. One line per record, once (invariant 1), so
// at most intake.pending.max_records lines per stuck spell.
const LogClaimReleased = "fleet claim released: carried record past intake.reconcile_deadline_ms"

// releasedClaim is a held claim releaseStuckClaims released.
type releasedClaim struct {
	id  [16]byte
	age time.Duration
}

// releaseStuckClaims releases the claims of entries past the deadline
// (invariant 1) and returns them, for the reconciler's log line
// (LogClaimReleased): the release is what lets a second hook id exist, so
// it must not go unrecorded. The entries stay: the reconciler keeps
// completing them.
func (p *pendingSet) releaseStuckClaims(now time.Time, deadline time.Duration) []releasedClaim {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []releasedClaim
	for _, e := range p.bySeq {
		if e.claim != nil && !e.inflight && now.Sub(e.firstAt) > deadline {
			e.claim.Release()
			e.claim = nil
			out = append(out, releasedClaim{id: e.id, age: now.Sub(e.firstAt)})
		}
	}
	return out
}
