package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
)

type candidate struct {
	at  int64
	seq uint64
	num uint16
}

// pass is one due scan's working state, from collect to settle.
type pass struct {
	now   time.Time
	nowMs int64
	free  int       // claims this pass may make
	next  time.Time // when the first not-yet-due row falls due (zero: none)
	// byNum holds the candidates seen, per sink, in due order; order lists
	// the sinks in the order first seen.
	byNum map[uint16][]candidate
	order []uint16
	// noIO memoises doesNoIO per sink (noIOOf): the bound (roundRobin,
	// collect) and the routing (scanAndClaim) decide a pass's claims from
	// one reading of the targets.
	noIO map[uint16]bool
	// bufs keeps each sink's candidate array from pass to pass (collect's
	// slices in byNum start at them); picked and probing are roundRobin's. The
	// pass lives in the loop's scratch (newPass): a pass's maps and
	// slices were made afresh, about 90 bytes and four allocations per
	// delivered hook at C=64 (issue 14). Candidates hold no pointers,
	// so a kept array keeps nothing alive.
	bufs    map[uint16][]candidate
	picked  []candidate
	probing map[uint16]bool
	seen    int
	// low is the earliest row this pass leaves due (-1: none), lastAt the
	// time of the last row it stepped over (stepped: it stepped over one):
	// together they become the cursor (settle).
	low, lastAt int64
	stepped     bool
}

// scanAndClaim claims due rows up to the inflight bounds, round-robin
// across sinks so one slow or busy sink cannot starve the others, and
// starts their attempts. It returns when the next not-yet-due row falls due
// (zero if none).
func (d *Dispatcher) scanAndClaim(ctx context.Context) time.Time {
	// Before the scan, never after: a due row applied during this scan lowers
	// the floor after it became visible, so the next take finds it.
	if at, ok := d.st.TakeDueFloor(); ok {
		d.noteDue(at)
	}
	d.hot.take()
	now := d.o.Now()
	p := d.scratch.newPass(now, min(d.o.MaxInflight-d.inflight, d.o.ScanBatch), d.low)
	if err := d.collect(p); err != nil {
		d.log.Warn("due scan failed", "err", err)
		return now.Add(d.o.Poll)
	}
	// Candidates not claimed below stay due: the cursor must not pass them.
	defer d.settle(p)
	if p.seen == 0 && !d.probeDue(p.now) {
		return p.next
	}
	picked := d.roundRobin(p)
	if probes := d.probeParked(p, len(picked)); len(probes) > 0 {
		picked = append(probes, picked...)
	}
	claims := d.claim(p, picked)
	if len(claims) == 0 {
		return p.next
	}
	// The attempts of sinks that do no I/O (sink.NoIO) go to their own
	// worker, this pass's all in one hand-over: a claim handed to a pool
	// worker cost a channel send, a worker's wake-up and its park, about
	// 3.5 µs of a delivered hook's 44 at C=512 (issue 14). And a NoIO
	// sink that blocks anyway (the log sink's stderr a full pipe) now
	// holds up the other NoIO attempts only: in the pool, each of its
	// claims took a worker until none was left for any sink.
	var noIO []claimed
	for _, c := range claims {
		if p.noIOOf(d, c.num) {
			if noIO == nil {
				noIO = d.noIOBatch(len(claims))
			}
			c.noIO = true
			d.noIOInflight++
			noIO = append(noIO, c)
			continue
		}
		d.work <- c // never blocks: it holds up to MaxInflight, as many as may be claimed
	}
	if len(noIO) > 0 {
		d.noIOWork <- noIO // never blocks: every batch holds a claim, and at most MaxInflight are
	}
	clear(claims) // the workers have their copies; the array keeps no envelope

	// More may be due right now: come back at once.
	return now
}

