// dual_marks.go owns the intake marks (ADR section 7): seeding the offset
// from the store at boot, the confirmed head, and the periodic flush of
// m:intake_seq (the watermark) and m:intake_offset.

package queue

import (
	"context"

	"github.com/ankusa/ankusa/internal/intake"
)

// seedMarks starts the offset at the stored m:intake_offset (boot, and
// again after a boot replay moved it), so the node reports where its store
// stands instead of -1 until the next publish. Every position up to the
// stored offset is in the store (the row's invariant), so it is a valid
// floor for the offset.
func (w *writer) seedMarks() error {
	if w.dual == nil {
		return nil
	}
	n, ok, err := w.st.IntakeOffset()
	if err != nil {
		return err
	}
	if ok {
		p := w.dual.pending
		p.mu.Lock()
		p.completePos = max(p.completePos, intake.Position(n))
		p.mu.Unlock()
	}
	w.dual.caughtUpAt.Store(w.dual.now().UnixNano())
	return nil
}

// flushMarks writes the watermark and offset (not synced: a lagging mark
// costs redundant republishes, never a hook).
func (w *writer) flushMarks() {
	if w.dual == nil || w.fenced.Load() {
		return
	}
	lagging := w.dual.pending.logOnly()
	wm, off := w.dual.pending.marks(w.nextSeq)
	b := w.st.NewBatch()
	if b.Err() != nil {
		return // the store is closed
	}
	defer b.Close()
	_ = b.SetIntakeSeq(wm)
	if off >= 0 {
		_ = b.SetIntakeOffset(int64(off))
	}
	if err := w.st.Apply(b); err != nil {
		w.fence(context.Background(), err)
		return
	}
	if !lagging {
		w.dual.caughtUpAt.Store(w.dual.now().UnixNano())
	}
}
