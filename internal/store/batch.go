package store

import (
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// Batch is a set of writes bound to the DB generation that was open when
// NewBatch made it. Its error contract:
//
//   - NewBatch never returns nil. A batch made while no DB is open (after
//     Close, or after a failed Reopen) is a dead batch: Set and Delete
//     record nothing and return its error, and Apply/ApplySync return it
//     (ErrClosed or ErrFailed), so a caller racing a reopen gets an error it
//     already handles instead of a nil pointer.
//   - A batch made before a Reopen is refused by Apply after it with
//     ErrFailed: Pebble panics on a batch of another DB, and the rows it
//     was built from may be the very ones the fence just removed.
//
// The batch also notes the earliest due row it sets, so that a successful
// apply can tell the dispatcher's scan about it (DueFloor), and how many due
// rows it adds, so that the store's due count follows (duecount.go, C1).
type Batch struct {
	b      *pebble.Batch // nil for a dead batch
	gen    uint64
	err    error // non-nil for a dead batch
	minDue int64 // earliest due key set (unix ms); math.MaxInt64 = none
	// dueDelta is the due keys set minus the due keys deleted (C1);
	// dueUnsure says some delete may name a row already gone (C2).
	dueDelta  int64
	dueUnsure bool
	// singles counts its single deletes (Store.SingleDeletes).
	singles uint64
}

// Set records key → value. The options argument is ignored (it keeps
// Pebble's call shape); durability is chosen by Apply or ApplySync.
func (b *Batch) Set(key, value []byte, _ *pebble.WriteOptions) error {
	if b.err != nil {
		return b.err
	}
	if err := b.b.Set(key, value, nil); err != nil {
		return err
	}
	if len(key) > 0 && key[0] == PrefixDue {
		b.dueDelta++
		if at, _, _, ok := ParseTimedKey(key); ok && at < b.minDue {
			b.minDue = at
		}
	}
	return nil
}

// Delete records the removal of key.
func (b *Batch) Delete(key []byte, _ *pebble.WriteOptions) error { return b.remove(key, false) }

// singleDelete records the single delete of key, which W1 (delivery.go)
// lets the caller use: it and the key's one SET both vanish at the first
// flush or compaction that holds both, where a Delete leaves a tombstone
// that must be carried down to the last level holding the key.
func (b *Batch) singleDelete(key []byte) error { return b.remove(key, true) }

// remove is Delete (single false) and singleDelete, with the due count's
// bookkeeping they share.
func (b *Batch) remove(key []byte, single bool) error {
	if b.err != nil {
		return b.err
	}
	// Pebble copies the key into the batch. The two calls are direct (not
	// a method value) so that the key does not escape: a caller's key on
	// the stack stays there (DropFreshDue).
	var err error
	if single {
		err = b.b.SingleDelete(key, nil)
	} else {
		err = b.b.Delete(key, nil)
	}
	if err != nil {
		return err
	}
	if single {
		b.singles++
	}
	if len(key) > 0 && key[0] == PrefixDue {
		b.dueDelta--
	}
	return nil
}

// DueUnsure says a due delete of this batch may name a row already gone
// (the caller read it from an earlier DB generation, which a reopen may
// have rolled back): the due count is walked again after it (C2), where
// counting the delete would leave it one too low for good.
func (b *Batch) DueUnsure() { b.dueUnsure = true }

// Close releases the batch; safe on a dead batch and after Apply.
func (b *Batch) Close() error {
	if b.b == nil {
		return nil
	}
	err := b.b.Close()
	b.b = nil
	if b.err == nil {
		b.err = ErrClosed
	}
	return err
}

// NewBatch returns a batch for the current DB generation; never nil (see
// Batch for what a batch made while no DB is open does).
func (s *Store) NewBatch() *Batch { return s.NewBatchSized(0) }

// NewBatchSized is NewBatch with room for about size bytes of keys and
// values reserved up front: a batch otherwise grows by doubling, which
// copies a group of large hooks several times over (issue 14: at 256 KiB
// bodies the doublings allocated 2.7 times the bodies' bytes). A size of 0
// reserves nothing beyond Pebble's default.
func (s *Store) NewBatchSized(size int) *Batch {
	return s.newBatch(func(db *pebble.DB) *pebble.Batch {
		if size > 0 {
			return db.NewBatchWithSize(size)
		}
		return db.NewBatch()
	})
}

// newBatch is a batch mk makes on the open generation, or a dead one.
func (s *Store) newBatch(mk func(*pebble.DB) *pebble.Batch) *Batch {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case s.closed:
		return &Batch{err: ErrClosed}
	case s.db == nil:
		return &Batch{err: fmt.Errorf("%w: no open store generation (the last reopen failed)", ErrFailed)}
	}
	return &Batch{b: mk(s.db), gen: s.gen, minDue: math.MaxInt64}
}

