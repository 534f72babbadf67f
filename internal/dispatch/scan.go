package dispatch

import (
	"bytes"
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
	now := d.o.Now()
	nowMs := now.UnixMilli()
	durable := d.o.Durable()
	free := min(d.o.MaxInflight-d.inflight, d.o.ScanBatch)

	var next time.Time
	byNum := map[uint16][]candidate{}
	var order []uint16
	seen := 0
	limit := 4 * d.o.ScanBatch
	upper := store.DueKey(nowMs+1, 0, 0)
	// Start at the cursor: below it are only the tombstones of rows already
	// claimed, which an LSM would otherwise step over on every scan.
	low := int64(-1) // the earliest row left due by this scan, -1 = none
	var lastAt int64 = d.low
	err := d.st.Scan(store.DueKey(d.low, 0, 0), []byte{store.PrefixDue + 1}, func(k, _ []byte) bool {
		at, seq, num, ok := store.ParseTimedKey(k)
		if !ok {
			return true
		}
		if bytes.Compare(k, upper) >= 0 {
			next = time.UnixMilli(at)
			return false
		}
		lastAt = at
		if free <= 0 || seen >= limit {
			// Enough candidates; rows still due are found by the next scan,
			// which runs as soon as a slot frees up.
			if low < 0 {
				low = at
			}
			return false
		}
		// Rule 3: a row above durable_seq belongs to a group whose fsync has
		// not returned (and may yet be undone). It waits.
		if seq > durable {
			if low < 0 {
				low = at
			}
			return true
		}
		if b := d.breakers[num]; b != nil && !b.admits(now) {
			if low < 0 {
				low = at
			}
			return true // parked: no attempt spent while the sink is down
		}
		if _, ok := byNum[num]; !ok {
			order = append(order, num)
		}
		byNum[num] = append(byNum[num], candidate{at, seq, num})
		seen++
		return true
	})
	if err != nil {
		d.log.Warn("due scan failed", "err", err)
		return now.Add(d.o.Poll)
	}
	// Candidates not picked below stay due: the cursor must not pass them.
	defer func() {
		if low < 0 {
			low = lastAt
		}
		d.low = low
	}()
	if seen == 0 {
		return next
	}

	// Round-robin pick across sinks.
	var picked []candidate
	defer func() {
		// Whatever was seen but not claimed keeps the cursor at or below it.
		for _, q := range byNum {
			for _, c := range q {
				d.lower(&low, c.at)
			}
		}
	}()
	probing := map[uint16]bool{}
	for len(picked) < free {
		progress := false
		for _, num := range order {
			q := byNum[num]
			if len(q) == 0 || len(picked) >= free {
				continue
			}
			if b := d.breakers[num]; b != nil && b.halfOpen(now) {
				// Half-open: exactly one real attempt probes the sink.
				if probing[num] || b.probing {
					// Left due: the cursor must stay at or below them.
					for _, c := range q {
						d.lower(&low, c.at)
					}
					byNum[num] = nil
					continue
				}
				probing[num] = true
			}
			picked = append(picked, q[0])
			byNum[num] = q[1:]
			progress = true
		}
		if !progress {
			break
		}
	}

	b := d.st.NewBatch()
	defer b.Close()
	var claims []claimed
	lease := nowMs + (2 * d.o.AttemptTimeout).Milliseconds()
	for i, c := range picked {
		v, err := d.st.Get(store.DeliveryKey(c.seq, c.num))
		if err != nil {
			d.log.Warn("read delivery row", "seq", c.seq, "err", err)
			d.lower(&low, c.at)
			continue
		}
		if v == nil {
			// A due key without its row: left by an interrupted reclaim. Drop it.
			_ = b.Delete(store.DueKey(c.at, c.seq, c.num), nil)
			continue
		}
		dl, err := store.DecodeDelivery(v)
		if err != nil {
			d.log.Error("corrupt delivery row", "seq", c.seq, "sink", c.num, "err", err)
			continue
		}
		size := int64(dl.Size)
		if d.inflight > 0 && d.inflightBytes+size > d.o.MaxInflightBytes {
			for _, rest := range picked[i:] {
				d.lower(&low, rest.at)
			}
			break
		}
		dl.State = store.StateInflight
		_ = b.Delete(store.DueKey(c.at, c.seq, c.num), nil)
		_ = b.Set(store.InflightKey(c.seq, c.num), store.U64(uint64(lease)), nil)
		_ = b.Set(store.DeliveryKey(c.seq, c.num), store.EncodeDelivery(dl), nil)
		claims = append(claims, claimed{seq: c.seq, num: c.num, delivery: *dl, size: size})
		d.inflight++
		d.inflightBytes += size
		if br := d.breakers[c.num]; br != nil && br.halfOpen(now) {
			br.probing = true
		}
	}
	if len(claims) == 0 {
		_ = d.st.Apply(b)
		return next
	}
	// Not synced: a claim lost in a crash leaves the row due, and a claim
	// that survives returns to due at the next start. Either way it is
	// delivered again, never dropped.
	if err := d.st.Apply(b); err != nil {
		d.log.Warn("claim failed", "rows", len(claims), "err", err)
		for _, c := range claims {
			d.inflight--
			d.inflightBytes -= c.size
			if br := d.breakers[c.num]; br != nil && br.halfOpen(now) {
				// The probe this scan chose never started: without this the
				// sink's breaker waits for its result for ever and none of
				// its rows is claimed again (found by the simulator).
				br.probing = false
			}
		}
		// Their due rows are still there: the cursor must not pass them, or
		// they wait for the next restart (found by the simulator).
		for _, c := range picked {
			d.lower(&low, c.at)
		}
		return now.Add(d.o.Poll)
	}
	d.inflightGauge.Store(int64(d.inflight))
	for _, c := range claims {
		d.workers.Add(1)
		go d.attempt(ctx, c)
	}
	// More may be due right now: come back at once.
	return now
}

