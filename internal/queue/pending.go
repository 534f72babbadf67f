package queue

import (
	"sort"
	"sync"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/store"
)

// pendingEntry is one record not yet confirmed in both places (ADR section
// 5): what its log record is built from (record), its local ops, and
// which halves are done.
type pendingEntry struct {
	seq    uint64
	id     [16]byte
	dedupe string // the u-key, "" without dedupe
	// tenant, source and value (the encoded envelope) are what its intake
	// record carries besides this node's constants (record): the record
	// is built at each publish, not kept: the entry is 88 bytes smaller.
	tenant, source string
	value          []byte
	rows           []store.Row   // its local half, kept so complete-local re-applies exactly what the commit wrote
	held           *store.PenRow // the pen row its batch deleted (ack rule 7): complete-local deletes it too
	size           int64         // every row's key and value: rows[0].Value is value, counted once
	firstAt        time.Time
	// floor is completePos when the record was added: every position the
	// log may give any copy of it is above floor, since each record
	// counted there was confirmed before this record's first publish
	// began. Set by pendingSet.add.
	floor intake.Position

	// Guarded by pendingSet.mu.
	localDone bool
	logDone   bool
	pos       intake.Position // valid when logDone
	inflight  bool            // the commit's own halves have not both answered
	stuck     bool            // permanent class: retried, never dropped
	// retryAt: the log refused this record on its own (ErrRecordRefused);
	// the reconciler leaves it until then (refusedRetry).
	retryAt time.Time
	claim   ClaimHolder // a held fleet claim (claims.go), or nil
}

// record is e's intake record, as this node (d) publishes it.
func (e *pendingEntry) record(d *dualState) intake.Record {
	return intake.Record{
		Version: intake.RecordVersion, Kind: intake.KindHook, Node: d.node, Seq: e.seq, ID: e.id,
		Incarnation: d.incarnation, Tenant: e.tenant, Source: e.source, Value: e.value,
	}
}

// pendingSet indexes carried and in-flight records by seq, id and dedupe
// key. Bounded by max records and bytes; entries leave only when both halves
// are confirmed — never by age (a carried hook is never dropped).
type pendingSet struct {
	mu       sync.Mutex
	bySeq    map[uint64]*pendingEntry
	byID     map[[16]byte]*pendingEntry
	byDedupe map[string]*pendingEntry
	bytes    int64
	maxRecs  int
	maxBytes int64
	// completePos is the highest log position of a record confirmed in both
	// places; the offset never runs ahead of it.
	completePos intake.Position
}

func newPendingSet(maxRecs int, maxBytes int64) *pendingSet {
	return &pendingSet{
		bySeq: map[uint64]*pendingEntry{}, byID: map[[16]byte]*pendingEntry{}, byDedupe: map[string]*pendingEntry{},
		maxRecs: maxRecs, maxBytes: maxBytes, completePos: -1,
	}
}

// room reports whether n more records of size bytes (the sum of their
// pendingCost) fit; own is the last record's size as the record limit
// counts it (item.size + envelopeOverhead). An empty set admits one record
// whose own size fits, whatever its estimate adds: the config rule
// max_bytes >= max_record_bytes promises that a record of the largest size
// fits an empty set, which the estimate's allowance for the other rows
// would otherwise break.
func (p *pendingSet) room(n int, size, own int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bySeq)+n > p.maxRecs {
		return false
	}
	return p.bytes+size <= p.maxBytes || (len(p.bySeq) == 0 && n == 1 && own <= p.maxBytes)
}

// refusedRetry is how long the reconciler leaves a record the log refused
// on its own before it tries it again. Only an operator's change (a larger
// topic or stream limit) lets it in, so trying it every pass would only
// load the log: a hundred such records cost 199 publishes per pass (the
// split), about 4 000 a second at the default reconcile interval.
const refusedRetry = 30 * time.Second

// pendingRowBytes is what the room check reckons for each row of a hook
// besides its envelope (a key, and a delivery row's value), as batchSize
// does.
const pendingRowBytes = 64

// pendingCost bounds what a record will hold in the pending set, before its
// rows exist (the check runs before any seq is given): the envelope once —
// one slice is the hook row's value and the log record's Value alike — and
// the other rows. It is at least the entry's size, the exact count
// (TestPendingCost_BoundsTheEntry), so the set stays within max_bytes.
func pendingCost(it *item) int64 {
	r := it.rec
	n := it.size + envelopeOverhead + int64(len(r.Tenant)+len(r.Source))
	n += pendingRowBytes*int64(4+2*len(r.Sinks)) + int64(2*(len(r.Tenant)+len(r.Source)))
	for _, sk := range r.Sinks {
		n += int64(len(sk.ID)) // in its delivery row's value
	}
	if r.DedupeKey != "" {
		n += 2*pendingRowBytes + int64(2*(len(r.Tenant)+len(r.Source)+len(r.DedupeKey)))
	}
	return n
}

// claim is what an unconfirmed original means for a retry of its dedupe key.
type claim int

