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

	nextSeq  uint64         // owned by the run goroutine
	unsynced []appliedGroup // owned by the run goroutine

	nextSeqPublic atomic.Uint64
	hooks         atomic.Uint64
	deliveries    atomic.Uint64
	fenced        atomic.Bool
	fences        atomic.Uint64 // fences completed
	lastFailure   atomic.Int64  // unix ns

	fenceCh  chan error // capacity 1: the syncer's "an fsync failed"
	sweepReq chan sweepRequest
}

func newWriter(st *store.Store, opts *Options, b *batcher, s *syncer) (*writer, error) {
	w := &writer{
		st: st, opts: opts, b: b, s: s,
		log:      opts.Logger.With("component", "writer"),
		fenceCh:  make(chan error, 1),
		sweepReq: make(chan sweepRequest),
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

// recover reads next_seq and the counts back from the store. next_seq is the
// larger of the stored marker and the highest hook + 1, so a seq is never
// reused even if the marker were behind.
func (w *writer) recover() error {
	next := uint64(1)
	if v, err := w.st.Get(store.KeyNextSeq); err != nil {
		return fmt.Errorf("read next_seq: %w", err)
	} else if v != nil {
		n, ok := store.ParseU64(v)
		if !ok {
			return fmt.Errorf("read next_seq: %w", store.ErrCorrupt)
		}
		next = max(next, n)
	}
	var last uint64
	err := w.st.Scan([]byte{store.PrefixHook}, []byte{store.PrefixHook + 1}, func(k, _ []byte) bool {
		if s, ok := store.ParseU64(k[1:]); ok {
			last = s
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("find last hook: %w", err)
	}
	next = max(next, last+1)
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
	var tick <-chan time.Time
	if w.opts.SweepInterval > 0 {
		t := time.NewTicker(w.opts.SweepInterval)
		defer t.Stop()
		tick = t.C
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
	nowMs := now.UnixMilli()
	batch := w.st.NewBatch()
	defer batch.Close()
	replies := make([]pendingReply, 0, len(items))
	var keys [][]byte
	var deliveries uint64
	type original struct {
		id  [16]byte
		seq uint64
	}
	var inGroup map[string]original
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
				// Rule 3: answered once the original's fsync returns.
				replies = append(replies, pendingReply{it: it, res: Result{ID: o.id, Seq: o.seq, Duplicate: true}, need: o.seq})
				continue
			}
			v, err := w.st.Get(uk)
			if err != nil {
				w.b.answer(it, outcome{err: fmt.Errorf("%w: dedupe lookup: %v", ErrStoreUnavailable, err)})
				continue
			}
			if v != nil {
				e, err := store.DecodeDedupe(v)
				if err == nil && e.ExpiresAtMs > nowMs {
					replies = append(replies, pendingReply{it: it, res: Result{ID: e.ID, Seq: e.Seq, Duplicate: true}, need: e.Seq})
					continue
				}
			}
		}
		seq := w.nextSeq
		w.nextSeq++
		env := store.Envelope{
			ID: it.id, Seq: seq, ReceivedAt: r.ReceivedAt.UnixNano(),
			Tenant: r.Tenant, Source: r.Source, ContentType: r.ContentType,
			DedupeKey: r.DedupeKey, Flagged: r.Flagged, SHA256: sha256.Sum256(r.Body),
			Headers: r.Headers, Body: r.Body,
		}
		hk, ik := store.HookKey(seq), store.HookIDKey(it.id)
		_ = batch.Set(hk, store.EncodeEnvelope(&env), nil)
		_ = batch.Set(ik, store.U64(seq), nil)
		keys = append(keys, hk, ik)
		dueAt := r.ReceivedAt.UnixMilli()
		for _, sk := range r.Sinks {
			dk, qk := store.DeliveryKey(seq, sk.Num), store.DueKey(dueAt, seq, sk.Num)
			_ = batch.Set(dk, store.EncodeDelivery(&store.Delivery{
				State: store.StateDue, NextAtMs: dueAt, Size: uint32(len(r.Body)), SinkID: sk.ID,
			}), nil)
			_ = batch.Set(qk, nil, nil)
			keys = append(keys, dk, qk)
			deliveries++
		}
		if uk != nil {
			// Rule 2: the dedupe rows ride in the hook's own batch.
			exp := now.Add(r.DedupeTTL).UnixMilli()
			ek := store.ExpiryKey(exp, uk)
			_ = batch.Set(uk, store.EncodeDedupe(&store.DedupeEntry{ExpiresAtMs: exp, ID: it.id, Seq: seq}), nil)
			_ = batch.Set(ek, nil, nil)
			keys = append(keys, uk, ek)
			if inGroup == nil {
				inGroup = make(map[string]original)
			}
			inGroup[string(uk)] = original{id: it.id, seq: seq}
		}
		replies = append(replies, pendingReply{it: it, res: Result{ID: it.id, Seq: seq}, need: seq})
	}

	written := int(w.nextSeq - firstSeq)
	if written > 0 {
		_ = batch.Set(store.KeyNextSeq, store.U64(w.nextSeq), nil)
		// Remember the group before applying: a failed apply may still have
		// left rows visible, and the fence must delete them.
		w.unsynced = append(w.unsynced, appliedGroup{maxSeq: w.nextSeq - 1, keys: keys})
		w.nextSeqPublic.Store(w.nextSeq)
		if err := w.st.Apply(batch); err != nil {
			w.opts.Observer.Group(len(items), written, time.Since(start))
			for _, r := range replies {
				w.b.answer(r.it, outcome{err: fmt.Errorf("%w: %v", ErrStoreUnavailable, err)})
			}
			w.fence(context.Background(), err)
			return
		}
		w.s.applied.Store(w.nextSeq - 1)
		w.hooks.Add(uint64(written))
		w.deliveries.Add(deliveries)
	}
	w.opts.Observer.Group(len(items), written, time.Since(start))
	if len(replies) > 0 {
		w.s.submit(handoff{replies: replies})
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
