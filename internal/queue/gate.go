package queue

import (
	"sync"
	"time"
)

// gate is the intake breaker (ADR section 5). Closed: every group is
// published. Open (after BreakerFailures consecutive failed publishes, or a
// false Ready): the writer refuses before assigning a seq, so a log outage
// stores nothing half-way. Half-open (Probe after opening): one real group
// is admitted; its confirm closes the gate, its failure reopens it.
//
// There is no degraded mode: an open gate never lets the node ack on the
// local fsync alone.
type gate struct {
	mu        sync.Mutex
	failures  int       // REQUIRES: mu held
	openedAt  time.Time // REQUIRES: mu held; zero = closed
	probing   bool      // REQUIRES: mu held; the half-open group is in flight
	threshold int
	probe     time.Duration
}

func newGate(threshold int, probe time.Duration) *gate {
	return &gate{threshold: max(threshold, 1), probe: probe}
}

// admit reports whether a group may be committed now, and whether it is
// the half-open probe. ready is the adapter's cheap local Ready flag.
//
// Invariant G1: a probe slot taken here is given back exactly once, by
// result (the probe published) or by release (the probe group wrote
// nothing, so nothing will ever report its result). Without release a
// probe of duplicates or refusals would leave the gate half-open for ever.
func (g *gate) admit(now time.Time, ready bool) (ok, probe bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !ready && g.openedAt.IsZero() {
		g.openedAt = now
	}
	if g.openedAt.IsZero() {
		return true, false
	}
	if g.probing || now.Sub(g.openedAt) < g.probe {
		return false, false
	}
	g.probing = true // half-open: this group is the probe
	return true, true
}

// release gives back the probe slot of a probe group that published
// nothing: the gate stays open and the next group probes (G1).
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.probing = false
}

// result records a publish outcome.
func (g *gate) result(ok bool, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	wasProbe := g.probing
	g.probing = false
	if ok {
		g.failures, g.openedAt = 0, time.Time{}
		return
	}
	g.failures++
	if wasProbe || g.failures >= g.threshold {
		g.openedAt = now
	}
}

// open reports whether the gate is refusing (for /ready and metrics).
func (g *gate) open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.openedAt.IsZero()
}