const (
	// claimNone: no unconfirmed original; the store's dedupe row decides.
	claimNone claim = iota
	// claimHeld: an original in flight or carried within the reconcile
	// deadline holds the key: the retry is refused 503 intake_pending.
	claimHeld
	// claimReleased: the original is stuck past the deadline (ADR section 3):
	// the retry is admitted as a new hook with the same idempotency key —
	// the one sanctioned second hook id, never an acked loss — while the
	// reconciler keeps completing the stuck one. Its local dedupe row must
	// not answer the retry: that would be a 201 duplicate of a hook the log
	// never confirmed.
	claimReleased
)

// claimOf reports how the unconfirmed original indexed under dedupe key k
// holds it.
func (p *pendingSet) claimOf(k string, now time.Time, deadline time.Duration) claim {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.claimLocked(p.byDedupe[k], now, deadline)
}

// claimOfSeq is claimOf for the hook a stored dedupe row names: the row of
// an original that is still unconfirmed must not answer a retry either,
// even when a later hook took over the key's index entry.
func (p *pendingSet) claimOfSeq(seq uint64, now time.Time, deadline time.Duration) claim {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.claimLocked(p.bySeq[seq], now, deadline)
}

// REQUIRES: p.mu held.
func (p *pendingSet) claimLocked(e *pendingEntry, now time.Time, deadline time.Duration) claim {
	switch {
	case e == nil:
		return claimNone
	case e.inflight || now.Sub(e.firstAt) <= deadline:
		return claimHeld
	default:
		return claimReleased
	}
}

// hasID reports whether a record with hook id id is in the set, in flight
// or carried (ack rule 7).
func (p *pendingSet) hasID(id [16]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.byID[id]
	return ok
}

// add registers es, skipping nil (an in-group duplicate's slot), and
// returns how many it registered.
func (p *pendingSet) add(es []*pendingEntry) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range es {
		if e == nil {
			continue
		}
		n++
		e.floor = p.completePos
		p.bySeq[e.seq] = e
		p.byID[e.id] = e
		if e.dedupe != "" {
			p.byDedupe[e.dedupe] = e
		}
		p.bytes += e.size
	}
	return n
}

// removeLocked drops a complete entry. REQUIRES: p.mu held.
func (p *pendingSet) removeLocked(e *pendingEntry) {
	e.settleClaimLocked()
	delete(p.bySeq, e.seq)
	delete(p.byID, e.id)
	if e.dedupe != "" && p.byDedupe[e.dedupe] == e {
		delete(p.byDedupe, e.dedupe)
	}
	p.bytes -= e.size
	if e.pos > p.completePos {
		p.completePos = e.pos
	}
}

// settleLocked removes e if both halves are done. REQUIRES: p.mu held.
func (p *pendingSet) settleLocked(e *pendingEntry) bool {
	if e.localDone && e.logDone && !e.inflight {
		p.removeLocked(e)
		return true
	}
	return false
}

// carried returns the entries the reconciler owns (not in flight), by seq.
func (p *pendingSet) carried() []*pendingEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*pendingEntry, 0, len(p.bySeq))
	for _, e := range p.bySeq {
		if !e.inflight {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// PendingStats is the pending set as /v1/wal and metrics show it.
type PendingStats struct {
	Records   int
	Bytes     int64
	Stuck     int
	OldestAge time.Duration
}

func (p *pendingSet) stats(now time.Time, deadline time.Duration) PendingStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PendingStats{Records: len(p.bySeq), Bytes: p.bytes}
	for _, e := range p.bySeq {
		age := now.Sub(e.firstAt)
		s.OldestAge = max(s.OldestAge, age)
		if e.stuck || (!e.inflight && age > deadline) {
			s.Stuck++
		}
	}
	return s
}

// marks computes the watermark and offset (ADR section 7): the watermark is
// the highest seq below every pending one; the offset is the highest
// position confirmed in both places, held below the lowest position of a
// record that is only in the log. Both lag safely; neither runs ahead.
//
// Invariant M1: the offset never passes a position that may hold a record
// the store lacks. A record whose local half is not done and whose publish
// has not confirmed (in flight, failed, or landed with its ack lost) may
// sit in the log at a position nobody learnt, below a later group's
// confirmed one (publishes pipeline and confirm out of order; every publish
// after a lost ack lands above it), so it holds the offset at its floor.
func (p *pendingSet) marks(nextSeq uint64) (watermark uint64, offset intake.Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	watermark = nextSeq - 1
	offset = p.completePos
	for _, e := range p.bySeq {
		if e.seq-1 < watermark {
			watermark = e.seq - 1
		}
		switch {
		case e.localDone:
		case e.logDone:
			offset = min(offset, e.pos-1)
		default:
			offset = min(offset, e.floor)
		}
	}
	return watermark, offset
}

// logOnly reports whether a record the log confirmed is missing from the
// store: what holds the offset back for longer than a publish, and what
// ankusa_intake_offset_lag_seconds measures. A record whose publish is
// only in flight holds the offset too (M1), but for one confirm, and is
// not lag.
func (p *pendingSet) logOnly() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.bySeq {
		if e.logDone && !e.localDone {
			return true
		}
	}
	return false
}
