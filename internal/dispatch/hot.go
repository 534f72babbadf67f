package dispatch

import (
	"sync"
	"sync/atomic"

	"github.com/ankusa/ankusa/internal/store"
)

// hot.go keeps the new hooks the commit path handed over once durable
// (queue.Options.OnCommitted → Dispatcher.Committed), so that the common
// life of a hook — written, delivered once to each sink, removed — reads
// none of its rows back: the claim takes the fresh delivery row from here
// instead of reading it, the attempt the envelope, and the outcome batch
// removes the hook from the sinks listed here instead of scanning its
// delivery rows (issue 14: those reads were a third of the dispatcher's
// CPU per hook).
//
// It is a cache in the strict sense: a hook it does not hold, or no
// longer holds, is served by the reads it saves, so every bound below
// costs speed, never a delivery.
//
// Invariant H2: an entry is taken only if the dispatcher wrote none of its
// hook's rows before: the syncer raises durable_seq before it hands the
// group over, so a scan can claim (and an outcome rewrite) a hook in
// between, and dead-lettering due rows does not wait for durable_seq at
// all; an entry taken after such a write would describe rows that are no
// longer fresh. So every such write raises a line (missed: a claim that
// found no entry, and every forget) and take drops the entries at or
// below it. Sound whatever the hand-over order; groups arrive in seq
// order, so the line costs few hits.
//
// Invariant H1: an entry describes the hook's rows as the commit path
// wrote them, changed only by what this dispatcher recorded since: per
// sink, whether its row is still the fresh one (a claim reads it from
// here only then) and, once delivered, with how many attempts. Every
// other write of the hook's delivery rows (a resend, a revive, dead-
// lettering a due row, removing the hook, restoring one) forgets the
// entry first (forget). The dispatcher is the one writer of delivery rows
// after the commit path (store/delivery.go), so nothing else can change
// them behind the entry's back.

const (
	// hotSlots is the ring's size (a power of two): the entry of seq s
	// lives in slot s mod hotSlots, so a newer hook evicts the entry of one
	// hotSlots older — a parked sink's backlog ages out on its own.
	hotSlots = 1 << 16
	// hotMaxBytes bounds the envelopes held; past it an entry keeps its
	// sinks but not its value (the attempt reads the hook row).
	hotMaxBytes = 32 << 20
	// hotMaxSinks: a hook with more sinks is not held (stale is a bitmask).
	hotMaxSinks = 64
)

type hotHook struct {
	c    store.Committed
	live bool
	// stale has bit i set once sink i's row was rewritten by an outcome
	// other than delivered (a retry): its next claim reads the row.
	stale uint64
	// delivered has bit i set once sink i's delivery was recorded
	// delivered (in an earlier outcome batch), attempts[i] its attempt count.
	delivered uint64
	attempts  []uint32
	// deliveredAt is the newest of those deliveries' times (the retained
	// row's time, history.go invariant 1).
	deliveredAt int64
}

type hotCache struct {
	// open: the loop runs (Start to Stop). Hand-overs before or after are
	// not kept: nothing would take them.
	open atomic.Bool
	mu   sync.Mutex
	// pending holds what Committed handed over, not yet taken by the loop
	// (pendingBytes its values: bounded like the ring's); spare is the
	// loop's last buffer, reused.
	pending, spare []store.Committed
	pendingBytes   int64

	// Owned by the loop goroutine.
	ring  []hotHook
	bytes int64
	// missed is the highest seq a claim read from the store because it
	// was not held (H2): an entry handed over for it or below it arrived
	// too late to be trusted and is not taken.
	missed uint64
	// highest is the highest seq taken into the ring (reset).
	highest uint64
}

// Committed takes the new hooks of one durable group (queue.Options.
// OnCommitted). It runs on the commit path's syncer and never blocks on
// the loop: past hotSlots waiting hooks the rest are not held (they are
// delivered by the reads instead).
func (d *Dispatcher) Committed(cs []store.Committed) {
	h := &d.hot
	if !h.open.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pending)+len(cs) > hotSlots {
		return
	}
	for _, c := range cs {
		if h.pendingBytes+int64(len(c.Value)) > hotMaxBytes {
			c.Value = nil
		}
		h.pendingBytes += int64(len(c.Value))
		h.pending = append(h.pending, c)
	}
}

