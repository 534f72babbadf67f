package queue

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/store"
)

// appliedGroup remembers what a group wrote until an fsync covers it, so
// that the fence can delete exactly the groups no fsync covered.
type appliedGroup struct {
	maxSeq uint64
	keys   [][]byte
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
	h, err := w.st.Count([]byte{store.PrefixHook})
	if err != nil {
		return fmt.Errorf("count hooks: %w", err)
	}
	d, err := w.st.Count([]byte{store.PrefixDelivery})
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
				fctx, cancel := context.WithTimeout(context.Background(), shutdownFenceTimeout)
				w.fence(fctx, err)
				cancel()
			default:
			}
			w.refuseQueued(ErrClosed)
			return
		case err := <-w.fenceCh:
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

// round commits what is queued. With max_delay_ms > 0 it first lets a group
// fill, up to max_batch records or the delay, whichever comes first.
func (w *writer) round(ctx context.Context) {
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
	items, more := w.b.drain(nil)
	if len(items) > 0 {
		w.commit(items)
	}
	if more {
		select {
		case w.b.wake <- struct{}{}:
		default:
		}
	}
}

// commit builds, applies and hands off one group.
func (w *writer) commit(items []*item) {
	if w.fenced.Load() {
		for _, it := range items {
			w.b.answer(it, outcome{err: ErrStoreUnavailable})
		}
		return
	}
	now := w.opts.Now()
	dual := w.dual != nil
	probe := false
	if dual {
		var ok bool
		ok, probe = w.dual.gate.admit(now, w.dual.in.Ready())
		if !ok {
			// Open gate: refused before any seq, so nothing exists half-way.
			for _, it := range items {
				w.dual.obs.IntakeRefused("breaker")
				w.b.answer(it, outcome{err: w.dual.unavailable})
			}
			return
		}
	}
	nowMs := now.UnixMilli()
	batch := w.st.NewBatch()
	defer batch.Close()
	replies := make([]pendingReply, 0, len(items))
	var dups []pendingReply // dual: duplicates are answered by the local fsync alone
	var keys [][]byte
	var entries []*pendingEntry
	var deliveries uint64
	type original struct {
		id  [16]byte
		seq uint64
	}
	var inGroup map[string]original
	var groupBytes int64
	firstSeq := w.nextSeq
	start := time.Now()

	for _, it := range items {
		if now.Sub(it.enqueued) > w.opts.Deadline {
			w.b.answer(it, outcome{err: fmt.Errorf("%w: waited %s to start committing", ErrOverload, now.Sub(it.enqueued))})
			continue
		}
		r := it.rec
		var uk []byte
		if r.DedupeKey != "" {
			uk = store.DedupeKey(r.Tenant, r.Source, r.DedupeKey)
			if o, ok := inGroup[string(uk)]; ok {
				// Rule 3: answered once the original's fsync returns. Under dual
				// the original is in this very group, so the duplicate shares
				// its fate: it joins the group's replies.
				pr := pendingReply{it: it, res: Result{ID: o.id, Seq: o.seq, Duplicate: true}, need: o.seq}
				replies = append(replies, pr)
				if dual {
					entries = append(entries, nil)
				}
				continue
			}
			// Under dual the pending set is consulted before the store rows,
			// and again for the hook a row names: a 201 duplicate is only
			// ever sent for a hook confirmed in both places (ADR section 3).
			held := claimNone
			if dual {
				held = w.dual.pending.claimOf(string(uk), now, w.dual.opts.ReconcileDeadline)
			}
			if held == claimHeld {
				w.dual.obs.IntakeRefused("pending_dedupe")
				w.b.answer(it, outcome{err: ErrIntakePending})
				continue
			}
			if held == claimNone {
				v, err := w.st.Get(uk)
				if err != nil {
					w.b.answer(it, outcome{err: fmt.Errorf("%w: dedupe lookup: %w", ErrStoreUnavailable, err)})
					continue
				}
				var e *store.DedupeEntry
				if v != nil {
					if d, derr := store.DecodeDedupe(v); derr == nil && d.ExpiresAtMs > nowMs {
						e = d
					}
				}
				if e != nil && dual {
					held = w.dual.pending.claimOfSeq(e.Seq, now, w.dual.opts.ReconcileDeadline)
				}
				if held == claimHeld {
					w.dual.obs.IntakeRefused("pending_dedupe")
					w.b.answer(it, outcome{err: ErrIntakePending})
					continue
				}
				if e != nil && held == claimNone {
					pr := pendingReply{it: it, res: Result{ID: e.ID, Seq: e.Seq, Duplicate: true}, need: e.Seq}
					if dual {
						dups = append(dups, pr)
					} else {
						replies = append(replies, pr)
					}
					continue
				}
			}
			// claimReleased, an expired row or none: a new hook; its dedupe
			// row replaces the old one in this group's batch.
		}
		env := store.Envelope{
			ID: it.id, ReceivedAt: r.ReceivedAt.UnixNano(),
			Tenant: r.Tenant, Source: r.Source, ContentType: r.ContentType,
			DedupeKey: r.DedupeKey, Flagged: r.Flagged, SHA256: sha256.Sum256(r.Body),
			Headers: r.Headers, Body: r.Body,
		}
		if dual {
			// Refusals before either half: no seq, nothing written.
			// it.size covers body, headers and keys; the envelope adds a fixed
			// few dozen bytes.
			if it.size+envelopeOverhead > w.dual.maxRecord {
				w.dual.obs.IntakeRefused("record_too_large")
				w.b.answer(it, outcome{err: w.dual.unavailable})
				continue
			}
			if !w.dual.pending.room(len(entries)+1, groupBytes+2*it.size) {
				w.dual.obs.IntakeRefused("backlog")
				w.b.answer(it, outcome{err: w.dual.unavailable})
				continue
			}
		}
		seq := w.nextSeq
		w.nextSeq++
		env.Seq = seq
		val := store.EncodeEnvelope(&env)
		ops := make([]kv, 0, 6+2*len(r.Sinks))
		ops = append(ops, kv{store.HookKey(seq), val}, kv{store.HookIDKey(it.id), store.U64(seq)})
		// The listing indexes (GET /v1/hooks?source|tenant) ride in the
		// hook's batch, so the fence undoes them with it.
		idx := store.HookIndexKeys(env.Tenant, env.Source, seq)
		ops = append(ops, kv{idx[0], nil}, kv{idx[1], nil})
		// Due at commit time, never earlier than the previous group's: new due
		// keys only ever land at or after dispatch's scan cursor, so its scan
		// can skip the tombstones of rows it already claimed.
		dueAt := max(nowMs, w.lastDueAt)
		w.lastDueAt = dueAt
		for _, sk := range r.Sinks {
			ops = append(ops,
				kv{store.DeliveryKey(seq, sk.Num), store.EncodeDelivery(&store.Delivery{
					State: store.StateDue, NextAtMs: dueAt, Size: uint32(len(r.Body)), SinkID: sk.ID,
				})},
				kv{store.DueKey(dueAt, seq, sk.Num), nil})
			deliveries++
		}
		if uk != nil {
			// Rule 2: the dedupe rows ride in the hook's own batch.
			exp := now.Add(r.DedupeTTL).UnixMilli()
			ops = append(ops,
				kv{uk, store.EncodeDedupe(&store.DedupeEntry{ExpiresAtMs: exp, ID: it.id, Seq: seq})},
				kv{store.ExpiryKey(exp, uk), nil})
			if inGroup == nil {
				inGroup = make(map[string]original)
			}
			inGroup[string(uk)] = original{id: it.id, seq: seq}
		}
		for _, o := range ops {
			_ = batch.Set(o.k, o.v, nil)
			keys = append(keys, o.k)
		}
		replies = append(replies, pendingReply{it: it, res: Result{ID: it.id, Seq: seq}, need: seq})
		groupBytes += 2 * it.size
		if dual {
			e := &pendingEntry{
				seq: seq, id: it.id, dedupe: string(uk), ops: ops, firstAt: now, inflight: true,
				rec: intake.Record{
					Version: intake.RecordVersion, Kind: intake.KindHook, Node: w.dual.node, Seq: seq, ID: it.id,
					Incarnation: w.dual.incarnation, Tenant: r.Tenant, Source: r.Source, Value: val,
				},
			}
			for _, o := range ops {
				e.size += int64(len(o.k) + len(o.v))
			}
			e.size += int64(len(val))
			entries = append(entries, e)
		}
	}

	written := int(w.nextSeq - firstSeq)
	if probe && written == 0 {
		// A probe that publishes nothing reports nothing (gate invariant G1).
		w.dual.gate.release()
	}
	var group *dualGroup
	if written > 0 {
		_ = batch.SetNextSeq(w.nextSeq)
		// Remember the group before applying: a failed apply may still have
		// left rows visible, and the fence must delete them.
		w.unsynced = append(w.unsynced, appliedGroup{maxSeq: w.nextSeq - 1, keys: keys})
		w.nextSeqPublic.Store(w.nextSeq)
		if dual {
			// Both halves are issued together: the publish starts before the
			// local apply, and from here on every record is carried to
			// completion (ADR section 3), never undone.
			group = w.dual.begin(replies, entries)
		}
		if err := w.st.Apply(batch); err != nil {
			w.opts.Observer.Group(len(items), written, time.Since(start))
			if group != nil {
				group.local(err)
			} else {
				for _, r := range replies {
					w.b.answer(r.it, outcome{err: fmt.Errorf("%w: %w", ErrStoreUnavailable, err)})
				}
			}
			for _, r := range dups {
				w.b.answer(r.it, outcome{err: fmt.Errorf("%w: %w", ErrStoreUnavailable, err)})
			}
			w.fence(context.Background(), err)
			return
		}
		w.s.applied.Store(w.nextSeq - 1)
		w.hooks.Add(uint64(written))
		w.deliveries.Add(deliveries)
	}
	w.opts.Observer.Group(len(items), written, time.Since(start))
	switch {
	case group != nil:
		w.s.submit(handoff{replies: replies, onLocal: group.local})
	case len(replies) > 0:
		w.s.submit(handoff{replies: replies})
	}
	if len(dups) > 0 {
		w.s.submit(handoff{replies: dups})
	}
	w.pruneUnsynced()
}

