package quarantine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// Submitter is the commit path a release goes through (the queue).
type Submitter interface {
	Submit(ctx context.Context, rec *queue.Record) (queue.Result, error)
}

// Finality is a Submitter that can tell whether a record it took may
// still be undone (queue.Queue.MayUndo: fenced, or its hook above
// durable_seq) and whether a fence ran meanwhile
// (FenceEpoch: odd while fenced, and it moves with every fence). The
// release gives back a pen row's bytes only once the row is gone and its
// hook can no longer be undone, no fence having run around the reads (R1):
// a read may see a group whose fsync then fails, and the fence puts its
// pen rows back.
type Finality interface {
	MayUndo(id [16]byte) bool
	FenceEpoch() uint64
}

// maxExamine bounds the rows one step passes over, so a job filtered to one
// source cannot spend a step scanning a pen full of other sources' rows.
const maxExamine = 10_000

// Release releases held hooks for replay jobs of kind quarantine; it
// implements dispatch.Releaser.
//
// Each held hook is re-verified with its source's current verifier (the one
// sources returns now, so a rotated secret applies) and with the clock set
// to the hook's receive time: a timestamped scheme judges the timestamp
// against when the hook arrived, not against when the operator released
// it. A hook that passes is committed through the queue under its original
// id and receive time, with the source's current sinks and dedupe key, and
// its pen row is deleted in the very batch that writes the hook's rows (ack
// rule 7, internal/queue). A hook that still fails (or whose source is no
// longer configured, or whose row does not decode) stays in the pen and is
// counted skipped; the cursor moves past it.
//
// A hook is never committed twice: the pen holds it exactly until its rows
// are stored, so a release retried after any answer (a 503, a fence, a
// crash) finds either the pen row or the hook. The hook's id row alone
// would be no proof: once the hook is delivered its reclaim deletes it
// (retention.delivered: 0). Under wal.type: dual a commit answered 503 may
// still be carried to completion (the log confirmed, the local fsync
// failed): until the reconciler completes it, the queue refuses the id
// (queue.ErrIntakePending) and the step stops there; complete-local then
// deletes the pen row with the hook's rows. Should the local half be lost
// instead (a crash before complete-local, or a store restored from a
// backup taken before the release), boot recovery writes the hook from
// the intake log and deletes the pen row in the same batch: the row's key
// is the hook's receive time and id (store.HeldRef), which the released
// record keeps. A hook can be both stored and held only when its row was
// left by a build before ack rule 7: the release finds its id in the
// store and only deletes the row, as it does for a hook the queue answers
// as a duplicate of another holding its dedupe key.
type Release struct {
	pen     *Pen
	sources func(id string) (*edge.Source, bool)
	q       Submitter
	mu      sync.Mutex // one step at a time
}

// NewRelease builds the releaser. sources returns a source's current
// configuration; q is the commit path.
func NewRelease(pen *Pen, sources func(id string) (*edge.Source, bool), q Submitter) *Release {
	return &Release{pen: pen, sources: sources, q: q}
}

type item struct {
	ref store.PenRef
	val []byte // nil: passed over (another source's row)
}

// Release handles up to n held hooks of sourceID ("" for every source) with
// keys after cursor and received_at <= untilMs, in key order. It returns
// how many it committed and skipped, the key of the last row it passed (nil
// if none: keep the old cursor), and done when no such row remains after
// it. A commit error stops the step: next is then the key before the row
// that failed, so that row is tried again by the next step.
func (r *Release) Release(ctx context.Context, sourceID string, cursor []byte, untilMs int64, n int) (moved, skipped int, next []byte, done bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n = max(n, 1)
	var items []item
	matched := 0
	done = true
	serr := r.pen.st.ScanPen(cursor, 0, max(untilMs, -1), func(pr store.PenRow) bool {
		match := true
		if sourceID != "" {
			row, perr := parseRow(pr.Value)
			match = perr == nil && string(row.source) == sourceID
		}
		if match && matched == n {
			done = false // one more to do: the next step's
			return false
		}
		it := item{ref: pr.PenRef}
		if match {
			it.val = append([]byte(nil), pr.Value...)
			matched++
		}
		items = append(items, it)
		if len(items) >= maxExamine {
			done = false
			return false
		}
		return true
	})
	if serr != nil {
		return 0, 0, nil, false, fmt.Errorf("quarantine: release scan: %w", serr)
	}

	if serr := r.pen.cleanRefused(); serr != nil {
		return 0, 0, nil, false, fmt.Errorf("quarantine: release: %w", serr)
	}
	settled, serr := r.pen.settle(r.finality())
	if serr != nil {
		return 0, 0, nil, false, fmt.Errorf("quarantine: release: %w", serr)
	}
	var remove []store.PenRef // committed, their rows still in the pen
	gone := settled           // committed, their rows gone with the commit
	for _, it := range items {
		if it.val != nil {
			how, rerr := r.releaseOne(ctx, it)
			if rerr != nil {
				err, done = rerr, false
				break
			}
			switch how {
			case stays:
				skipped++
			case stored:
				remove = append(remove, it.ref)
			case taken:
				gone++
			case purged:
			}
		}
		next = it.ref.Cursor()
	}
	removed := 0
	if len(remove) > 0 {
		var derr error
		if removed, derr = r.pen.remove(remove); derr != nil {
			// The hooks are committed (or duplicates of committed ones) but
			// still held: the next step finds their ids in the store, or the
			// queue answers them as duplicates again, and only deletes the
			// rows.
			return gone, 0, nil, false, fmt.Errorf("quarantine: release delete: %w", derr)
		}
	}
	// A row already gone is not counted here: its commit's (a late one,
	// unsettled) settle counts it.
	moved = removed + gone
	if moved > 0 || skipped > 0 {
		r.pen.log.Info("quarantine release step", "source", sourceID, "moved", moved, "skipped", skipped, "done", done)
	}
	return moved, skipped, next, done, err
}