// attempt runs one delivery on a worker and reports its result.
func (d *Dispatcher) attempt(ctx context.Context, c claimed) {
	defer d.workers.Done()
	select {
	case d.sem <- struct{}{}:
	case <-ctx.Done():
		d.results <- result{c: c, err: ctx.Err()}
		return
	}
	defer func() { <-d.sem }()
	start := d.o.Now()
	id, err := d.deliverOne(ctx, c)
	d.results <- result{c: c, id: id, err: err, dur: d.o.Now().Sub(start)}
}

var errNoTarget = errors.New("sink is no longer configured")

func (d *Dispatcher) deliverOne(ctx context.Context, c claimed) ([16]byte, error) {
	t, ok := d.target(c.num)
	if !ok {
		return [16]byte{}, sink.Permanent(fmt.Errorf("%w (sink number %d, id %q)", errNoTarget, c.num, c.delivery.SinkID))
	}
	v, err := d.st.Get(store.HookKey(c.seq))
	if err != nil {
		return [16]byte{}, fmt.Errorf("read hook %d: %w", c.seq, err)
	}
	if v == nil {
		return [16]byte{}, sink.Permanent(fmt.Errorf("hook %d is missing from the store", c.seq))
	}
	env, err := store.DecodeEnvelope(v)
	if err != nil {
		return [16]byte{}, sink.Permanent(fmt.Errorf("hook %d: %w", c.seq, err))
	}
	m := &sink.Message{
		ID: uuid.UUID(env.ID), Seq: env.Seq, Tenant: env.Tenant, Source: env.Source,
		ReceivedAt: time.Unix(0, env.ReceivedAt), ContentType: env.ContentType,
		Headers: env.Headers, Body: env.Body, SHA256: env.SHA256,
		DedupeKey: env.DedupeKey, ReplayID: c.delivery.ReplayID, Flagged: env.Flagged,
		Attempt: int(c.delivery.Attempts) + 1,
	}
	actx, cancel := context.WithTimeout(ctx, d.o.AttemptTimeout)
	defer cancel()
	err = t.Sink.Deliver(actx, m)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("attempt timed out after %s: %w", d.o.AttemptTimeout, err)
	}
	return env.ID, err
}

// lower moves a scan's low mark down to at.
func (d *Dispatcher) lower(low *int64, at int64) {
	if *low < 0 || at < *low {
		*low = at
	}
}

func isCancel(err error) bool { return errors.Is(err, context.Canceled) }
