package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// dlqJob is one replay job the operator was answered for.
type dlqJob struct {
	id      string
	untilMs int64
	excused bool // answered before a host loss
}

// dlqReplayer is the class's state; only the main goroutine draws from rng.
type dlqReplayer struct {
	weight int // 0–3: the chance of a job at each event instant, weight/16
	rng    *rand.Rand
}

func newDLQReplayer(seed uint64, off bool) dlqReplayer {
	r := rand.New(rand.NewPCG(seed, 0xd1a))
	weight := r.IntN(4)
	if off {
		weight = 0
	}
	return dlqReplayer{weight: weight, rng: r}
}

// maybeReplayDLQ is the class's draw at one event instant.
func (w *world) maybeReplayDLQ() {
	if w.dlq.weight == 0 || w.dlq.rng.IntN(16) >= w.dlq.weight {
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
	w.dlqJobs = append(w.dlqJobs, &dlqJob{id: j.ID, untilMs: j.UntilMs})
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
			why["job "+got.State]++
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
