// dual_reconcile.go owns the completion of carried records (ADR section
// 7): the reconciler's passes, the writer-side complete-local it asks for,
// and the fence of a failure met inside that request.

package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/store"
)

func (d *dualState) wakeReconciler() {
	select {
	case d.wakeRec <- struct{}{}:
	default:
	}
}

// localRequest asks the writer to complete local halves.
type localRequest struct {
	entries []*pendingEntry
	reply   chan error
}

// completeLocal writes the local half of carried records whose local write
// failed (ADR section 7, :half_log): a point read first — the row may have
// landed after all — then the held ops in one synced batch. Runs on the
// writer goroutine, so it never interleaves with a fence cleanup. It may
// run before the fence of a failed fsync begins (the syncer answers the
// callers before the writer is told): the store then refuses the write
// (fenced until reopened), and the reconciler tries again later.
func (w *writer) completeLocal(es []*pendingEntry) error {
	if w.fenced.Load() {
		return ErrStoreUnavailable
	}
	b := w.st.NewBatch()
	if b.Err() != nil {
		return store.ErrClosed
	}
	defer b.Close()
	var written []*pendingEntry
	var present []*pendingEntry
	deliveries := uint64(0)
	for _, e := range es {
		v, err := w.st.ReadHook(e.seq)
		if err != nil {
			return err
		}
		if v != nil {
			present = append(present, e)
			continue
		}
		_ = b.PutRows(e.rows) // a dead batch fails the apply
		if e.held != nil {
			_, _ = b.TakePen(e.held.PenRef, e.held.Value) // ack rule 7; the fence put the row back
		}
		deliveries += uint64(store.DeliveryRows(e.rows))
		written = append(written, e)
	}
	if len(written) == 0 && len(present) > 0 {
		// A row found present may be one a failed synced write left in the
		// page cache: make it durable before calling the half done.
		if err := w.st.SyncWAL(); err != nil {
			w.fenceAfterReply(err)
			return err
		}
	}
	if len(written) > 0 {
		if err := w.st.ApplySync(b); err != nil {
			w.fenceAfterReply(err)
			return err
		}
		w.hooks.Add(uint64(len(written)))
		w.deliveries.Add(deliveries)
		w.opts.OnDurable()
	}
	p := w.dual.pending
	p.mu.Lock()
	for _, e := range append(written, present...) {
		e.localDone = true
		p.settleLocked(e)
	}
	p.mu.Unlock()
	for range written {
		w.dual.obs.IntakeReconciled("local")
	}
	return nil
}

// fenceAfterReply is the fence of a write that failed inside a request
// someone waits on (completeLocal, asked by the reconciler): step 1 at once
// — nothing is acked, the syncer starts no fsync — and the rest (reopen,
// cleanup, retried for as long as the disk fails) on the writer loop once
// the request is answered, so the reconciler's pass and the log halves
// after it are not held by the disk.
func (w *writer) fenceAfterReply(err error) {
	w.fenced.Store(true)
	w.s.enterFence()
	select {
	case w.fenceCh <- err:
	default: // a fence is already pending; it covers this failure too
	}
}

// reconciler completes carried records (ADR section 7): half_local by
// republishing, half_log by a point read and a re-apply, both_pending local
// first. It never drops a record; a permanent class marks it stuck and keeps
// retrying.
type reconciler struct {
	w *writer
	d *dualState
}

func (r *reconciler) run(ctx context.Context) {
	t := time.NewTicker(r.d.opts.ReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.d.wakeRec:
		}
		if r.d.now().UnixNano() < r.d.holdUntil.Load() {
			continue
		}
		r.pass(ctx)
	}
}