// pruneUnsynced forgets the groups an fsync has covered.
func (w *writer) pruneUnsynced() {
	d := w.s.durable.Load()
	i := 0
	for i < len(w.unsynced) && w.unsynced[i].maxSeq <= d {
		i++
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
	nowMs := w.opts.Now().UnixMilli()
	upper := store.ExpiryKey(nowMs, []byte{store.PrefixDedupe})
	type exp struct {
		ek, uk []byte
		at     int64
	}
	var found []exp
	err := w.st.Scan([]byte{store.PrefixExpiry}, upper, func(k, _ []byte) bool {
		at, uk, ok := store.ParseExpiryKey(k)
		if ok {
			found = append(found, exp{ek: append([]byte(nil), k...), uk: uk, at: at})
		}
		return len(found) < w.opts.SweepBatch
	})
	if err != nil || len(found) == 0 {
		return 0, err
	}
	batch := w.st.NewBatch()
	defer batch.Close()
	for _, f := range found {
		_ = batch.Delete(f.ek, nil)
		v, err := w.st.Get(f.uk)
		if err != nil {
			return 0, err
		}
		// A key renewed since this expiry row was written points at a later
		// expiry row of its own; only the entry this row describes goes.
		if e, derr := store.DecodeDedupe(v); v != nil && derr == nil && e.ExpiresAtMs == f.at {
			_ = batch.Delete(f.uk, nil)
		}
	}
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
