package dispatch

import (
	"sync"

	"github.com/ankusa/ankusa/internal/store"
)

// claims.go holds the dispatcher's claims: the deliveries it is attempting.
// A claim lives in memory only; its row stays due in the store (store/
// delivery.go). A crash loses the claim and leaves the row due, so it is
// attempted again after the restart — exactly what a stored claim row gave,
// since the boot returned every such row to due anyway — and the claim
// costs no write (issue 14: the claim batch and the deletes of its rows
// were about 4 % of a node's CPU). It also cannot be lost while the node
// runs: a claim row that a failed WAL write dropped after Pebble reported it
// applied left the row in flight in the store with no claim for it until a
// restart (the simulator's write class).
//
// Invariant K1: a delivery is claimed at most once at a time, and a claimed
// delivery's due key (its time in the claim) is not claimed again, not
// dead-lettered from due and not counted due, by anyone, while the claim
// is held. The scan, the probe walk and deadLetterDue skip claimed rows;
// the pending gauge, the oldest due age, a source delete's check and the
// hook views subtract or show them (claimSet's readers).
//
// Invariant K2: a claim is released only once its due key is gone or
// known to the scan again: by its outcome's batch (which deletes the key),
// after that batch applied; or, for an attempt that never ran or was cut
// short by the shutdown (its row stays due), with the cursor moved back to
// the key (noteDue) — the cursor passed it when it was claimed (D1 lets it:
// the scan saw the row).

// claimSet is the set of claimed deliveries, each with its due key's time.
// The loop goroutine is its one writer and writes under mu; it reads
// without it. Everyone else (scrapes, the admin API, a source delete) reads
// under mu.
type claimSet struct {
	mu sync.RWMutex
	m  map[rowRef]int64
}

// at returns the due time of seq's claim for sink num. Loop only.
func (s *claimSet) at(seq uint64, num uint16) (int64, bool) {
	at, ok := s.m[rowRef{seq, num}]
	return at, ok
}

// add claims every row of cs. Loop only.
func (s *claimSet) add(cs []claimed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[rowRef]int64, len(cs))
	}
	for i := range cs {
		s.m[rowRef{cs[i].seq, cs[i].num}] = cs[i].at
	}
}

// release drops the claims of rs (K2: after their outcome applied). Loop
// only.
func (s *claimSet) release(rs []result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range rs {
		delete(s.m, rowRef{rs[i].c.seq, rs[i].c.num})
	}
}

// count is how many deliveries are claimed. Any goroutine.
func (s *claimSet) count() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}

// holds reports whether the delivery whose due key is at atMs is claimed.
// Any goroutine.
func (s *claimSet) holds(seq uint64, num uint16, atMs int64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	at, ok := s.m[rowRef{seq, num}]
	return ok && at == atMs
}

// InFlight reports whether the delivery of hook seq to sink num, whose row
// is dl, is being attempted right now: its row is due and this dispatcher
// holds its claim (K1). The admin API shows such a delivery as inflight.
// Any goroutine.
func (d *Dispatcher) InFlight(seq uint64, num uint16, dl *store.Delivery) bool {
	if dl == nil || dl.State != store.StateDue {
		// An older build's claim row (state inflight) is returned to due
		// at boot, before anything reads this.
		return dl != nil && dl.State == store.StateInflight
	}
	// A due row's NextAtMs is its due key's time (store/delivery.go): a
	// claim of an earlier due key of the row (its retry is written, its
	// claim not yet released) is not this row's.
	return d.claims.holds(seq, num, dl.NextAtMs)
}

// ViewState is the state of the delivery row dl (of hook seq, sink num)
// as a user sees it: inflight while an attempt runs (InFlight), else the
// row's own. Any goroutine.
func (d *Dispatcher) ViewState(seq uint64, num uint16, dl *store.Delivery) string {
	if d.InFlight(seq, num, dl) {
		return store.StateName(store.StateInflight)
	}
	return store.StateName(dl.State)
}

// InFlightOf counts the deliveries being attempted for the sinks numbered
// in nums, and reports through claimed whether a due row is one of them
// (claimed must not outlive the call's result: it reads the set as it is
// when called). Any goroutine.
func (d *Dispatcher) InFlightOf(nums func(uint16) bool) (n int, claimed func(atMs int64, seq uint64, num uint16) bool) {
	s := &d.claims
	s.mu.RLock()
	snap := make(map[rowRef]int64)
	for r, at := range s.m {
		if nums(r.num) {
			snap[r] = at
		}
	}
	s.mu.RUnlock()
	return len(snap), func(atMs int64, seq uint64, num uint16) bool {
		at, ok := snap[rowRef{seq, num}]
		return ok && at == atMs
	}
}