// take moves the hooks handed over into the ring; on the loop, before
// every scan. A hook whose rows became durable just before the scan may
// not be handed over yet: the scan then claims it from the store (H2).
func (h *hotCache) take() {
	h.mu.Lock()
	cs := h.pending
	h.pending, h.spare = h.spare[:0], nil
	h.pendingBytes = 0
	h.mu.Unlock()
	if len(cs) == 0 {
		h.spare = cs
		return
	}
	if h.ring == nil {
		h.ring = make([]hotHook, hotSlots)
	}
	for i := range cs {
		c := &cs[i]
		if c.Seq <= h.missed || len(c.Sinks) == 0 || len(c.Sinks) > hotMaxSinks {
			continue
		}
		e := &h.ring[c.Seq&(hotSlots-1)]
		h.drop(e)
		if h.bytes+int64(len(c.Value)) > hotMaxBytes {
			c.Value = nil
		}
		h.bytes += int64(len(c.Value))
		*e = hotHook{c: *c, live: true, attempts: e.attempts[:0]}
		h.highest = max(h.highest, c.Seq)
	}
	clear(cs) // the buffer is reused: it must not keep values alive
	h.spare = cs[:0]
}

// reset drops every entry, and every hand-over still pending of a hook
// taken before (H2's line rises past them): a store reopen may have
// dropped writes the entries describe (H1). Hooks committed after it are
// taken again.
func (h *hotCache) reset() {
	for i := range h.ring {
		h.drop(&h.ring[i])
	}
	h.missed = max(h.missed, h.highest)
}

// claimRead notes that a claim of seq read its delivery row from the
// store (H2).
func (h *hotCache) claimRead(seq uint64) { h.missed = max(h.missed, seq) }

// lookup returns seq's entry, or nil.
func (h *hotCache) lookup(seq uint64) *hotHook {
	if h.ring == nil {
		return nil
	}
	e := &h.ring[seq&(hotSlots-1)]
	if !e.live || e.c.Seq != seq {
		return nil
	}
	return e
}

// forget drops seq's entry (H1: before any write of its rows but a claim
// or an outcome).
func (h *hotCache) forget(seq uint64) {
	h.missed = max(h.missed, seq) // H2: its hand-over may still be pending
	if e := h.lookup(seq); e != nil {
		h.drop(e)
	}
}

func (h *hotCache) drop(e *hotHook) {
	if !e.live {
		return
	}
	h.bytes -= int64(len(e.c.Value))
	e.live, e.c = false, store.Committed{}
}

// sink returns the index of sink num in e's sinks, or -1.
func (e *hotHook) sink(num uint16) int {
	for i, s := range e.c.Sinks {
		if s.Num == num {
			return i
		}
	}
	return -1
}

// fresh returns the delivery row of sink num as the commit path wrote it,
// if it still is (H1).
func (e *hotHook) fresh(num uint16) (store.Delivery, bool) {
	i := e.sink(num)
	if i < 0 || e.stale&(1<<i) != 0 || e.delivered&(1<<i) != 0 {
		return store.Delivery{}, false
	}
	return e.c.Delivery(i), true
}

// rewritten notes that an outcome other than delivered rewrote sink num's
// row of seq (H1: its next claim reads it). Safe before the write lands.
func (h *hotCache) rewritten(seq uint64, num uint16) {
	if e := h.lookup(seq); e != nil {
		if i := e.sink(num); i >= 0 {
			e.stale |= 1 << i
		}
	}
}

// delivered notes that sink num's delivery of seq, with attempts attempts,
// was recorded at atMs. Only after the write landed (H1).
func (h *hotCache) delivered(seq uint64, num uint16, attempts uint32, atMs int64) {
	e := h.lookup(seq)
	if e == nil {
		return
	}
	i := e.sink(num)
	if i < 0 {
		h.drop(e)
		return
	}
	for len(e.attempts) < len(e.c.Sinks) {
		e.attempts = append(e.attempts, 0)
	}
	e.delivered |= 1 << i
	e.attempts[i] = attempts
	e.deliveredAt = max(e.deliveredAt, atMs)
}