// collect walks the due rows from the cursor and gathers up to
// 4×ScanBatch candidates, per sink.
func (d *Dispatcher) collect(p *pass) error {
	durable := d.o.Durable()
	limit := 4 * d.o.ScanBatch
	noIOFull := d.noIOInflight >= d.noIOMax()
	// Start at the cursor: below it are only the tombstones of rows already
	// claimed, which an LSM would otherwise step over on every scan.
	return d.st.ScanDue(d.low, func(at int64, seq uint64, num uint16) bool {
		if at > p.nowMs {
			p.next = time.UnixMilli(at)
			return false
		}
		p.lastAt, p.stepped = at, true
		if cat, ok := d.claims.at(seq, num); ok {
			// Claimed (K1): seen, and its outcome deletes the key or its
			// release moves the cursor back to it (K2). A second key of the
			// row (a stray one a reopen brought back) is neither: the
			// outcome deletes only the claimed key, so the cursor stays at
			// or below it and a scan after the outcome drops it (strayDue).
			if cat != at {
				p.leave(at)
			}
			return true
		}
		if p.free <= 0 || p.seen >= limit {
			// Enough candidates; rows still due are found by the next scan,
			// which runs as soon as a slot frees up.
			p.leave(at)
			return false
		}
		// Ack rule 6: a row above durable_seq belongs to a group whose fsync has
		// not returned (and may yet be undone). It waits.
		if seq > durable {
			p.leave(at)
			return true
		}
		if b := d.breakers[num]; b != nil && !b.admits(p.now) {
			// Parked: no attempt spent while the sink is down, and the
			// cursor passes the row (D2), so the next scans do not walk
			// the sink's backlog again.
			d.park(num, at)
			return true
		}
		if noIOFull && p.noIOOf(d, num) {
			// Parked too (D2), while the NoIO sinks hold noIOMax claims:
			// left due under the cursor instead, a blocked NoIO sink's
			// backlog would fill every scan's window (limit) and no row
			// behind it, of any sink, would be claimed again. Unparked
			// when one of their claims is recorded (record).
			d.park(num, at)
			return true
		}
		p.seen++ // every row walked counts toward the limit, kept or not
		q, ok := p.byNum[num]
		if !ok {
			p.order = append(p.order, num)
			q = p.bufs[num][:0]
		}
		if len(q) >= p.free {
			// roundRobin takes at most p.free of one sink, so the row is
			// not kept; it stays due and the cursor at or below it. (Kept,
			// the candidates of a backlog cost 1.3 KB per delivered hook
			// at C=256, issue 14: every pass gathered 4×ScanBatch of them
			// to claim the few slots an outcome batch had freed.)
			p.leave(at)
			return true
		}
		q = append(q, candidate{at, seq, num})
		p.byNum[num], p.bufs[num] = q, q // q starts at bufs[num]'s array: collect only appends
		return true
	})
}

// roundRobin picks up to p.free candidates, one per sink in turn; a
// half-open sink gets exactly one (its probe); the sinks that do no I/O
// together get at most noIOMax in flight.
func (d *Dispatcher) roundRobin(p *pass) []candidate {
	picked, probing := p.picked[:0], p.probing
	noIOFree := d.noIOMax() - d.noIOInflight
	for len(picked) < p.free {
		progress := false
		for _, num := range p.order {
			q := p.byNum[num]
			if len(q) == 0 || len(picked) >= p.free {
				continue
			}
			noIO := p.noIOOf(d, num)
			if noIO && noIOFree <= 0 {
				// Left due: the cursor must stay at or below them.
				for _, c := range q {
					p.leave(c.at)
				}
				p.byNum[num] = nil
				continue
			}
			if b := d.breakers[num]; b != nil && b.halfOpen(p.now) {
				// Half-open: exactly one real attempt probes the sink.
				if probing[num] || b.probing {
					// Left due: the cursor must stay at or below them.
					for _, c := range q {
						p.leave(c.at)
					}
					p.byNum[num] = nil
					continue
				}
				probing[num] = true
			}
			if noIO {
				noIOFree--
			}
			picked = append(picked, q[0])
			p.byNum[num] = q[1:]
			progress = true
		}
		if !progress {
			break
		}
	}
	p.picked = picked // its array, for the next pass
	return picked
}

