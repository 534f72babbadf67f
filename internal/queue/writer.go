package queue

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ankusa/ankusa/internal/store"
)

// appliedGroup remembers what a group wrote until an fsync covers it, so
// that the fence can delete exactly the groups no fsync covered.
type appliedGroup struct {
	maxSeq uint64
	rows   []store.Row
	// arena holds the rows' keys and values under disk (AppendHookValue).
	arena store.RowArena
	// restore are the pen rows the group took (ack rule 7): the fence puts
	// them back when it deletes rows.
	restore []store.Row
}

type sweepRequest struct {
	reply chan sweepResult
}

type sweepResult struct {
	n   int
	err error
}

// writer is the only goroutine that assigns seqs and writes hooks. It merges
// everything queued in the batcher into one group, checks dedupe, builds one
// Pebble batch, applies it without sync and hands the callers to the syncer.
type writer struct {
	st   *store.Store
	opts *Options
	b    *batcher
	s    *syncer
	log  *slog.Logger

	nextSeq   uint64         // owned by the run goroutine
	lastDueAt int64          // owned by the run goroutine: due keys of new hooks never go back in time
	unsynced  []appliedGroup // owned by the run goroutine

	nextSeqPublic atomic.Uint64
	hooks         atomic.Uint64
	deliveries    atomic.Uint64
	fenced        atomic.Bool
	fences        atomic.Uint64 // fences completed
	lastFailure   atomic.Int64  // unix ns

	fenceCh  chan error // capacity 1: the syncer's "an fsync failed"
	sweepReq chan sweepRequest
	localReq chan localRequest // the reconciler's complete-local requests

	dual *dualState // nil under wal.type: disk

	// Owned by the run goroutine, reused group after group (issue 14: each
	// was an allocation per group, and groups are often one record): the
	// batch (store.RenewBatch keeps its buffer), the drained items, and
	// the envelope being written.
	batch   *store.Batch
	drained []*item
	env     store.Envelope
	// spare are the rows slices and arenas of groups an fsync covered
	// (pruneUnsynced), or that wrote no hook (apply), for the next groups.
	spare stash[appliedGroup]
	// spareReplies and spareCommitted are answered groups' slices the
	// syncer handed back (takeSpent), and those of groups with nothing to
	// hand it (apply).
	spareReplies   stash[[]pendingReply]
	spareCommitted stash[[]store.Committed]
}

// takeSpent moves every answered group's slices the syncer has handed
// back (syncer.spend) into the writer's stashes. Taking one message per
// group, as before, lost half of them under dual: its replies and its
// committed slice come back in two messages, and a second one of a kind
// was dropped.
func (w *writer) takeSpent() {
	for range cap(w.s.spent) {
		select {
		case sp := <-w.s.spent:
			putSlice(&w.spareReplies, sp.replies)
			putSlice(&w.spareCommitted, sp.committed)
		default:
			return
		}
	}
}

// maxHandedValue: the largest envelope handed to dispatch with its hook
// (Options.OnCommitted); a larger one is read back from the store.
const maxHandedValue = 64 << 10

// batchSize estimates a group's batch: each record's bytes plus its
// envelope's fixed fields and its rows' keys and values. Reserved up front
// (store.NewBatchSized) so that a group of large hooks is not copied over
// and over as the batch doubles.
func batchSize(items []*item) int {
	n := 0
	for _, it := range items {
		n += int(it.size) + envelopeOverhead + 64*(4+2*len(it.rec.Sinks))
	}
	return n
}

func newWriter(st *store.Store, opts *Options, b *batcher, s *syncer) (*writer, error) {
	w := &writer{
		st: st, opts: opts, b: b, s: s,
		log:      opts.Logger.With("component", "writer"),
		fenceCh:  make(chan error, 1),
		sweepReq: make(chan sweepRequest),
		localReq: make(chan localRequest),
	}
	s.onFail = func(err error) {
		select {
		case w.fenceCh <- err:
		default: // a fence is already pending; it covers this failure too
		}
	}
	if err := w.recover(); err != nil {
		return nil, err
	}
	return w, nil
}