// pass does one round; it returns when to try again at the earliest (a
// throttled log's Retry-After).
func (r *reconciler) pass(ctx context.Context) time.Time {
	var released []releasedClaim
	// Logged after passMu is let go (deferred before it is taken): a
	// stuck spell can release up to intake.pending.max_records claims at
	// once, and the next pass need not wait for their lines.
	defer func() {
		for _, rc := range released {
			// Info, not Warn: ratelog would keep one line of this shape
			// per interval, and each line names a different hook.
			r.d.log.Info(LogClaimReleased, "id", uuid.UUID(rc.id).String(), "age", rc.age.Round(time.Millisecond),
				"deadline", r.d.opts.ReconcileDeadline)
		}
	}()
	r.d.passMu.Lock()
	defer r.d.passMu.Unlock()
	released = r.d.pending.releaseStuckClaims(r.d.now(), r.d.opts.ReconcileDeadline)
	es := r.d.pending.carried()
	if len(es) == 0 {
		return time.Time{}
	}
	var needLocal, needLog []*pendingEntry
	now := r.d.now()
	r.d.pending.mu.Lock()
	for _, e := range es {
		switch {
		case !e.localDone:
			needLocal = append(needLocal, e)
		case e.logDone:
		case e.retryAt.After(now):
			// Refused by the log on its own a moment ago (refusedRetry).
		default:
			needLog = append(needLog, e)
		}
	}
	r.d.pending.mu.Unlock()
	if len(needLocal) > 0 {
		// A fenced writer is busy reopening and cleaning up for as long as
		// the store fails: asking it now would hold this pass (and the log
		// halves below) hostage to the disk. The local half waits for a
		// later pass; the log half goes ahead.
		if !r.w.fenced.Load() {
			req := localRequest{entries: needLocal, reply: make(chan error, 1)}
			select {
			case r.w.localReq <- req:
				select {
				case err := <-req.reply:
					if err != nil {
						r.d.warn("reconciler: local half still failing", "records", len(needLocal), "err", err)
					}
				case <-ctx.Done():
					return time.Time{} // the reply is buffered: the writer never blocks on it
				}
			case <-ctx.Done():
				return time.Time{}
			}
		}
		// Local first (it makes the hook deliverable), then the log half of
		// the both-pending ones in the same pass — also when the local half
		// failed again: a record the log holds is safe from the loss of
		// this host, and the local half follows once the store is back.
		r.d.pending.mu.Lock()
		for _, e := range needLocal {
			if !e.logDone {
				needLog = append(needLog, e)
			}
		}
		r.d.pending.mu.Unlock()
	}
	for len(needLog) > 0 {
		n := min(len(needLog), 256)
		chunk := needLog[:n]
		needLog = needLog[n:]
		recs := make([]intake.Record, n)
		for i, e := range chunk {
			recs[i] = e.record(r.d)
		}
		// A chunk the log refuses for one of its records is split until
		// each refused record stands alone (publishRefusing): one record
		// larger than the log takes must not keep the others of its chunk
		// carried. A refusal of the log itself stops the pass unsplit.
		pos, refused, recErr, err := r.d.publishRefusing(ctx, recs)
		if err == nil && len(refused) < n {
			// A confirmed republish shows the log is back; a failed one is
			// not counted, so the gate's probe accounting stays the commit
			// path's own.
			r.d.gate.result(true, r.d.now())
		}
		if err != nil {
			r.d.hold(err)
			class, retryAfter := intake.ClassOf(err)
			if class == intake.Permanent || class == intake.NotFound {
				r.d.pending.mu.Lock()
				for _, e := range chunk {
					e.stuck = true
				}
				r.d.pending.mu.Unlock()
			}
			r.d.warn("reconciler: republish failed; will retry", "records", n, "class", class.String(), "err", err)
			if class == intake.Throttled && retryAfter > 0 {
				return r.d.now().Add(retryAfter)
			}
			return time.Time{}
		}
		if len(refused) > 0 {
			r.d.warn("reconciler: the log refused records permanently; will retry", "records", len(refused), "of", n, "class", intake.Permanent.String(), "err", recErr)
		}
		r.d.pending.mu.Lock()
		ri := 0
		for i, e := range chunk {
			if ri < len(refused) && refused[ri] == i {
				ri++
				e.stuck, e.retryAt = true, r.d.now().Add(refusedRetry)
				continue
			}
			e.logDone, e.stuck = true, false
			e.pos = pos[i]
			r.d.pending.settleLocked(e)
		}
		r.d.pending.mu.Unlock()
		for range n - len(refused) {
			r.d.obs.IntakeReconciled("log")
		}
	}
	return time.Time{}
}