// maxRenewedBatch is the largest buffer RenewBatch keeps for the next
// batch (Pebble's own pool keeps at most 1 MiB): a group of sixteen 256 KiB
// hooks fits, and a larger one is let go to the garbage collector.
const maxRenewedBatch = 16 << 20

// RenewBatch is NewBatchSized for a caller that writes one batch after
// another (the commit path's writer). It returns b emptied, its buffer
// kept, when b is live and of the current generation; otherwise it closes
// b (nil is fine) and returns a new batch, which keeps a buffer of up to
// maxRenewedBatch across renewals. A reused buffer spares an allocation of
// the whole batch per group: at 256 KiB bodies Pebble's pool, which keeps
// no buffer over 1 MiB, allocated one the size of every group.
//
// REQUIRES: b was applied, or is not wanted: a renewed batch has none of
// its writes. A batch whose Apply failed must be closed, not renewed: its
// generation is about to be fenced and reopened.
func (s *Store) RenewBatch(b *Batch, size int) *Batch {
	if b != nil && b.b != nil && b.err == nil {
		s.mu.RLock()
		same := !s.closed && s.db != nil && b.gen == s.gen
		s.mu.RUnlock()
		if same {
			// Safe after an apply: Pebble drops the buffer of a batch it took
			// over as a flushable (a large batch), and Reset keeps a buffer
			// only while the commit pipeline holds no reference to it.
			b.b.Reset()
			// Everything a batch notes of its rows starts over with them
			// (the due count's C1: a delta kept across a renew counted the
			// last group's due rows again at every apply).
			b.minDue, b.dueDelta, b.dueUnsure = math.MaxInt64, 0, false
			return b
		}
	}
	if b != nil {
		_ = b.Close()
	}
	return s.newBatch(func(db *pebble.DB) *pebble.Batch {
		return db.NewBatchWithSize(size, pebble.WithMaxRetainedSizeBytes(maxRenewedBatch))
	})
}

// lowerDueFloor keeps the due floor at or below at. Called after an apply
// made a due row at at visible, never before: a scan that took the floor
// and still missed the row then finds it in the floor next time. A failed
// apply calls it too: its rows may be back after the fence's reopen.
func (s *Store) lowerDueFloor(at int64) {
	for {
		cur := s.dueFloor.Load()
		if at >= cur || s.dueFloor.CompareAndSwap(cur, at) {
			return
		}
	}
}

// TakeDueFloor returns the earliest due time written since the last call
// (ok false if none) and resets it. The dispatcher calls it before every
// due scan and moves its forward-only cursor back to it: whoever writes a
// due row behind the cursor — a completed local half of a dual commit,
// boot replay, a dead-letter or quarantine replay, a source change — makes
// the scan see it without knowing the cursor exists. One reader only.
func (s *Store) TakeDueFloor() (atMs int64, ok bool) {
	at := s.dueFloor.Swap(math.MaxInt64)
	return at, at != math.MaxInt64
}

// Err is the error every use of a dead batch returns (nil for a live one):
// a caller can give up before building rows it could never apply.
func (b *Batch) Err() error { return b.err }

// Generation is the store generation b was made on, the only one it
// applies to (0 for a batch made while none was open).
func (b *Batch) Generation() uint64 { return b.gen }