// released is what releaseOne did with a held hook.
type released int

const (
	// stays: it is still held (skipped).
	stays released = iota
	// stored: it was committed before, or the queue answered it as a
	// duplicate: its pen row is still there, for the step to delete.
	stored
	// taken: committed now; its pen row went in the commit's batch.
	taken
	// purged: its row was purged after the step's scan: not committed.
	purged
)

// releaseOne re-verifies and commits one held hook. An error means the
// commit path failed and the step stops.
func (r *Release) releaseOne(ctx context.Context, it item) (released, error) {
	log := r.pen.log.With("id", uuid.UUID(it.ref.ID).String())
	row, err := parseRow(it.val)
	if err != nil {
		log.Warn("held hook does not parse; left in the pen", "err", err)
		return stays, nil
	}
	env, err := store.DecodeEnvelope(row.envelope)
	if err != nil {
		log.Warn("held hook does not decode; left in the pen", "err", err)
		return stays, nil
	}
	if store.HeldRef(env) != it.ref {
		// Hold keys every row so: boot recovery finds the row of a hook it
		// replays by the same derivation (ack rule 7). A row keyed
		// otherwise is not one Hold wrote.
		log.Warn("held hook's row is not keyed by its receive time and id; left in the pen")
		return stays, nil
	}
	src, found := r.sources(env.Source)
	if !found || src == nil {
		log.Info("held hook's source is not configured; left in the pen", "source", env.Source)
		return stays, nil
	}
	h := httpHeader(env.Headers)
	receivedAt := time.Unix(0, env.ReceivedAt)
	if src.Verifier != nil {
		if verr := src.Verifier.Verify(h, env.Body, receivedAt); verr != nil {
			log.Debug("held hook still fails verification", "source", env.Source, "err", verr)
			return stays, nil
		}
	}
	committed, err := r.pen.st.HookIDStored(env.ID)
	if err != nil {
		return stays, fmt.Errorf("quarantine: release: %w", err)
	}
	if committed {
		return stored, nil // its row left by a build before ack rule 7
	}
	rec := &queue.Record{
		ID:          env.ID,
		ReceivedAt:  receivedAt,
		Tenant:      env.Tenant,
		Source:      env.Source,
		ContentType: env.ContentType,
		Headers:     env.Headers,
		Body:        env.Body,
		Sinks:       src.Sinks,
		Held:        &store.PenRow{PenRef: it.ref, Value: it.val},
	}
	if k := src.Dedupe.Key(h, env.Body); k != "" {
		rec.DedupeKey, rec.DedupeTTL = k, src.Dedupe.TTL()
	}
	// R1: a pen row's bytes are given back once, by whoever saw it go.
	// Under delMu, so that no purge runs between the row's check and the
	// commit that takes it: a row purged after the scan is not committed
	// (the operator's purge wins), and a purge never deletes a row a
	// commit takes too (both would give its bytes back).
	r.pen.delMu.Lock()
	defer r.pen.delMu.Unlock()
	if r.pen.isRefused(it.ref) {
		return purged, nil // a hold answered 503: the next step deletes it
	}
	if v, err := r.pen.st.ReadPen(it.ref); err != nil {
		return stays, fmt.Errorf("quarantine: release: %w", err)
	} else if v == nil {
		return purged, nil
	}
	res, err := r.q.Submit(ctx, rec)
	cid, carried := queue.Carried(err)
	carried = carried && cid == it.ref.ID // another hook's answer (this one its dedupe duplicate) took no row
	switch {
	case carried && !errors.Is(err, queue.ErrStoreUnavailable):
		// Under dual the local half is in (the row went with it) and the
		// log half failed: the reconciler publishes it. The release has
		// succeeded (ADR: a release's log half that fails is carried).
		r.pen.takenLocked(it.ref, accounted(it.val))
		return taken, nil
	case carried, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// Carried with the local half failed (the fence puts the row back
		// and the reconciler's complete-local takes it), or not answered
		// (the commit may still land, the row with it): the row may go
		// later, and is settled then (Pen.settle).
		r.pen.unsettledLocked(it.ref, accounted(it.val))
		return stays, fmt.Errorf("quarantine: release commit: %w", err)
	case err != nil:
		return stays, fmt.Errorf("quarantine: release commit: %w", err)
	}
	if res.Duplicate {
		return stored, nil // a hook already holds its id or dedupe key: no row was taken
	}
	r.pen.takenLocked(it.ref, accounted(it.val))
	return taken, nil
}