// recover reads next_seq and the counts back from the store.
func (w *writer) recover() error {
	next, err := w.st.NextSeq()
	if err != nil {
		return err
	}
	w.nextSeq = next
	w.nextSeqPublic.Store(next)
	// Everything in a freshly opened store is on disk (a reopen replays only
	// what the WAL holds), so it all counts as durable.
	w.s.applied.Store(next - 1)
	w.s.durable.Store(next - 1)
	return w.recount()
}

func (w *writer) recount() error {
	h, err := w.st.CountHooks()
	if err != nil {
		return fmt.Errorf("count hooks: %w", err)
	}
	d, err := w.st.CountDeliveries()
	if err != nil {
		return fmt.Errorf("count deliveries: %w", err)
	}
	w.hooks.Store(h)
	w.deliveries.Store(d)
	return nil
}

func (w *writer) run(ctx context.Context) {
	var tick, flush <-chan time.Time
	if w.opts.SweepInterval > 0 {
		t := time.NewTicker(w.opts.SweepInterval)
		defer t.Stop()
		tick = t.C
	}
	if w.dual != nil {
		t := time.NewTicker(w.dual.opts.OffsetFlush)
		defer t.Stop()
		flush = t.C
	}
	for {
		select {
		case <-ctx.Done():
			// A failure reported just before the stop is still cleaned up:
			// leaving the undone rows would let the restart keep a hook its
			// provider was told 503 for.
			select {
			case err := <-w.fenceCh:
				if w.staleReport(err) {
					break
				}
				fctx, cancel := context.WithTimeout(context.Background(), shutdownFenceTimeout)
				w.fence(fctx, err)
				cancel()
			default:
			}
			w.refuseQueued(ErrClosed)
			if w.batch != nil {
				_ = w.batch.Close()
				w.batch = nil
			}
			return
		case err := <-w.fenceCh:
			if w.staleReport(err) {
				break
			}
			w.fence(ctx, err)
		case <-w.b.wake:
			w.round(ctx)
		case req := <-w.sweepReq:
			n, err := w.sweep()
			req.reply <- sweepResult{n, err}
		case req := <-w.localReq:
			req.reply <- w.completeLocal(req.entries)
		case <-flush:
			w.flushMarks()
		case <-tick:
			if _, err := w.sweep(); err != nil {
				w.log.Warn("dedupe sweep failed", "err", err)
			}
		}
	}
}

// staleReport reports whether a store failure report came after the fence
// it needed: the store's generation is a healthy one (a report reads
// Store.Failed, then sends; a fence that began in between drained the
// channel before the report landed). Fencing it would refuse commits and
// undo unsynced groups for nothing.
func (w *writer) staleReport(err error) bool {
	if w.st.Failed() != nil {
		return false
	}
	w.log.Debug("store failure report of a generation already reopened; no fence", "err", err)
	return true
}

// holdMax is the most records the writer leaves queued while an fsync runs
// (S1, syncer.go): at holdMax it applies them at once, overlapping the
// fsync; below it they wait for the fsync to return. It bounds what S1 puts
// between two fsyncs: about holdMax × 3 µs of apply, against an fsync of
// 0.3 ms and more.
const holdMax = 16

