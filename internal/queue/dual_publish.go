// dual_publish.go owns the log half of the dual commit: the publisher that
// merges the groups' records into few publishes, and publish, which turns
// an adapter's confirm into one position per record.

package queue

import (
	"context"
	"sync"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
)

// maxPublishRecords bounds one merged publish.
const maxPublishRecords = 2048

// maxPublishesInFlight lets the next merged publish start while earlier
// ones await their confirms (ADR section 2: several groups may await
// confirmation at once), so a caller does not wait a whole confirm for the
// publish ahead of it. Readers dedupe by (node, seq), so the log's order
// across concurrent publishes does not matter.
const maxPublishesInFlight = 4

type pubJob struct {
	g    *dualGroup
	recs []intake.Record
}

// publisher is the log half's group commit, the syncer's twin: one publish
// carries the records of every group applied while the previous publish
// was in flight. Without it every group paid a confirm of its own, and a
// closed loop of C clients saw groups of one or two records, capped by one
// log round trip per hook.
type publisher struct {
	d        *dualState
	slots    chan struct{}
	inflight sync.WaitGroup
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []pubJob // REQUIRES: mu held
	stopping bool     // REQUIRES: mu held
}

func newPublisher(d *dualState) *publisher {
	p := &publisher{d: d, slots: make(chan struct{}, maxPublishesInFlight)}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *publisher) submit(j pubJob) {
	p.mu.Lock()
	p.queue = append(p.queue, j)
	p.mu.Unlock()
	p.cond.Signal()
}

// stop publishes what is queued, then ends run.
func (p *publisher) stop() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *publisher) run() {
	defer p.inflight.Wait()
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.stopping {
			p.cond.Wait()
		}
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		// A free slot first: while all are busy, groups keep merging.
		p.slots <- struct{}{}
		p.mu.Lock()
		// Whole groups only: a group's callers are answered from one outcome.
		n, recs := 0, 0
		for n < len(p.queue) && (n == 0 || recs+len(p.queue[n].recs) <= maxPublishRecords) {
			recs += len(p.queue[n].recs)
			n++
		}
		jobs := append([]pubJob(nil), p.queue[:n]...)
		rest := copy(p.queue, p.queue[n:])
		clear(p.queue[rest:])
		p.queue = p.queue[:rest]
		p.mu.Unlock()

		p.inflight.Add(1)
		go func() {
			defer func() { <-p.slots; p.inflight.Done() }()
			p.publish(jobs, recs)
		}()
	}
}

func (p *publisher) publish(jobs []pubJob, recs int) {
	all := make([]intake.Record, 0, recs)
	for _, j := range jobs {
		all = append(all, j.recs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.d.opts.PublishTimeout)
	start := time.Now()
	pos, err := publish(ctx, p.d.in, all)
	cancel()
	p.d.observePublish(time.Since(start), err)
	off := 0
	for _, j := range jobs {
		var jp []intake.Position
		if err == nil {
			jp = pos[off : off+len(j.recs)]
		}
		off += len(j.recs)
		j.g.log(jp, err)
	}
}

func (d *dualState) observePublish(dur time.Duration, err error) {
	class := "ok"
	if err != nil {
		c, _ := intake.ClassOf(err)
		class = c.String()
	}
	d.obs.IntakePublish(dur, class)
}

// publish returns every record's position. The offset must never pass a
// record that is only in the log, so a position may be a lower bound but
// never above the record's real one.
func publish(ctx context.Context, in intake.Intake, recs []intake.Record) ([]intake.Position, error) {
	if p, ok := in.(intake.Positioner); ok {
		return p.PublishBatchPositions(ctx, recs)
	}
	// An adapter without per-record positions confirms a batch at
	// contiguous positions ending at the last one (the memory log: one file
	// per node).
	last, err := in.PublishBatch(ctx, recs)
	if err != nil {
		return nil, err
	}
	out := make([]intake.Position, len(recs))
	for i := range out {
		out[i] = last - intake.Position(len(recs)-1-i)
	}
	return out, nil
}