// newPass resets the scratch's pass for a scan at now that may claim
// free rows, from the cursor low; its maps and arrays are kept.
func (sc *loopScratch) newPass(now time.Time, free int, low int64) *pass {
	p := &sc.pass
	if p.byNum == nil {
		p.byNum, p.noIO, p.bufs, p.probing = map[uint16][]candidate{}, map[uint16]bool{}, map[uint16][]candidate{}, map[uint16]bool{}
	}
	clear(p.byNum)
	clear(p.noIO)
	clear(p.probing)
	*p = pass{
		now: now, nowMs: now.UnixMilli(), free: free,
		byNum: p.byNum, order: p.order[:0], noIO: p.noIO,
		bufs: p.bufs, picked: p.picked[:0], probing: p.probing,
		low: -1, lastAt: low,
	}
	return p
}

// probeDue reports whether a parked sink's breaker is half-open with no
// probe in flight.
func (d *Dispatcher) probeDue(now time.Time) bool {
	for num := range d.parked {
		if b := d.breakers[num]; b != nil && b.halfOpen(now) && !b.probing {
			return true
		}
	}
	return false
}

// probeParked finds the probe of every parked sink whose breaker is
// half-open and that this pass has no candidate of (its rows lie below
// the cursor, D2): the first of its rows from its parked time, found by a
// walk bounded by 4×ScanBatch rows, within the claims left free. A sink
// whose walk finds none of its rows before the cursor has no parked row
// left (dead-lettered, or resent). One whose walk ends at the bound gives
// its rows back to the scan (the cursor goes back to them): correct, at
// the cost of one walk.
func (d *Dispatcher) probeParked(p *pass, picked int) []candidate {
	var probes []candidate
	durable := d.o.Durable()
	for num, from := range d.parked {
		b := d.breakers[num]
		if b == nil || !b.halfOpen(p.now) || b.probing || len(p.byNum[num]) > 0 {
			continue
		}
		if picked+len(probes) >= p.free {
			return probes
		}
		walked, found, ended := 0, false, true
		err := d.st.ScanDue(from, func(at int64, seq uint64, n uint16) bool {
			if at >= d.low {
				return false // the scan sees the rest
			}
			if walked++; walked > 4*d.o.ScanBatch {
				ended = false
				return false
			}
			if _, claimed := d.claims.at(seq, n); n == num && seq <= durable && !claimed {
				probes = append(probes, candidate{at, seq, num})
				found = true
				return false
			}
			return true
		})
		switch {
		case err != nil || (!found && !ended):
			p.leave(from) // settle moves the cursor back to them
			delete(d.parked, num)
		case !found:
			delete(d.parked, num)
		}
	}
	return probes
}