// round commits what is queued. With max_delay_ms > 0 it first lets a group
// fill, up to max_batch records or the delay, whichever comes first.
func (w *writer) round(ctx context.Context) {
	if w.dual == nil && w.opts.MaxDelay == 0 && w.s.hold(w.b.queued()) {
		return // S1: the fsync's return wakes the writer
	}
	if w.opts.MaxDelay > 0 && w.b.queued() < w.opts.MaxBatch {
		t := time.NewTimer(w.opts.MaxDelay)
	wait:
		for w.b.queued() < w.opts.MaxBatch {
			select {
			case <-t.C:
				break wait
			case <-w.b.wake:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		t.Stop()
	}
	items, more := w.b.drain(w.drained[:0])
	if len(items) > 0 {
		w.commit(items)
	}
	// S1: what was held is applied and handed over (or answered).
	w.s.unhold()
	// commit kept no reference to the slice (the replies copy the items).
	clear(items)
	w.drained = items[:0]
	if more {
		select {
		case w.b.wake <- struct{}{}:
		default:
		}
	}
}

// commitGroup is one group while the writer builds it: its batch, the
// callers it answers, and what the fence (rows) and the dual join
// (entries) need.
type commitGroup struct {
	now      time.Time
	nowMs    int64
	dual     bool
	batch    *store.Batch
	replies  []pendingReply
	dups     []pendingReply // dual: duplicates are answered by the local fsync alone
	rows     []store.Row    // every row the group writes, for the fence's undo
	restore  []store.Row    // the pen rows the group deletes, for the fence's undo (ack rule 7)
	arena    store.RowArena // the keys and values of rows (disk: AppendHookValue)
	entries  []*pendingEntry
	inGroup  map[string]original   // dedupe key → the new hook of this group holding it
	ids      map[[16]byte]original // caller-supplied id (Record.ID) → the new hook of this group holding it
	bytes    int64                 // dual: what the group adds to the pending set
	firstSeq uint64
	sinks    uint64 // delivery rows written
	// committed: the new hooks handed to dispatch once durable (with
	// Options.OnCommitted set).
	committed []store.Committed
	start     time.Time
}

// original is the hook a dedupe key of this group was first written with.
type original struct {
	id  [16]byte
	seq uint64
}

// commit builds, applies and hands off one group: admit (the dual gate),
// add each record (answered at once, or written as a new hook), then
// apply and hand the callers to the syncer.
func (w *writer) commit(items []*item) {
	if w.fenced.Load() {
		for _, it := range items {
			w.b.answer(it, outcome{err: ErrStoreUnavailable})
		}
		return
	}
	now := w.opts.Now()
	ok, probe := w.admit(now, items)
	if !ok {
		return
	}
	w.batch = w.st.RenewBatch(w.batch, batchSize(items))
	// An answered group's slices, cleared (syncer.spend), when there are
	// any: under disk they come back together; under dual a group's
	// replies (from the join) and its committed slice (from the syncer)
	// come back apart, so each kind has its own stash.
	w.takeSpent()
	g := &commitGroup{
		now: now, nowMs: now.UnixMilli(), dual: w.dual != nil, batch: w.batch,
		replies: takeSlice(&w.spareReplies, len(items)), firstSeq: w.nextSeq, start: time.Now(),
	}
	if w.opts.OnCommitted != nil {
		g.committed = takeSlice(&w.spareCommitted, len(items))
	}
	// One rows slice for the whole group, sized for every record written
	// as a new hook with its dedupe rows (under dual it holds only the row
	// headers, for the fence; it grew by appends before); under disk also
	// one arena for their keys and values (AppendHookValue): see
	// groupMemory.
	nrows, nbytes := 0, 0
	for _, it := range items {
		r := it.rec
		h := store.NewHook{Env: &store.Envelope{Tenant: r.Tenant, Source: r.Source, DedupeKey: r.DedupeKey}, Sinks: r.Sinks, Dedupe: r.DedupeKey != ""}
		nrows += store.HookRowCount(&h)
		nbytes += store.HookRowsSize(&h)
	}
	g.rows, g.arena = w.groupMemory(nrows, nbytes, g.dual)
	for _, it := range items {
		w.add(g, it)
	}
	if !w.apply(g, len(items), probe) {
		// A failed apply's batch is not renewed (store.RenewBatch).
		_ = w.batch.Close()
		w.batch = nil
	}
}

// groupMemory returns a new group's rows slice, empty with room for
// nrows, and its arena, under disk with room for nbytes (under dual the
// rows are the pending entries' own and the arena stays empty): a covered
// group's (pruneUnsynced) when one with room for nrows is kept, its arena
// regrown if short; otherwise new ones, their room rounded up like the
// stash's (spareRoom).
func (w *writer) groupMemory(nrows, nbytes int, dual bool) ([]store.Row, store.RowArena) {
	sp, ok := w.spare.take(nrows)
	if !ok {
		sp.rows = make([]store.Row, 0, spareRoom(nrows))
	}
	// A kept arena was reset and a new one is empty, so Cap is its room;
	// Grow alone would also replace an arena with room for nbytes but not
	// for spareRoom(nbytes).
	if !dual && sp.arena.Cap() < nbytes {
		sp.arena.Grow(spareRoom(nbytes))
	}
	return sp.rows, sp.arena
}

// admit asks the dual gate whether the group may start; probe says it is
// the gate's probe. An open gate refuses every record before any seq, so
// nothing exists half-way. Always admitted under wal.type: disk.
func (w *writer) admit(now time.Time, items []*item) (ok, probe bool) {
	if w.dual == nil {
		return true, false
	}
	ok, probe = w.dual.gate.admit(now, w.dual.in.Ready())
	if !ok {
		for _, it := range items {
			w.dual.obs.IntakeRefused("breaker")
			w.b.answer(it, outcome{err: w.dual.unavailable})
		}
	}
	return ok, probe
}

// add puts one record into the group: answered at once (waited past its
// deadline, a duplicate, refused) or written as a new hook.
func (w *writer) add(g *commitGroup, it *item) {
	if g.now.Sub(it.enqueued) > w.opts.Deadline {
		w.b.answer(it, outcome{err: fmt.Errorf("%w: waited %s to start committing", ErrOverload, g.now.Sub(it.enqueued))})
		return
	}
	r := it.rec
	if r.ID != ([16]byte{}) && w.idTaken(g, it) {
		return
	}
	var uk []byte
	if r.DedupeKey != "" {
		uk = store.DedupeKey(r.Tenant, r.Source, r.DedupeKey)
		if w.duplicate(g, it, uk) {
			return
		}
	}
	if g.dual && w.refuseDual(g, it) {
		return
	}
	w.putHook(g, it, uk)
}

// duplicate resolves a record's dedupe key uk. It reports true when the
// record is answered (refused, or joined as a duplicate of its original);
// false when it is a new hook: no original, an expired one, or one whose
// claim was released (its dedupe row is then replaced in this batch).
func (w *writer) duplicate(g *commitGroup, it *item, uk []byte) bool {
	if o, ok := g.inGroup[string(uk)]; ok {
		// Ack rule 3: answered once the original's fsync returns. Under dual
		// the original is in this very group, so the duplicate shares
		// its fate: it joins the group's replies.
		g.replies = append(g.replies, pendingReply{it: it, res: Result{ID: o.id, Seq: o.seq, Duplicate: true}, need: o.seq})
		if g.dual {
			g.entries = append(g.entries, nil)
		}
		return true
	}
	// Under dual the pending set is consulted before the store rows,
	// and again for the hook a row names: a 201 duplicate is only
	// ever sent for a hook confirmed in both places (ADR section 3).
	held := claimNone
	if g.dual {
		held = w.dual.pending.claimOf(string(uk), g.now, w.dual.opts.ReconcileDeadline)
	}
	if held == claimHeld {
		w.dual.obs.IntakeRefused("pending_dedupe")
		w.b.answer(it, outcome{err: ErrIntakePending})
		return true
	}
	if held != claimNone {
		return false // claimReleased: a new hook
	}
	v, err := w.st.Get(uk)
	if err != nil {
		w.b.answer(it, outcome{err: fmt.Errorf("%w: dedupe lookup: %w", ErrStoreUnavailable, err)})
		return true
	}
	var e *store.DedupeEntry
	if v != nil {
		if d, derr := store.DecodeDedupe(v); derr == nil && d.ExpiresAtMs > g.nowMs {
			e = d
		}
	}
	if e != nil && g.dual {
		held = w.dual.pending.claimOfSeq(e.Seq, g.now, w.dual.opts.ReconcileDeadline)
	}
	if held == claimHeld {
		w.dual.obs.IntakeRefused("pending_dedupe")
		w.b.answer(it, outcome{err: ErrIntakePending})
		return true
	}
	if e != nil && held == claimNone {
		pr := pendingReply{it: it, res: Result{ID: e.ID, Seq: e.Seq, Duplicate: true}, need: e.Seq}
		if g.dual {
			g.dups = append(g.dups, pr)
		} else {
			g.replies = append(g.replies, pr)
		}
		return true
	}
	return false
}

// idTaken keeps ack rule 7 (a) for a record that brings its own id
// (Record.ID: a released quarantined hook). It reports true when the record
// is answered: as a duplicate of the hook that holds the id (one of this
// group's, or a stored one, answered once the fsync covering it returned,
// as ack rule 3 has it), or, under dual, refused ErrIntakePending while a
// record with the id is in the pending set (in flight or carried), since
// the reconciler completes that record under that very id. False: no hook
// holds the id; it is written as a new hook.
//
// Why here, and not only in the caller's lookup (quarantine.Release reads
// the id row first): the writer alone gives seqs and runs complete-local,
// so only on its goroutine does "no hook holds this id" stay true until
// the seq is given. A caller's lookup raced the reconciler: under dual a
// release answered 503 after its local fsync failed and the log confirmed
// found no id row once the fence had undone the group, and its retry was
// committed as a second hook under the same id before the reconciler wrote
// the first one's local half: two seqs, two records in the log and two
// deliveries for one id. Rejected: the release taking a carried answer
// (Carried) as committed: a record whose two halves both failed lives only
// in the pending set, so deleting its pen row would let a crash lose it.
// Rejected: admitting it past reconcile_deadline_ms as duplicate does for
// a dedupe key: the sanctioned second hook of a key has an id of its own,
// a second hook under one id is the very thing this rule forbids.
func (w *writer) idTaken(g *commitGroup, it *item) bool {
	if o, ok := g.ids[it.id]; ok {
		// The first is in this very group: the duplicate shares its fate.
		g.replies = append(g.replies, pendingReply{it: it, res: Result{ID: o.id, Seq: o.seq, Duplicate: true}, need: o.seq})
		if g.dual {
			g.entries = append(g.entries, nil)
		}
		return true
	}
	if g.dual && w.dual.pending.hasID(it.id) {
		w.dual.obs.IntakeRefused("pending_id")
		w.b.answer(it, outcome{err: fmt.Errorf("%w: hook id %x is not yet confirmed in both places", ErrIntakePending, it.id)})
		return true
	}
	seq, found, err := w.st.LookupHookID(it.id)
	if err != nil {
		// A corrupt id row still means a hook holds the id (LookupHookID).
		w.b.answer(it, outcome{err: fmt.Errorf("%w: hook id lookup: %w", ErrStoreUnavailable, err)})
		return true
	}
	if !found {
		return false
	}
	// Not in the pending set: under dual the stored hook is confirmed in
	// both places, so the duplicate needs only the local fsync.
	pr := pendingReply{it: it, res: Result{ID: it.id, Seq: seq, Duplicate: true}, need: seq}
	if g.dual {
		g.dups = append(g.dups, pr)
	} else {
		g.replies = append(g.replies, pr)
	}
	return true
}

// refuseDual refuses, before either half and before any seq (nothing is
// written), a record too large for the log or one the pending set has no
// room for. It reports whether it refused.
func (w *writer) refuseDual(g *commitGroup, it *item) bool {
	// The bound every adapter's own size check stays under: a record
	// admitted here is never stored and then refused by the log for its
	// size (which would carry it stuck, its caller a 503).
	if w.dual.recordBound(it.rec) > w.dual.maxRecord {
		w.dual.obs.IntakeRefused("record_too_large")
		w.b.answer(it, outcome{err: w.dual.unavailable})
		return true
	}
	if !w.dual.pending.room(len(g.entries)+1, g.bytes+pendingCost(it), it.size+envelopeOverhead) {
		w.dual.obs.IntakeRefused("backlog")
		w.b.answer(it, outcome{err: w.dual.unavailable})
		return true
	}
	return false
}

// putHook gives the record the next seq and writes its rows (store.PutHook)
// into the group's batch; under dual it also becomes a pending entry.
func (w *writer) putHook(g *commitGroup, it *item, uk []byte) {
	r := it.rec
	seq := w.nextSeq
	w.nextSeq++
	// The writer's own envelope, not a new one per hook: nothing keeps it
	// past this call (the rows are encoded from it), and it is cleared at
	// the end so that it holds no body.
	env := &w.env
	*env = store.Envelope{
		Seq: seq, ID: it.id, ReceivedAt: r.ReceivedAt.UnixNano(),
		Tenant: r.Tenant, Source: r.Source, ContentType: r.ContentType,
		DedupeKey: r.DedupeKey, Flagged: r.Flagged, SHA256: r.BodySHA256,
		Headers: r.Headers, Body: r.Body,
	}
	if !r.HasBodySHA256 {
		env.SHA256 = sha256.Sum256(r.Body)
	}
	defer func() { *env = store.Envelope{} }()
	// Due at commit time, never earlier than the previous group's: new due
	// keys only ever land at or after dispatch's scan cursor, so its scan
	// can skip the tombstones of rows it already claimed.
	dueAt := max(g.nowMs, w.lastDueAt)
	w.lastDueAt = dueAt
	h := &store.NewHook{Env: env, Sinks: r.Sinks, DueAtMs: dueAt}
	if uk != nil {
		// Ack rule 2: the dedupe rows ride in the hook's own batch.
		h.Dedupe, h.DedupeExpiresAtMs = true, g.now.Add(r.DedupeTTL).UnixMilli()
		if g.inGroup == nil {
			g.inGroup = make(map[string]original)
		}
		g.inGroup[string(uk)] = original{id: it.id, seq: seq}
	}
	if r.ID != ([16]byte{}) {
		if g.ids == nil {
			g.ids = make(map[[16]byte]original)
		}
		g.ids[it.id] = original{id: it.id, seq: seq} // ack rule 7
	}
	if r.Held != nil {
		// Ack rule 7 (b): the pen row goes in the hook's own batch. Why not
		// leave its delete to the release once the commit returned: the id
		// row the release's next step looks for is gone as soon as the hook
		// is delivered and reclaimed (retention.delivered: 0), so a commit
		// the release never heard of (a 503 whose record the reconciler
		// then completed, a crash before the delete) was committed again:
		// one id, two deliveries
		// (TestRelease_RetriedAfterACarriedCommitUnderDualCommitsOnce).
		// Rejected: the release waiting for the reconciler's verdict; that
		// only narrows the window to a step's timeout.
		back, _ := g.batch.TakePen(r.Held.PenRef, r.Held.Value) // a dead batch fails the apply
		g.restore = append(g.restore, back)
	}
	// Dispatch takes new hooks from memory: a value up to maxHandedValue
	// is handed over with the hook in a buffer of its own, so its first
	// delivery reads nothing back (the Get it saves allocated as much);
	// under disk the batch's hook row is written from that same encoding.
	// Larger ones are read back, so memory held for delivery stays bounded
	// per hook. Under dual the record's own encoding is handed as it is: it
	// is never changed, and is held for the log and complete-local anyway.
	//
	// A hook with an id of its own (a released quarantined hook, Record.ID)
	// is not handed over at all: the dispatcher single-deletes the id row
	// of the hooks it holds (store W1), which needs that row SET once since
	// it was last deleted, and only an id this writer minted is known to
	// be. Ack rule 7 keeps a second hook off a released id (before it, a
	// release retried after a fence under dual did commit one twice), but
	// the id came from elsewhere. It is delivered from the store's rows.
	commit := w.opts.OnCommitted != nil && r.ID == ([16]byte{})
	hand := commit && store.EnvelopeSize(env) <= maxHandedValue
	if hand && !g.dual {
		h.Value = store.EncodeEnvelope(env)
	}
	var rows []store.Row
	if g.dual {
		// The encoded value is kept: it is published and held for
		// complete-local. The pending entry's rows are an allocation of
		// their own, not a view of the group's rows and arena: a carried
		// entry outlives its group, and would keep every other record of
		// it alive, envelopes included, outside the pending set's
		// max_bytes (found by review).
		rows, _ = g.batch.PutHook(h) // a dead batch fails the apply
		g.rows = append(g.rows, rows...)
	} else {
		// Under disk only the batch (and dispatch, above) reads the
		// value: unless handed over, the envelope is encoded straight
		// into the batch, and the kept rows have no value (the fence
		// deletes by key). The other rows go in at apply, family by
		// family across the group (store.PutRowsByFamily).
		first := len(g.rows)
		g.rows, _ = g.batch.AppendHookValue(g.rows, &g.arena, h) // a dead batch fails the apply
		rows = g.rows[first:]
	}
	if commit {
		c := store.Committed{Seq: seq, DueAtMs: dueAt, Size: uint32(len(r.Body)), Sinks: r.Sinks}
		switch {
		case !hand:
		case g.dual:
			c.Value = rows[0].Value
		default:
			c.Value = h.Value
		}
		g.committed = append(g.committed, c)
	}
	g.sinks += uint64(len(r.Sinks))
	g.replies = append(g.replies, pendingReply{it: it, res: Result{ID: it.id, Seq: seq}, need: seq})
	if g.dual {
		g.bytes += pendingCost(it)
		val := rows[0].Value
		e := &pendingEntry{
			seq: seq, id: it.id, dedupe: string(uk), rows: rows, firstAt: g.now, inflight: true, held: r.Held,
			tenant: r.Tenant, source: r.Source, value: val,
		}
		// rows[0].Value is val, the record's value too: counted once.
		for _, o := range rows {
			e.size += int64(len(o.Key) + len(o.Value))
		}
		g.entries = append(g.entries, e)
	}
}

// apply applies the group's batch and hands its callers to the syncer. A
// failed apply answers them (or, under dual, the join) with the error and
// fences; apply then reports false.
func (w *writer) apply(g *commitGroup, records int, probe bool) bool {
	written := int(w.nextSeq - g.firstSeq)
	if probe && written == 0 {
		// A probe that publishes nothing reports nothing (gate invariant G1).
		w.dual.gate.release()
	}
	var join *dualGroup
	if written > 0 {
		if !g.dual {
			// Ack rule 2: the rest of the group's rows, dedupe rows
			// included, into the same batch as their hook rows.
			_ = g.batch.PutRowsByFamily(g.rows) // a dead batch fails the apply
		}
		_ = g.batch.SetNextSeq(w.nextSeq) // ack rule 4
		// Remember the group before applying: a failed apply may still have
		// left rows visible, and the fence must delete them.
		w.unsynced = append(w.unsynced, appliedGroup{maxSeq: w.nextSeq - 1, rows: g.rows, arena: g.arena, restore: g.restore})
		w.nextSeqPublic.Store(w.nextSeq)
		if g.dual {
			// Both halves are issued together: the publish starts before the
			// local apply, and from here on every record is carried to
			// completion (ADR section 3), never undone.
			join = w.dual.begin(g.replies, g.entries, probe)
		}
		if err := w.st.Apply(g.batch); err != nil {
			w.opts.Observer.Group(records, written, time.Since(g.start))
			if join != nil {
				join.local(err)
			} else {
				for _, r := range g.replies {
					w.b.answer(r.it, outcome{err: fmt.Errorf("%w: %w", ErrStoreUnavailable, err)})
				}
			}
			for _, r := range g.dups {
				w.b.answer(r.it, outcome{err: fmt.Errorf("%w: %w", ErrStoreUnavailable, err)})
			}
			w.fence(context.Background(), err)
			return false
		}
		w.s.applied.Store(w.nextSeq - 1)
		w.hooks.Add(uint64(written))
		w.deliveries.Add(g.sinks)
	}
	w.opts.Observer.Group(records, written, time.Since(g.start))
	switch {
	case join != nil:
		w.s.submit(handoff{replies: g.replies, join: join, committed: g.committed})
	case len(g.replies) > 0:
		w.s.submit(handoff{replies: g.replies, committed: g.committed})
	default:
		// Nothing to hand over: every record was answered at once, or under
		// dual was a duplicate (g.dups, below, come back as a replies slice
		// of their own). The slices the group took go straight back; before,
		// they were left to the GC.
		putSlice(&w.spareReplies, g.replies)
		putSlice(&w.spareCommitted, g.committed)
	}
	if len(g.dups) > 0 {
		w.s.submit(handoff{replies: g.dups})
	}
	if written == 0 {
		// No hook was written, so no row was put in the rows slice or the
		// arena (putHook writes them with the seq it takes), and neither
		// went to the fence: they are the next group's as they are.
		w.spare.put(appliedGroup{rows: g.rows, arena: g.arena}, cap(g.rows), sliceBytes(g.rows)+g.arena.Cap())
	}
	w.pruneUnsynced()
	return true
}

// pruneUnsynced forgets the groups an fsync has covered. Their rows
// slices and arenas are kept for the next groups while the stash has room
// (groupMemory): the batch copied every key and value, the fence undoes
// only groups no fsync covered, and nothing else holds them. Under dual
// the group's rows slice holds only row headers whose keys and values are
// the pending entries' own (putHook): it is cleared, so a spare keeps no
// entry alive, and its arena is empty.
func (w *writer) pruneUnsynced() {
	d := w.s.durable.Load()
	i := 0
	for i < len(w.unsynced) && w.unsynced[i].maxSeq <= d {
		i++
	}
	for _, ag := range w.unsynced[:i] {
		clear(ag.rows)
		ag.rows = ag.rows[:0]
		ag.arena.Reset()
		ag.restore = nil
		w.spare.put(ag, cap(ag.rows), sliceBytes(ag.rows)+ag.arena.Cap())
	}
	if i > 0 {
		n := copy(w.unsynced, w.unsynced[i:])
		clear(w.unsynced[n:])
		w.unsynced = w.unsynced[:n]
	}
}

// refuseQueued answers everything still in the batcher.
func (w *writer) refuseQueued(err error) {
	for {
		items, _ := w.b.drain(nil)
		if len(items) == 0 {
			return
		}
		for _, it := range items {
			w.b.answer(it, outcome{err: err})
		}
	}
}

func (w *writer) requestSweep(ctx context.Context) (int, error) {
	req := sweepRequest{reply: make(chan sweepResult, 1)}
	select {
	case w.sweepReq <- req:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// sweep deletes up to SweepBatch expired dedupe keys. It runs on the writer
// goroutine because the writer is the one reader-then-writer of dedupe rows:
// a sweep racing a commit could delete a key the commit just renewed.
func (w *writer) sweep() (int, error) {
	if w.fenced.Load() {
		return 0, ErrStoreUnavailable
	}
	found, err := w.st.ExpiredDedupes(w.opts.Now().UnixMilli(), w.opts.SweepBatch)
	if err != nil || len(found) == 0 {
		return 0, err
	}
	batch := w.st.NewBatch()
	defer batch.Close()
	_ = batch.DeleteExpired(found) // a dead batch fails the apply
	// Not synced: a lost sweep is redone by the next one.
	if err := w.st.Apply(batch); err != nil {
		w.fence(context.Background(), err)
		return 0, err
	}
	return len(found), nil
}

var errFenceAborted = errors.New("fence aborted by shutdown")

// shutdownFenceTimeout bounds the cleanup of a failure met while stopping.
const shutdownFenceTimeout = 5 * time.Second
