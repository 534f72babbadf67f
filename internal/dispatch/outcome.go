package dispatch

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
)

// maxRetryAfter caps a target's requested delay.
const maxRetryAfter = time.Hour

// maxErrorLen bounds the last error kept on a delivery row.
const maxErrorLen = 512

// RetryPolicy: delay = min(Max, Base·2^(attempt−1)) × jitter in [0.5, 1.0];
// a target's Retry-After raises it (capped at an hour); MaxAttempts failed
// attempts dead-letter the row.
type RetryPolicy struct {
	Base, Max   time.Duration
	MaxAttempts int
}

func (p *RetryPolicy) fill() {
	if p.Base <= 0 {
		p.Base = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 5 * time.Minute
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 84
	}
}

// Delay is the wait after the attempt-th failed attempt.
func (p RetryPolicy) Delay(attempt int, jitter float64, retryAfter time.Duration) time.Duration {
	exp := math.Min(float64(attempt-1), 62)
	d := time.Duration(math.Min(float64(p.Max), float64(p.Base)*math.Pow(2, exp)))
	d = time.Duration(float64(d) * jitter)
	if retryAfter > d {
		d = min(retryAfter, maxRetryAfter)
	}
	return d
}

// record writes the outcomes of finished attempts and reclaims the hooks
// whose every delivery is now done, in ONE batch: a crash between two
// writes would leave a fully delivered hook that nothing ever removes.
func (d *Dispatcher) record(rs []result) {
	now := d.o.Now()
	nowMs := now.UnixMilli()
	b := d.st.NewBatch()
	defer b.Close()
	// The batch's generation, not one read before the batch was made: a
	// reopen in between would make the batch the new generation's while
	// gen still named the old, and R1 would not read back what it must.
	if err := b.Err(); err != nil {
		// No generation open: nothing can be read back or written.
		d.log.Error("recording delivery outcomes failed; retrying", "rows", len(rs), "err", err)
		d.unrecorded = append(d.unrecorded, rs...)
		return
	}
	gen := b.Generation()
	if gen != d.gen {
		// A reopen the loop has not seen yet: what it counted and cached
		// from the old generation goes first (resync), so that reclaim
		// below does not trust a hot entry of it (H1).
		d.resync(gen)
	}
	rs, err := d.dropSettled(rs, gen, now)
	if err != nil {
		// Nothing was counted off for rs yet: kept as they are, for the
		// next turn.
		d.log.Error("recording delivery outcomes: reading their rows after a store reopen failed; retrying", "rows", len(rs), "err", err)
		d.unrecorded = append(d.unrecorded, rs...)
		return
	}
	if len(rs) == 0 {
		return
	}
	sc := &d.scratch
	defer sc.reset()
	outs := sc.outs[:0]
	// Sized for every result, so that done may point into it; and r below
	// is a copy that does not escape (rs stays as it came: a failed write
	// records rs again).
	delivered := slices.Grow(sc.delivered[:0], len(rs))
	// done: rows this batch marks delivered, not yet visible in the store.
	if sc.done == nil {
		sc.done = map[rowRef]*store.Delivery{}
	}
	done := sc.done
	dead := 0
	// noIODone: a NoIO claim is recorded here, so the NoIO sinks may be
	// below their bound again (unparkNoIO).
	noIODone := false
	for _, r := range rs {
		c := r.c
		d.inflight--
		d.inflightBytes -= c.size
		if c.noIO {
			d.noIOInflight--
			noIODone = true
		}
		if isCancel(r.err) {
			// Shutdown interrupted the attempt: not the sink's fault. The
			// row stays due, attempted again (at the next start) without
			// spending an attempt.
			continue
		}
		if c.gen != gen {
			// Claimed from a generation a reopen replaced: the reopen may
			// have dropped the write that made this due key, so its delete
			// may name a key that is gone (C2).
			b.DueUnsure()
		}
		dl := c.delivery
		dl.Attempts++
		permanent, retryAfter := d.judge(&r, now)
		if r.err == nil {
			// NextAtMs of a finished row is when it finished (history.go
			// invariant 1). Written after reclaim, with its attempt row,
			// unless the hook goes in this batch: then the row is deleted
			// with it, and writing it first cost a row for nothing.
			store.MarkDelivered(&dl, nowMs)
			r.c.delivery = dl
			delivered = append(delivered, r)
			done[rowRef{c.seq, c.num}] = &delivered[len(delivered)-1].c.delivery
			outs = append(outs, outcome{dl.SinkID, "delivered", r.dur})
			continue
		}
		dl.LastError = truncate(r.err.Error(), maxErrorLen)
		if permanent || int(dl.Attempts) >= d.o.Retry.MaxAttempts {
			d.logAttempt(b, c, &dl, "dead", r, nowMs)
			reason := dl.LastError
			if !permanent {
				reason = "attempts exhausted: " + reason
			}
			b.Dead(c.at, c.seq, c.num, &dl, nowMs, reason)
			d.hot.rewritten(c.seq, c.num)
			dead++
			outs = append(outs, outcome{dl.SinkID, "dead", r.dur})
			continue
		}
		// Rounded up to the millisecond: a retry must never start before a
		// target's Retry-After has elapsed.
		delay := d.o.Retry.Delay(max(int(dl.Attempts), 1), d.o.Jitter(), retryAfter)
		next := (now.Add(delay).UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
		d.logAttempt(b, c, &dl, "retry", r, nowMs)
		b.Retry(c.at, c.seq, c.num, &dl, next)
		d.hot.rewritten(c.seq, c.num)
		d.noteDue(next)
		outs = append(outs, outcome{dl.SinkID, "retry", r.dur})
	}
	sc.outs, sc.delivered = outs, delivered // kept for the next batch, reset when this one ends
	hooks, rows, kept, keptBytes, removed := d.reclaim(b, nowMs, delivered, done)
	for _, r := range delivered {
		if removed[r.c.seq] {
			// The delivery row goes with the hook.
			if i, ok := sc.at[r.c.seq]; ok && sc.states[i].fresh {
				b.DropFreshDue(r.c.at, r.c.seq, r.c.num) // W1, as reclaim vouched
			} else {
				b.DropDue(r.c.at, r.c.seq, r.c.num)
			}
			continue
		}
		b.Delivered(r.c.at, r.c.seq, r.c.num, &r.c.delivery, nowMs)
		d.logAttempt(b, r.c, &r.c.delivery, "delivered", r, nowMs)
	}
	if err := d.apply(b, false); err != nil {
		// The rows stay due in the store, their claims held, and the
		// attempts are kept, to be recorded again at the next loop turn
		// (the claims keep the scan off them meanwhile, K1).
		d.log.Error("recording delivery outcomes failed; retrying", "rows", len(rs), "err", err)
		for _, r := range rs {
			d.inflight++
			d.inflightBytes += r.c.size
			if r.c.noIO {
				d.noIOInflight++
			}
		}
		d.unrecorded = append(d.unrecorded, rs...)
		return
	}
	// Only now (K2): while the write is retried the rows are still
	// claimed, and a scrape must not see them go before their outcome.
	d.claims.release(rs)
	if noIODone {
		d.unparkNoIO()
	}
	for _, r := range rs {
		if isCancel(r.err) {
			d.noteDue(r.c.at) // K2: the row stays due behind the cursor
		}
	}
	// Only now too (H1): a delivery the cache counts must be one the store
	// has, or a later batch could remove the hook while this one's write
	// is still to be retried.
	for _, r := range delivered {
		if !removed[r.c.seq] {
			d.hot.delivered(r.c.seq, r.c.num, r.c.delivery.Attempts, nowMs)
		}
	}
	if d.afterOutcome != nil {
		d.afterOutcome()
	}
	d.deadGauge.Add(int64(dead))
	for _, o := range outs {
		d.o.Observer.Delivery(o.sinkID, o.result, o.dur)
	}
	d.retainedHooks.Add(int64(kept))
	d.retainedBytes.Add(keptBytes)
	if hooks > 0 {
		d.o.OnReclaim(hooks, rows)
	}
}

// judge tells the sink's breaker how r's attempt went, and classifies a
// failure: permanent (the target refused the hook) or not, with the
// target's Retry-After.
func (d *Dispatcher) judge(r *result, now time.Time) (permanent bool, retryAfter time.Duration) {
	br := d.breaker(r.c.num)
	if r.err == nil {
		br.success()
		d.unpark(r.c.num)
		return false, 0
	}
	permanent, retryAfter = sink.Classify(r.err)
	if permanent {
		// The target answered and refused this hook: it is up, so its
		// breaker stays closed for the others.
		br.success()
		d.unpark(r.c.num)
	} else if br.failure(now, d.o.BreakerFailures, d.o.BreakerCooldown) {
		d.log.Warn("sink breaker open: parking its rows", "sink", r.c.delivery.SinkID, "for", d.o.BreakerCooldown, "err", r.err)
	}
	return permanent, retryAfter
}

// dropSettled takes out of rs the results whose row is no longer the one
// their attempt claimed, and ends their claims; it keeps this invariant:
//
// R1. An outcome is written only over the row its attempt claimed. A
// batch the store reported failed may still have reached the WAL ahead of
// the fault that failed it (its write went out before the failed fsync),
// and the fence's reopen then replays it: its outcomes recorded, a hook
// it removed gone with every row. record keeps a failed batch's results
// to write again (unrecorded); written over what the replay settled, they
// made a delivery row and an attempt row (for a retry a due row, for a
// dead letter a dead row) of a hook that had no other row left, which no
// reclaim removes, or a second due row of one delivery (the simulator,
// rule 7, seed 400). The reverse comes with it: a reopen can drop an
// unsynced write a claim read (a retry's new row), and the row is then
// back as it was. A failed batch fails its generation, so its results are
// recorded again on a later one: only results claimed from a generation a
// reopen replaced are read back, one Get each. Their row is as claimed
// only if its state, attempts, due time and replay tag are the claim's;
// otherwise the outcome is not written: the row is gone, settled, or due
// again to be claimed afresh (no other attempt of it ran meanwhile: the
// claim held it, K1). The attempt did happen, so its sink's breaker hears
// of it (judge), the Observer counts it, and a row due again is noted for
// the scan (K2).
func (d *Dispatcher) dropSettled(rs []result, gen uint64, now time.Time) ([]result, error) {
	var settled []bool
	var due []int64
	for i := range rs {
		c := &rs[i].c
		if c.gen == gen || isCancel(rs[i].err) {
			continue
		}
		cur, err := d.st.ReadDelivery(c.seq, c.num)
		if errors.Is(err, store.ErrCorrupt) {
			// Not settled by a replay; written over, as before R1 (a claim
			// treats a corrupt row the same way), rather than held forever.
			continue
		}
		if err != nil {
			return rs, err
		}
		if cur != nil && sameRow(cur, &c.delivery) {
			continue
		}
		if settled == nil {
			settled = make([]bool, len(rs))
		}
		settled[i] = true
		if cur != nil && cur.State == store.StateDue {
			due = append(due, cur.NextAtMs)
		}
	}
	if settled == nil {
		return rs, nil
	}
	keep := rs[:0]
	var done []result
	for i := range rs {
		r := rs[i]
		if !settled[i] {
			keep = append(keep, r)
			continue
		}
		done = append(done, r)
		d.inflight--
		d.inflightBytes -= r.c.size
		if r.c.noIO {
			d.noIOInflight--
		}
		d.judge(&r, now)
		d.hot.forget(r.c.seq) // H1: resync dropped the generation's entries; this keeps it so
		// And the metrics count it, as a finished attempt: delivered if it
		// was, else retry (it dead-lettered nothing; "dead" would count a
		// dead letter that no row holds).
		result := "delivered"
		if r.err != nil {
			result = "retry"
		}
		d.o.Observer.Delivery(r.c.delivery.SinkID, result, r.dur)
	}
	d.claims.release(done)
	d.unparkNoIO()
	for _, at := range due {
		d.noteDue(at) // K2
	}
	d.log.Warn("outcomes not written: their rows changed in a store reopen (a batch reported failed had reached the log, or an unsynced one had not)", "rows", len(done))
	return keep, nil
}

// sameRow reports whether a delivery row is still the one a claim read.
func sameRow(cur, claimed *store.Delivery) bool {
	return cur.State == claimed.State && cur.Attempts == claimed.Attempts &&
		cur.NextAtMs == claimed.NextAtMs && cur.ReplayID == claimed.ReplayID
}

type rowRef struct {
	seq uint64
	num uint16
}

// reclaim adds to b, for the hooks of the delivered results whose every
// delivery row is delivered (in the store, or by b itself: done), either
// their retained row (Retention > 0: history.go keeps them until the
// sweep) or the deletes of every row of the hook; removed lists the hooks
// deleted. It reads the delivery rows of all of them with one iterator and
// deletes a hook from what the result knows (its id, tenant, source, the
// attempt counts), without reading it — unless a delivery was revived or
// resent (its attempt rows are not 1..Attempts then; store.Batch.
// DeleteDeliveredHooks), which reads the hook's rows. Dedupe rows stay
// until their TTL so that a provider's late retry is still absorbed. A
// hook it cannot read is left for the boot sweep.
func (d *Dispatcher) reclaim(b *store.Batch, nowMs int64, delivered []result, done map[rowRef]*store.Delivery) (hooks, rows, kept int, keptBytes int64, removed map[uint64]bool) {
	sc := &d.scratch
	// One array of states for the batch, not an allocation per hook; sized
	// first, so that hs's pointers stay valid.
	states := slices.Grow(sc.states[:0], len(delivered))
	if sc.at == nil {
		sc.at, sc.removed = map[uint64]int{}, map[uint64]bool{}
	}
	at := sc.at
	seqs := sc.seqs[:0]
	defer func() { sc.states, sc.seqs = states, seqs }()
	for _, r := range delivered {
		i, ok := at[r.c.seq]
		if !ok {
			i = len(states)
			at[r.c.seq] = i
			states = append(states, hookState{ref: r.hook, size: int64(r.c.delivery.Size), all: true, plain: true, deliveredAt: nowMs,
				hot: d.hot.lookup(r.c.seq), firstKeys: true})
			seqs = append(seqs, r.c.seq)
		}
		h := &states[i]
		h.want++
		// W1 (store): the due key this outcome drops must be the one the
		// commit path wrote, at the first attempt.
		if h.hot == nil || r.c.at != h.hot.c.DueAtMs || r.c.delivery.Attempts != 1 {
			h.firstKeys = false
		}
	}
	hs := func(seq uint64) *hookState { return &states[at[seq]] }
	slices.Sort(seqs)
	// The hooks the hot cache holds need no scan: it lists their sinks
	// and which of them were delivered before (H1).
	scan := sc.scan[:0]
	sinkBuf := sc.sinks[:0]
	defer func() { sc.scan, sc.sinks = scan, sinkBuf }()
	// thisBatch is a delivery this batch records: its attempt row is
	// written only if the hook stays, so rows 1..Attempts-1 exist.
	thisBatch := func(num uint16, dl *store.Delivery) store.SinkAttempts {
		return store.SinkAttempts{Sink: num, Attempts: dl.Attempts - 1}
	}
	for _, seq := range seqs {
		h := hs(seq)
		e := h.hot
		if e == nil || h.ref.Seq != seq {
			scan = append(scan, seq)
			continue
		}
		// Every hook's list is cut from one array for the batch (a
		// moved array keeps the lists cut before).
		all, seen, start := true, 0, len(sinkBuf)
		for i, s := range e.c.Sinks {
			if dl := done[rowRef{seq, s.Num}]; dl != nil {
				seen++
				sinkBuf = append(sinkBuf, thisBatch(s.Num, dl))
				continue
			}
			if e.delivered&(1<<i) == 0 {
				all = false
				continue
			}
			sinkBuf = append(sinkBuf, store.SinkAttempts{Sink: s.Num, Attempts: e.attempts[i]})
		}
		if seen != h.want {
			// A delivered row the entry does not list: H1 says it cannot
			// be; the scan knows for sure.
			sinkBuf = sinkBuf[:start]
			scan = append(scan, seq)
			continue
		}
		// Capped: the room after it is the next hook's.
		h.all, h.seen, h.sinks = all, seen, sinkBuf[start:len(sinkBuf):len(sinkBuf)]
		// W1 (store): every row of the hook is as this process's commit
		// path wrote it (H1: no sink's row rewritten, none delivered in an
		// earlier batch), and this batch delivers every sink at its first
		// attempt from the key that path wrote: each row was SET once, so
		// its removal may single-delete.
		h.fresh = all && seen == len(e.c.Sinks) && e.stale == 0 && e.delivered == 0 && h.firstKeys
		h.deliveredAt = max(h.deliveredAt, e.deliveredAt)
	}
	err := d.st.ScanDeliveriesOf(scan, func(seq uint64, num uint16, v []byte) bool {
		h := hs(seq)
		dl := done[rowRef{seq, num}]
		if dl == nil {
			var err error
			if dl, err = store.DecodeDelivery(v); err != nil || dl.State != store.StateDelivered {
				h.all = false
				return false
			}
			h.deliveredAt = max(h.deliveredAt, dl.NextAtMs)
			h.plain = h.plain && dl.ReplayID == ""
			h.sinks = append(h.sinks, store.SinkAttempts{Sink: num, Attempts: dl.Attempts})
			return true
		}
		h.seen++
		h.plain = h.plain && dl.ReplayID == ""
		h.sinks = append(h.sinks, thisBatch(num, dl))
		return true
	})
	if err != nil {
		d.log.Warn("reclaim: read delivery rows; the hooks are reclaimed by the boot sweep", "hooks", len(seqs), "err", err)
		return 0, 0, 0, 0, nil
	}
	removed = sc.removed
	plain := sc.plain[:0]
	defer func() { sc.plain = plain }()
	for _, seq := range seqs {
		h := hs(seq)
		if !h.all || h.seen != h.want {
			continue
		}
		// Kept or removed, the hook's life as the commit path wrote it
		// is over (H1).
		d.hot.forget(seq)
		if d.o.Retention > 0 {
			d.keep(b, seq, h.deliveredAt, int(h.size))
			kept++
			keptBytes += h.size
			continue
		}
		if h.plain && h.ref.Seq == seq {
			plain = append(plain, store.DeliveredHook{Ref: h.ref, Sinks: h.sinks, Fresh: h.fresh})
			hooks++
			removed[seq] = true
			continue
		}
		// The attempt rows of this batch are not written for a hook it
		// removes, so the store's rows are all there are.
		if n, ok := d.deleteHook(b, seq); ok {
			hooks++
			rows += n
			removed[seq] = true
		}
	}
	rows += b.DeleteDeliveredHooks(plain)
	return hooks, rows, kept, keptBytes, removed
}

// deleteHook adds to b the deletes of every row of hook seq
// (store.StoredRows), and returns how many delivery rows that removes; false
// when the hook cannot be read.
func (d *Dispatcher) deleteHook(b *store.Batch, seq uint64) (int, bool) {
	hv, err := d.st.ReadHook(seq)
	if err != nil || hv == nil {
		return 0, false
	}
	env, err := store.DecodeEnvelope(hv)
	if err != nil {
		return 0, false
	}
	hr, err := d.st.StoredRows(env)
	if err != nil {
		return 0, false
	}
	return b.DeleteHook(hr), true
}

// sweepDelivered removes, at boot, every hook whose delivery rows are all
// delivered: an older build wrote the outcome and the reclaim in two
// writes, and a crash between them left such hooks behind for good. One
// pass over the delivery rows (ordered by seq), one synced write.
func (d *Dispatcher) sweepDelivered() error {
	b := d.st.NewBatch()
	defer b.Close()
	hooks, rows := 0, 0
	var cur uint64
	n := 0
	all, have := true, false
	var newest int64 // the newest NextAtMs of cur's rows: its retained row's time
	flush := func() {
		if have && all && n > 0 && d.retained(cur, newest) {
			all = false // kept by retention.delivered (history.go)
		}
		if have && all && n > 0 {
			if _, ok := d.deleteHook(b, cur); ok {
				hooks++
				rows += n
			}
		}
		n, all, have, newest = 0, true, false, 0
	}
	err := d.st.ScanAllDeliveries(func(seq uint64, _ uint16, v []byte) bool {
		if !have || seq != cur {
			flush()
			cur, have = seq, true
		}
		dl, err := store.DecodeDelivery(v)
		if err != nil || dl.State != store.StateDelivered {
			all = false
			return true
		}
		newest = max(newest, dl.NextAtMs)
		n++
		return true
	})
	if err != nil {
		return fmt.Errorf("sweep delivered hooks: %w", err)
	}
	flush()
	if hooks == 0 {
		return nil
	}
	if err := d.apply(b, true); err != nil {
		return fmt.Errorf("sweep %d delivered hooks: %w", hooks, err)
	}
	d.log.Info("removed fully delivered hooks left by a crash", "hooks", hooks)
	if d.o.OnReclaim != nil {
		d.o.OnReclaim(hooks, rows)
	}
	return nil
}

// retained reports whether hook seq has its retained row at deliveredAtMs.
func (d *Dispatcher) retained(seq uint64, deliveredAtMs int64) bool {
	_, ok, err := d.st.ReadRetained(deliveredAtMs, seq)
	return err != nil || ok // unreadable: keep it, never guess a delete
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// outcome is one finished attempt's result for the metrics, reported once
// its batch landed.
type outcome struct {
	sinkID, result string
	dur            time.Duration
}

// hookState is what reclaim gathers of one delivered hook.
type hookState struct {
	ref  store.HookRef
	size int64
	all  bool
	// plain: no delivery of it was revived or resent.
	plain bool
	// deliveredAt is the retained row's time: the newest NextAtMs of
	// the hook's rows (history.go invariant 1), which is not nowMs when
	// the clock stepped back since an earlier sink's delivery.
	deliveredAt int64
	sinks       []store.SinkAttempts
	// want and seen count the rows this batch delivers, and those of
	// them the scan found: a row it did not find is not one to
	// delete.
	want, seen int
	// hot is the hot cache's entry of the hook, nil if it holds none
	// (looked up once per batch: nothing changes the ring until reclaim
	// forgets the hooks it removes).
	hot *hotHook
	// firstKeys: every delivery this batch records of the hook was its
	// first attempt, claimed at the due key the commit path wrote; fresh:
	// that, and the hot cache vouches for all of its rows (store W1).
	firstKeys, fresh bool
}

// loopScratch is the memory the loop reuses from one claim pass and one
// outcome batch to the next (issue 14: allocated afresh each time, it was
// about a third of the bytes the node allocated per hook). Loop goroutine
// only. Nothing keeps a slice or map of it past the call that filled it,
// and reset clears what the last batch put there, so a reused array never
// keeps a delivered hook's envelope alive.
type loopScratch struct {
	claims     []claimed
	outs       []outcome
	delivered  []result
	states     []hookState
	seqs, scan []uint64
	sinks      []store.SinkAttempts
	plain      []store.DeliveredHook
	done       map[rowRef]*store.Delivery
	at         map[uint64]int
	removed    map[uint64]bool
	pass       pass // the claim pass's (newPass)
}

// reset ends an outcome batch's use of the scratch.
func (sc *loopScratch) reset() {
	clear(sc.outs[:cap(sc.outs)])
	clear(sc.delivered[:cap(sc.delivered)])
	clear(sc.states[:cap(sc.states)])
	clear(sc.sinks[:cap(sc.sinks)])
	clear(sc.plain[:cap(sc.plain)])
	clear(sc.done)
	clear(sc.at)
	clear(sc.removed)
	sc.outs, sc.delivered, sc.states, sc.sinks, sc.plain = sc.outs[:0], sc.delivered[:0], sc.states[:0], sc.sinks[:0], sc.plain[:0]
	sc.seqs, sc.scan = sc.seqs[:0], sc.scan[:0]
}