// finality is the Submitter's Finality, nil if it has none (its answers
// are final).
func (r *Release) finality() Finality {
	c, _ := r.q.(Finality)
	return c
}

// httpHeader rebuilds a request's header from the stored (lower-case)
// names, in canonical form as verifiers and extractors expect.
func httpHeader(hs []store.Header) http.Header {
	h := make(http.Header, len(hs))
	for _, x := range hs {
		k := http.CanonicalHeaderKey(x.Name)
		h[k] = append(h[k], x.Value)
	}
	return h
}

// takenLocked gives back the bytes of a row a release's commit took, once
// (R1). REQUIRES: p.delMu held.
func (p *Pen) takenLocked(ref store.PenRef, bytes int64) {
	delete(p.unsettled, ref)
	p.forget(1, bytes)
}

// unsettledLocked notes a released hook whose commit may still take its
// pen row (carried, or not answered in time), so that the row's bytes are
// given back once it is gone (settle). REQUIRES: p.delMu held.
func (p *Pen) unsettledLocked(ref store.PenRef, bytes int64) {
	if p.unsettled == nil {
		p.unsettled = make(map[store.PenRef]int64)
	}
	p.unsettled[ref] = bytes
}

// settle gives back the bytes of the unsettled rows the queue has deleted
// since, and returns how many: they are committed. A row counts as gone
// only once c (if any) says its hook can no longer be undone, no fence
// having run around the reads: until then a fence may still put it back
// (a failed fsync under either mode, a carried record's failed local
// half).
func (p *Pen) settle(c Finality) (int, error) {
	p.delMu.Lock()
	defer p.delMu.Unlock()
	if len(p.unsettled) == 0 {
		return 0, nil
	}
	var epoch uint64
	if c != nil {
		if epoch = c.FenceEpoch(); epoch%2 == 1 {
			return 0, nil // fenced: the next step settles
		}
	}
	var gone []store.PenRef
	for ref := range p.unsettled {
		v, err := p.st.ReadPen(ref)
		if err != nil {
			return 0, err
		}
		// Asked after the read: a row read gone belongs to a hook whose
		// rows are visible, so its seq says whether a fence may undo it.
		if v == nil && (c == nil || !c.MayUndo(ref.ID)) {
			gone = append(gone, ref)
		}
	}
	if c != nil && c.FenceEpoch() != epoch {
		return 0, nil // a fence ran around the reads: they may have seen undone rows
	}
	for _, ref := range gone {
		p.takenLocked(ref, p.unsettled[ref])
	}
	return len(gone), nil
}

// remove deletes the given rows that still exist, in one synced batch, and
// takes them off the counters.
func (p *Pen) remove(refs []store.PenRef) (int, error) {
	p.delMu.Lock()
	defer p.delMu.Unlock()
	b := p.st.NewBatch()
	if b.Err() != nil {
		return 0, store.ErrClosed
	}
	defer b.Close()
	n := 0
	var freed int64
	for _, ref := range refs {
		v, err := p.st.ReadPen(ref)
		if err != nil {
			return 0, err
		}
		if v == nil {
			continue // purged meanwhile
		}
		_ = b.DeletePen(ref)
		delete(p.unsettled, ref) // given back here (R1)
		n++
		freed += accounted(v)
	}
	if n == 0 {
		return 0, nil
	}
	if err := p.apply(b); err != nil {
		return 0, err
	}
	p.forget(n, freed)
	return n, nil
}