// claim claims the picked rows, within the inflight byte bound, and counts
// them in flight. A claim writes nothing (claims.go): the rows stay due in
// the store and the claim set keeps the scan, and everyone else, off them
// (K1). The one write is the drop of a due key whose delivery row is gone
// or no longer due; it failing costs nothing (the next scan drops it
// again).
func (d *Dispatcher) claim(p *pass, picked []candidate) []claimed {
	var drop *store.Batch
	// The scratch's array: scanAndClaim hands the claims to the workers
	// (by value) and clears it before the next pass.
	claims := d.scratch.claims[:0]
	defer func() { d.scratch.claims = claims }()
	gen := d.st.Generation()
	for i, c := range picked {
		if _, ok := d.claims.at(c.seq, c.num); ok {
			continue // K1 (the probe walk and the scan never yield one; a lost write could)
		}
		dl, ok, value, err := d.readClaim(c)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			d.log.Warn("read delivery row", "seq", c.seq, "err", err)
			p.leave(c.at)
			continue
		}
		if err != nil {
			d.log.Error("corrupt delivery row", "seq", c.seq, "sink", c.num, "err", err)
			continue
		}
		if !ok || dl.State == store.StateDelivered || dl.State == store.StateDead || d.strayDue(c, &dl) {
			// A due key without its row, left by an interrupted reclaim of
			// an older build; or a key the row no longer names: a reopen
			// dropped a retry's batch, bringing its old due key back, while
			// the claim of its new key ran, and that claim's outcome
			// finished the row or moved it on. Drop it.
			if drop == nil {
				drop = d.st.NewBatch()
				defer drop.Close()
			}
			drop.DropDue(c.at, c.seq, c.num)
			continue
		}
		if dl.NextAtMs != c.at && claimedIn(claims, c) {
			// A second key of a row whose own key is gone (strayDue), both
			// picked by this pass: K1. Left due, for a later scan to find
			// once this claim's outcome moved the row on.
			p.leave(c.at)
			continue
		}
		size := int64(dl.Size)
		if d.inflight > 0 && d.inflightBytes+size > d.o.MaxInflightBytes {
			for _, rest := range picked[i:] {
				p.leave(rest.at)
			}
			break
		}
		claims = append(claims, claimed{seq: c.seq, num: c.num, at: c.at, gen: gen, delivery: dl, size: size, value: value})
		d.inflight++
		d.inflightBytes += size
		if br := d.breakers[c.num]; br != nil && br.halfOpen(p.now) {
			br.probing = true
		}
	}
	if drop != nil {
		if err := d.apply(drop, false); err != nil {
			d.log.Warn("drop stray due rows", "err", err)
		}
	}
	d.claims.add(claims)
	return claims
}

// strayDue reports whether c's due key is not the one its due row dl
// names (a due row's NextAtMs is its key's time, store/delivery.go) while
// that one exists: then c's is a leftover (claim). A due row whose own key
// is missing is claimed at c's all the same — at least once, never a guess.
func (d *Dispatcher) strayDue(c candidate, dl *store.Delivery) bool {
	if dl.State != store.StateDue || dl.NextAtMs == c.at {
		return false
	}
	has, err := d.st.HasDue(dl.NextAtMs, c.seq, c.num)
	return err == nil && has
}

// claimedIn reports whether cs claims c's delivery (a walk: only for the
// rare row whose key is not the one it names).
func claimedIn(cs []claimed, c candidate) bool {
	for i := range cs {
		if cs[i].seq == c.seq && cs[i].num == c.num {
			return true
		}
	}
	return false
}

// readClaim returns the delivery row a claim of c moves, from the hot
// cache while it is fresh there (H1), else from the store; and the hook's
// envelope if the cache holds it.
func (d *Dispatcher) readClaim(c candidate) (dl store.Delivery, ok bool, value []byte, err error) {
	e := d.hot.lookup(c.seq)
	if e == nil {
		d.hot.claimRead(c.seq)
	} else {
		value = e.c.Value
		if dl, ok := e.fresh(c.num); ok {
			return dl, true, value, nil
		}
	}
	p, err := d.st.ReadDelivery(c.seq, c.num)
	if err != nil || p == nil {
		return store.Delivery{}, false, value, err
	}
	return *p, true, value, nil
}

// leave notes a row this pass leaves due at at: the cursor stays at or
// below it.
func (p *pass) leave(at int64) {
	if p.low < 0 || at < p.low {
		p.low = at
	}
}

// settle moves the cursor (D1): to the earliest row this pass left due —
// candidates seen but not claimed included — or, if it left none, past the
// last millisecond it stepped over: it saw every row of that millisecond,
// and a row written there since lowers the due floor, which the next pass
// takes. (Stopping at that millisecond instead made every pass walk all
// its parked rows again: a dead sink's backlog written within one
// millisecond, or a burst.)
func (d *Dispatcher) settle(p *pass) {
	for _, q := range p.byNum {
		for _, c := range q {
			p.leave(c.at)
		}
	}
	switch {
	case p.low >= 0:
	case p.stepped:
		p.low = p.lastAt + 1
	default:
		p.low = p.lastAt
	}
	d.low = p.low
}