// Carry hands the queue the hooks boot recovery's republish could not
// place in the log (Summary.Refused: refused Permanent on their own): they
// are stored (their local half is done) and enter the pending set as stuck
// records, as they were before the node went down. The reconciler goes on
// retrying them (ADR section 7: a carried hook is never dropped), the
// watermark stays below them (pendingSet.marks), and a retry of one's
// dedupe key is answered as for any unconfirmed original (claimOf), never
// "201 duplicate" from the stored dedupe row while the log lacks the hook
// (ack rule 2). Call it after Reload and before Start; a no-op under
// wal.type: disk. A seq with no hook row (delivered and gone since) is
// skipped. refused says the log refused them (they start stuck); false:
// their log half is unknown (UnconfirmedHooks), the reconciler publishes
// them. An error: a store failure, or more records than the pending set
// holds (intake.pending), which the boot reports as it is.
func (q *Queue) Carry(seqs []uint64, refused bool) error {
	d := q.writer.dual
	if d == nil || len(seqs) == 0 {
		return nil
	}
	var es []*pendingEntry
	var size int64
	for _, seq := range seqs {
		v, err := q.writer.st.Get(store.HookKey(seq))
		if err != nil {
			return fmt.Errorf("carry seq %d: %w", seq, err)
		}
		if v == nil {
			continue
		}
		env, err := store.DecodeEnvelope(v)
		if err != nil {
			return fmt.Errorf("carry seq %d: %w", seq, err)
		}
		e := &pendingEntry{
			seq: seq, id: env.ID, firstAt: time.Unix(0, env.ReceivedAt), size: int64(len(v)),
			localDone: true, stuck: refused, tenant: env.Tenant, source: env.Source, value: v,
		}
		if refused {
			e.retryAt = d.now().Add(refusedRetry) // the republish was just refused
		}
		if env.DedupeKey != "" {
			e.dedupe = string(store.DedupeKey(env.Tenant, env.Source, env.DedupeKey))
		}
		es = append(es, e)
		size += e.size
	}
	if !d.pending.room(len(es), size, 0) {
		return fmt.Errorf("carry %d hooks the log refused (%d bytes): more than intake.pending holds", len(es), size)
	}
	d.pending.add(es)
	return nil
}

// UnconfirmedHooks returns the seqs of the stored hooks above the stored
// watermark: none of them is known to be in the log. A dual boot that runs
// no republish (intake.recover_on_boot: false) carries them (Carry), so
// the writer's first mark flush cannot move the watermark past a hook the
// log may lack. A store with no watermark row (never booted under dual)
// has none: its first dual boot's republish covers it. More than max is an
// error: the pending set could not hold them.
func UnconfirmedHooks(st *store.Store, max int) ([]uint64, error) {
	wm, ok, err := st.IntakeSeq()
	if err != nil || !ok {
		return nil, err
	}
	var seqs []uint64
	err = st.ScanHooksFrom(wm+1, func(seq uint64, _ []byte) bool {
		seqs = append(seqs, seq)
		return len(seqs) <= max
	})
	if err != nil {
		return nil, fmt.Errorf("hooks above the watermark: %w", err)
	}
	if len(seqs) > max {
		return nil, fmt.Errorf("more than %d hooks above the watermark %d (intake.pending.max_records): run ankusa recover, or boot with intake.recover_on_boot: true", max, wm)
	}
	return seqs, nil
}
