package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/ankusa/ankusa/internal/store"
)

// maxReopenFailures is how many consecutive failed reopens the fence
// tolerates before it gives up and asks the node to exit (OnFatal): a store
// that cannot be opened at all is a job for the supervisor, and boot runs
// the same open.
const maxReopenFailures = 20

// fence handles a failed write or fsync (DUR-4.b and its fix): it keeps
// ack rule 5 (queue.go).
//
// Why an undo and not a point-in-time reopen: after a failed fsync nothing
// says which WAL pages reached the disk, so a later successful fsync could be
// acked on top of a hole that a replay would then drop. No group may be
// acked above a failure without a reopen between.
//
// Steps, each protecting one invariant:
//  1. Stop acking: Submit refuses (fenced), the syncer answers every group
//     it holds or receives with the error, and enterFence waits out an fsync
//     in progress so that durable_seq is final.
//  2. Close the broken DB and reopen the directory: Pebble must not be used
//     after a fatal error.
//  3. In one synced write, delete every row of the groups above durable_seq
//     (the reopened DB may still show them, from the page cache or because
//     the WAL write did reach the disk) and keep m:next_seq: their seqs stay
//     consumed; put back the pen rows those groups took (ack rule 7), so a
//     held hook whose commit is undone is held again. Groups at or below
//     durable_seq were acked and keep their rows — deleting them was the
//     reference's bug.
//  4. Resume with durable_seq at the last seq: everything up to it is now
//     either durable or deleted by a synced write.
//
// Because durable_seq does not move before the rows are gone, dispatch never
// saw them and no duplicate answer named them: a provider's retry of a hook
// that was told 503 is stored once, by the retry.
func (w *writer) fence(ctx context.Context, cause error) {
	w.fenced.Store(true)
	w.lastFailure.Store(w.opts.Now().UnixNano())
	w.log.Error("store write failed; fencing: nothing is acked until the unsynced groups are removed", "err", cause)
	w.s.enterFence()
	select {
	case <-w.fenceCh: // this fence covers any failure already reported
	default:
	}
	durable := w.s.durable.Load()
	w.refuseQueued(ErrStoreUnavailable)

	reopenFailures := 0
	for attempt := 1; ; attempt++ {
		err := w.st.Reopen()
		if err != nil {
			reopenFailures++
			if reopenFailures >= maxReopenFailures {
				w.opts.OnFatal(fmt.Errorf("reopen store after write failure (%d attempts): %w", reopenFailures, err))
				return
			}
		} else {
			reopenFailures = 0
			err = w.cleanup(durable)
			if err == nil {
				break
			}
		}
		if attempt == 1 || attempt%20 == 0 {
			w.log.Error("store still failing; staying fenced", "attempt", attempt, "err", err)
		}
		t := time.NewTimer(w.opts.FenceRetry)
	wait:
		for {
			select {
			case <-t.C:
				break wait
			case req := <-w.localReq:
				// The reconciler asked before it saw the fence: answer at
				// once, so its pass (and the log halves after it) never waits
				// for as long as the disk fails.
				req.reply <- ErrStoreUnavailable
			case <-ctx.Done():
				t.Stop()
				w.log.Error("shutdown while fenced", "err", errFenceAborted)
				return
			}
		}
		w.refuseQueued(ErrStoreUnavailable)
	}
	if err := w.recount(); err != nil {
		w.log.Warn("recount after fence", "err", err)
	}
	clear(w.unsynced) // the undone groups' rows are not kept alive
	w.unsynced = w.unsynced[:0]
	last := w.nextSeq - 1
	w.s.resume(last)
	w.fences.Add(1) // before fenced clears: Queue.FenceEpoch never repeats a value
	w.fenced.Store(false)
	w.log.Warn("store fence lifted", "durable_seq", last, "undone_after", durable)
}

// cleanup deletes the rows of every group above durable in one synced write.
func (w *writer) cleanup(durable uint64) error {
	b := w.st.NewBatch()
	if b.Err() != nil {
		return store.ErrClosed
	}
	defer b.Close()
	undone := 0
	for _, g := range w.unsynced {
		if g.maxSeq <= durable {
			continue
		}
		undone++
		_ = b.DeleteRows(g.rows) // a dead batch fails the apply
		_ = b.PutRows(g.restore) // ack rule 7: the pen rows the group took
	}
	_ = b.SetNextSeq(w.nextSeq) // ack rule 4: the undone seqs stay consumed
	if err := w.st.ApplySync(b); err != nil {
		return fmt.Errorf("delete %d unsynced groups: %w", undone, err)
	}
	return nil
}