// worker is one of the Concurrency delivery workers: it runs the claimed
// attempts until ctx ends. (A goroutine per claim cost a closure and a
// goroutine start per delivery.)
func (d *Dispatcher) worker(ctx context.Context) {
	defer d.workers.Done()
	// The worker's one message, filled anew for every attempt: a sink
	// keeps nothing of it after Deliver returns (sink.Sink).
	m := new(sink.Message)
	for {
		select {
		case c := <-d.work:
			if err := ctx.Err(); err != nil {
				// Stopping: select picks at random, so a claim can still
				// be taken after the cancel; it is answered as unstarted.
				d.results <- result{c: c, err: err}
				continue
			}
			d.attempt(ctx, c, m)
		case <-ctx.Done():
			return
		}
	}
}

// noIOWorker runs the attempts of sinks that do no I/O (sink.NoIO), a
// pass's batch at a time, one after another, until ctx ends. A target
// replaced after its claim by a sink that does I/O is still attempted
// here, with that sink's deadline (deliverOne): bounded, if not parallel.
func (d *Dispatcher) noIOWorker(ctx context.Context) {
	defer d.workers.Done()
	m := new(sink.Message)
	for {
		select {
		case cs := <-d.noIOWork:
			for i := range cs {
				// Cleared as it is taken: the batch must keep no envelope
				// of an attempt already recorded alive while a later one
				// runs (MaxInflightBytes), nor any once kept for the next.
				c := cs[i]
				cs[i] = claimed{}
				if err := ctx.Err(); err != nil {
					d.results <- result{c: c, err: err} // stopping: answered as unstarted
					continue
				}
				d.attempt(ctx, c, m)
			}
			select {
			case d.noIOSpare <- cs[:0]:
			default:
			}
		case <-ctx.Done():
			return
		}
	}
}

// noIOBatch returns an empty batch for noIOWork: one noIOWorker is done
// with, or a new one with room for n.
func (d *Dispatcher) noIOBatch(n int) []claimed {
	select {
	case cs := <-d.noIOSpare:
		return cs
	default:
		return make([]claimed, 0, n)
	}
}

// noIOMax bounds the claims in flight of the sinks that do no I/O, all of
// them together, below MaxInflight: they have no deadline and no breaker
// (nothing ends a blocked one), so without it a NoIO sink blocked in
// Deliver would gather claims until MaxInflight was reached, and from
// then on no sink would be claimed anything. At the bound their rows are
// parked (collect), as an open breaker's are.
func (d *Dispatcher) noIOMax() int {
	return max(1, min(d.o.ScanBatch, d.o.MaxInflight/2))
}

// noIOOf is d.doesNoIO(num), read once per sink in a pass.
func (p *pass) noIOOf(d *Dispatcher, num uint16) bool {
	v, ok := p.noIO[num]
	if !ok {
		v = d.doesNoIO(num)
		p.noIO[num] = v
	}
	return v
}

// doesNoIO reports whether sink num's attempts go to noIOWorker.
func (d *Dispatcher) doesNoIO(num uint16) bool {
	t, ok := d.target(num)
	if !ok {
		return false
	}
	_, noIO := t.Sink.(sink.NoIO)
	return noIO
}

// attempt runs one delivery and reports its result.
func (d *Dispatcher) attempt(ctx context.Context, c claimed, m *sink.Message) {
	start := d.o.Now()
	hook, err := d.deliverOne(ctx, c, m)
	d.results <- result{c: c, hook: hook, err: err, dur: d.o.Now().Sub(start)}
}

// cancelUnstarted answers the claims no worker took before the loop
// stopped: cancelled, so their rows stay due for the next start.
func (d *Dispatcher) cancelUnstarted(err error) {
	for {
		select {
		case c := <-d.work:
			d.results <- result{c: c, err: err}
		case cs := <-d.noIOWork:
			for _, c := range cs {
				d.results <- result{c: c, err: err}
			}
		default:
			return
		}
	}
}

