package dispatch

import "time"

// breaker is one sink's circuit breaker. Closed: every due row is claimed.
// Open (after failures consecutive failed attempts): rows stay due and are
// not attempted, so a sink that is down does not burn its hooks' attempt
// budgets into the DLQ. After the cooldown it is half-open: one real
// attempt probes; success closes it, failure opens it again.
// Owned by the dispatcher's loop goroutine.
type breaker struct {
	failures  int
	openUntil time.Time // zero: closed
	probing   bool      // a half-open probe is in flight
}

func (b *breaker) admits(now time.Time) bool {
	return b.openUntil.IsZero() || !now.Before(b.openUntil)
}

func (b *breaker) halfOpen(now time.Time) bool {
	return !b.openUntil.IsZero() && !now.Before(b.openUntil)
}

func (b *breaker) success() {
	b.failures, b.openUntil, b.probing = 0, time.Time{}, false
}

// failure reports whether this failure opened (or re-opened) the breaker.
func (b *breaker) failure(now time.Time, threshold int, cooldown time.Duration) bool {
	b.failures++
	wasProbe := b.probing
	b.probing = false
	if wasProbe || b.failures >= threshold {
		b.openUntil = now.Add(cooldown)
		return true
	}
	return false
}

func (d *Dispatcher) breaker(num uint16) *breaker {
	b := d.breakers[num]
	if b == nil {
		b = &breaker{}
		d.breakers[num] = b
	}
	return b
}

// park notes a due row at at of sink num, whose breaker is open, that the
// scan steps over (D2).
func (d *Dispatcher) park(num uint16, at int64) {
	if cur, ok := d.parked[num]; !ok || at < cur {
		d.parked[num] = at
	}
}

// unparkNoIO hands the rows of the sinks that do no I/O back to the scan
// once their claims are below noIOMax again (collect parked them at it);
// record calls it when it recorded a NoIO claim. A NoIO sink parked by its
// breaker instead is parked again by the next scan.
func (d *Dispatcher) unparkNoIO() {
	if d.noIOInflight >= d.noIOMax() {
		return
	}
	for num := range d.parked {
		if d.doesNoIO(num) {
			d.unpark(num)
		}
	}
}

// unpark hands sink num's parked rows back to the scan: its breaker closed.
func (d *Dispatcher) unpark(num uint16) {
	if at, ok := d.parked[num]; ok {
		d.noteDue(at)
		delete(d.parked, num)
	}
}
