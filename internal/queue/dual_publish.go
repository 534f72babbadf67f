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
//
// Why 16 and not 4 (issue 14): a group waits for a free publisher before
// its publish starts. With four and a 5 ms confirm, a closed loop of 64
// clients kept all four busy, and a group waited 0.57–0.66 ms at p50
// (1.1–1.2 ms mean) for one; with sixteen, 0.15–0.27 ms (0.7–1.1 ms mean,
// the rest is a loaded host waking the worker late). 32 and 64 cut the
// wait further but not the ack p50, and cost req/s at 512 clients, where
// the publishers are all busy again and merge (22–29 records a publish).
const maxPublishesInFlight = 16

// publisher is the log half's group commit, the syncer's twin: one publish
// carries the records of every group applied while the publishers were
// busy. Without it every group paid a confirm of its own, and a closed loop
// of C clients saw groups of one or two records, capped by one log round
// trip per hook.
//
// maxPublishesInFlight workers each take everything queued (whole groups,
// up to maxPublishRecords), publish it, and come back for more: while all
// of them await confirms, groups queue and merge into the next publish.
// Each worker reuses its own buffers, so a publish costs no allocation of
// the publisher's.
type publisher struct {
	d        *dualState
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*dualGroup // REQUIRES: mu held
	stopping bool         // REQUIRES: mu held
}

func newPublisher(d *dualState) *publisher {
	p := &publisher{d: d}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// submit queues a group whose entries are registered in the pending set.
func (p *publisher) submit(g *dualGroup) {
	p.mu.Lock()
	p.queue = append(p.queue, g)
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

// run is the workers; it returns once stop was called, the queue is empty
// and every publish has answered its groups.
func (p *publisher) run() {
	var wg sync.WaitGroup
	for range maxPublishesInFlight - 1 {
		wg.Add(1)
		go func() { defer wg.Done(); p.work() }()
	}
	p.work()
	wg.Wait()
}

func (p *publisher) work() {
	var jobs []*dualGroup
	var all []intake.Record
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.stopping {
			p.cond.Wait()
		}
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		// Whole groups only: a group's callers are answered from one outcome.
		n, recs := 0, 0
		for n < len(p.queue) && (n == 0 || recs+p.queue[n].recs <= maxPublishRecords) {
			recs += p.queue[n].recs
			n++
		}
		jobs = append(jobs[:0], p.queue[:n]...)
		rest := copy(p.queue, p.queue[n:])
		clear(p.queue[rest:])
		p.queue = p.queue[:rest]
		p.mu.Unlock()

		all = p.publish(jobs, all[:0])
		// Let the groups and their envelopes go before the next publish.
		clear(jobs)
		clear(all)
	}
}

// publish publishes jobs' records as one batch (all is its buffer, handed
// back for the next) and gives each group its part of the outcome.
func (p *publisher) publish(jobs []*dualGroup, all []intake.Record) []intake.Record {
	for _, g := range jobs {
		for _, e := range g.entries {
			if e != nil {
				all = append(all, e.record(p.d))
			}
		}
	}
	// One publish, split only if the log refuses one of its records
	// (publishRefusing): the merged groups' other records are confirmed
	// and their callers acked, and only the refused records' callers are
	// answered 503, carried and stuck.
	pos, refusedAt, recErr, err := p.d.publishRefusing(context.Background(), all)
	var refused map[uint64]bool
	if err == nil && len(refusedAt) > 0 {
		refused = make(map[uint64]bool, len(refusedAt))
		for _, i := range refusedAt {
			refused[all[i].Seq] = true
		}
	}
	off := 0
	for _, g := range jobs {
		var gp []intake.Position
		if err == nil {
			gp = pos[off : off+g.recs]
		}
		off += g.recs
		g.log(gp, err, refused, recErr)
	}
	return all
}

// publishRefusing publishes recs once (publishOnce) and, only if the log
// refused one of its records, goes on splitting the batch (splitRefused):
// refused are the indexes of the records refused on their own, recErr the
// refusal. With err nil every other record is confirmed at pos. The first
// publish is the whole fast path: no buffer and no split state unless a
// refusal needs them.
func (d *dualState) publishRefusing(ctx context.Context, recs []intake.Record) (pos []intake.Position, refused []int, recErr, err error) {
	pos, err = d.publishOnce(ctx, recs)
	if !recordRefused(err) {
		return pos, nil, nil, err
	}
	recErr = err
	pos = make([]intake.Position, len(recs))
	refused, err = splitRefused(ctx, recs, err, func(ctx context.Context, lo int, sub []intake.Record) error {
		got, err := d.publishOnce(ctx, sub)
		if err != nil {
			recErr = err
			return err
		}
		copy(pos[lo:], got)
		return nil
	})
	return pos, refused, recErr, err
}

// publishOnce is one attempt at recs, bounded by intake.publish_timeout_ms
// and observed (the publish histogram, by outcome).
func (d *dualState) publishOnce(ctx context.Context, recs []intake.Record) ([]intake.Position, error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.PublishTimeout)
	defer cancel()
	start := time.Now()
	pos, err := publish(ctx, d.in, recs)
	d.observePublish(time.Since(start), err)
	return pos, err
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