var errNoTarget = errors.New("sink is no longer configured")

func (d *Dispatcher) deliverOne(ctx context.Context, c claimed, m *sink.Message) (store.HookRef, error) {
	t, ok := d.target(c.num)
	if !ok {
		return store.HookRef{}, sink.Permanent(fmt.Errorf("%w (sink number %d, id %q)", errNoTarget, c.num, c.delivery.SinkID))
	}
	var env store.Envelope
	size, err := d.readEnvelope(c, t.Sink, &env)
	if err != nil {
		return store.HookRef{}, err
	}
	ref := store.HookRef{Seq: c.seq, ID: env.ID, Tenant: env.Tenant, Source: env.Source}
	*m = sink.Message{
		ID: uuid.UUID(env.ID), Seq: env.Seq, Tenant: env.Tenant, Source: env.Source,
		ReceivedAt: time.Unix(0, env.ReceivedAt), ContentType: env.ContentType,
		Headers: env.Headers, Body: env.Body, Size: size, SHA256: env.SHA256,
		DedupeKey: env.DedupeKey, ReplayID: c.delivery.ReplayID, Flagged: env.Flagged,
		Attempt: int(c.delivery.Attempts) + 1,
	}
	// A sink that does no I/O gets no deadline: nothing in its Deliver
	// would wait for one (sink.NoIO); ctx still ends with the dispatcher.
	if _, ok := t.Sink.(sink.NoIO); ok {
		return ref, t.Sink.Deliver(ctx, m)
	}
	// One deadline per attempt: the attempt's, or the sink's own timeout
	// when that ends first (a nested context per attempt cost about 600
	// bytes and five allocations, issue 14).
	timeout, own := d.o.AttemptTimeout, false
	if b, ok := t.Sink.(sink.Bounded); ok {
		if st := b.AttemptBound(); st > 0 && st < timeout {
			timeout, own = st, true
		}
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = t.Sink.Deliver(actx, m)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		if own {
			err = fmt.Errorf("no answer within the sink's timeout of %s: %w", timeout, err)
		} else {
			err = fmt.Errorf("attempt timed out after %s: %w", timeout, err)
		}
	}
	return ref, err
}

// readEnvelope decodes c's hook into env for an attempt on s and returns
// the body's length: from the commit path's encoding when it handed one
// over (hot.go), else from the store; and, for a sink that reads no body
// (sink.BodyFree), from the store without the body (env.Body nil).
func (d *Dispatcher) readEnvelope(c claimed, s sink.Sink, env *store.Envelope) (int, error) {
	v := c.value
	if v == nil {
		if _, ok := s.(sink.BodyFree); ok {
			size, found, err := d.st.ReadHookMeta(c.seq, env)
			switch {
			case errors.Is(err, store.ErrCorrupt):
				return 0, sink.Permanent(fmt.Errorf("hook %d: %w", c.seq, err))
			case err != nil:
				return 0, fmt.Errorf("read hook %d: %w", c.seq, err)
			case !found:
				return 0, sink.Permanent(fmt.Errorf("hook %d is missing from the store", c.seq))
			}
			return size, nil
		}
		var err error
		if v, err = d.st.ReadHook(c.seq); err != nil {
			return 0, fmt.Errorf("read hook %d: %w", c.seq, err)
		}
		if v == nil {
			return 0, sink.Permanent(fmt.Errorf("hook %d is missing from the store", c.seq))
		}
	}
	// v is Get's own copy or the commit path's, never written again: the
	// message's body and strings are views of it, not a third copy.
	if err := store.DecodeEnvelopeViewInto(env, v); err != nil {
		return 0, sink.Permanent(fmt.Errorf("hook %d: %w", c.seq, err))
	}
	return len(env.Body), nil
}

func isCancel(err error) bool { return errors.Is(err, context.Canceled) }
