package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/store"
)

// The dlq class: an operator starts replay jobs of kind dlq (POST
// /v1/replays: dispatch.Dispatcher.CreateJob) while the faults run; the
// dispatcher's job ticks move the dead rows back to due, and sink b, which
// refuses some bodies for good, dead-letters them again. A job answered
// with its id is a synced write the operator was told happened:
//
//   - D, an answered dlq job finishes its work: after the drain it is done,
//     and no dead row dead-lettered at or before its until_ms (its
//     creation) is left; a row it replayed that dead-letters again does so
//     later. A host loss forgives the jobs answered before it (the job row
//     is a local write, and the backup restored may predate it).
//
// It draws from a stream of its own (seed, 0xd1a), at each event instant
// after the event, so that no draw of the other classes moved
// (EXCLUDE=dlq is the simulator as it was before it).

// dlqJob is one replay job the operator was answered for: of kind dlq, or
// of kind archive (the archive class below).
type dlqJob struct {
	id      string
	kind    string
	untilMs int64
	excused bool // answered before a host loss
}

// The archive class: in a schedule whose history goes through an archive,
// an operator starts replay jobs of kind archive over the last minute
// (dispatch.stepArchive writes the archived hooks back under their seq and
// id, and they are delivered again), with a chance of weight/16 at each
// event instant, from a stream of its own (seed, 0xa3c; EXCLUDE=archivejob
// leaves it out). D holds for them too: after the drain an answered job is
// done (not failed, not running: nothing in the schedule tampers with the
// archive, and a segment written again or read mid-rewrite must not stop
// it). R checks that a hook written back keeps its seq.

// maybeReplayArchive is the archive class's draw at one event instant.
func (w *world) maybeReplayArchive() {
	if !w.archJobs.fires(16) {
		return
	}
	n := w.current()
	if n == nil || n.q.Stats().Fenced {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	now := time.Now()
	j, err := n.d.CreateJob(ctx, dispatch.JobSpec{Kind: "archive", Rate: 200, Since: now.Add(-time.Minute), Until: now})
	cancel()
	if err != nil || n.dead.Load() {
		w.tracef("archive replay job: not answered (%v)", err)
		return
	}
	w.mu.Lock()
	w.dlqJobs = append(w.dlqJobs, &dlqJob{id: j.ID, kind: "archive", untilMs: j.UntilMs})
	w.injected.archiveJobs++
	w.tracefLocked("archive replay job answered")
	w.mu.Unlock()
}

// maybeReplayDLQ is the class's draw at one event instant.
func (w *world) maybeReplayDLQ() {
	if !w.dlq.fires(16) {
		return
	}
	n := w.current()
	if n == nil || n.q.Stats().Fenced {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	j, err := n.d.CreateJob(ctx, dispatch.JobSpec{Kind: "dlq", Rate: 200})
	cancel()
	if err != nil || n.dead.Load() {
		w.tracef("dlq replay job: not answered (%v)", err)
		return
	}
	w.mu.Lock()
	w.dlqJobs = append(w.dlqJobs, &dlqJob{id: j.ID, kind: "dlq", untilMs: j.UntilMs})
	w.injected.dlqJobs++
	w.tracefLocked("dlq replay job answered")
	w.mu.Unlock()
}

// excuseDLQJobsLocked forgives the jobs answered so far (a host loss).
// REQUIRES: w.mu held.
func (w *world) excuseDLQJobsLocked() {
	for _, j := range w.dlqJobs {
		j.excused = true
	}
}

// unfinishedJobs: D, after the drain. It returns how many answered jobs
// are not done or left dead rows they had to move, and why.
func (w *world) unfinishedJobs(n *node) (count int, why map[string]int) {
	why = map[string]int{}
	w.mu.Lock()
	var jobs []dlqJob
	for _, j := range w.dlqJobs {
		if !j.excused {
			jobs = append(jobs, *j)
		}
	}
	w.mu.Unlock()
	for _, j := range jobs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := n.d.GetJob(ctx, j.id)
		cancel()
		switch {
		case errors.Is(err, dispatch.ErrNoJob):
			count++
			why["job gone"]++
			continue
		case err != nil:
			count++
			why["job unreadable"]++
			continue
		case got.State != dispatch.JobDone:
			count++
			why[j.kind+" job "+got.State+" "+got.Error]++
			continue
		case j.kind == "archive":
			continue
		}
		left := 0
		if err := n.st.ScanDead(nil, 0, j.untilMs, func(store.DeadRow) bool {
			left++
			return true
		}); err != nil {
			count++
			why["dead rows unreadable"]++
			continue
		}
		if left > 0 {
			count++
			why[fmt.Sprintf("done with %d dead rows left", left)]++
		}
	}
	return count, why
}
