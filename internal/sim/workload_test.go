package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// request is one webhook a provider wants delivered. A provider retries it
// after a 503, after a 201 it never saw, after a dropped connection; the
// body of a dedupe key is always the same, as a real provider's retry is.
type request struct {
	n      int
	tenant string
	source string
	key    string // "" without dedupe
	body   []byte
	poison bool
	held   bool // it fails verification: the edge holds it (202), release_test.go
}

// scope is the dedupe key as the store scopes it.
func (r request) scope() string {
	if r.key == "" {
		return ""
	}
	return r.tenant + "/" + r.source + "/" + r.key
}

// newRequest draws a request from the main goroutine's rng.
func (w *world) newRequest() request {
	w.mu.Lock()
	w.reqs++
	n := w.reqs
	w.mu.Unlock()
	r := request{
		n:      n,
		tenant: []string{"t1", "t2"}[w.rng.IntN(2)],
		source: sourceNames[w.rng.IntN(len(sourceNames))],
	}
	if w.rng.IntN(10) < 7 {
		r.key = fmt.Sprintf("k%d", w.rng.IntN(12))
	}
	seed := uint64(n)
	if r.key != "" {
		// The same key always carries the same body (a retry resends it).
		seed = 0
		for _, c := range r.scope() {
			seed = seed*131 + uint64(c)
		}
	}
	br := rand.New(rand.NewPCG(w.seed, seed))
	size := 32 + br.IntN(480)
	if w.cfg.dual && w.cfg.weights["poison"] > 0 && r.key != "" && w.rng.IntN(25) == 0 {
		// A body the log refuses for good: the original is stuck, carried
		// past the reconcile deadline, while its provider keeps retrying.
		r.poison, size = true, poisonBodySize
		r.key = fmt.Sprintf("poison%d", n)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `{"req":%q,"data":"`, r.scope())
	for b.Len() < size {
		b.WriteByte(byte('a' + br.IntN(26)))
	}
	b.WriteString(`"}`)
	r.body = []byte(b.String())
	// The release class's own stream: every draw above is the one the
	// schedule made before the class existed.
	if w.cfg.release > 0 && w.holdRng.IntN(12) < w.cfg.release {
		r.held = true
	}
	return r
}

// submitBurst starts k providers at this instant.
func (w *world) submitBurst(k int) {
	for range k {
		r := w.newRequest()
		held := ""
		if r.held {
			held = " held"
		}
		w.tracef("req %d starts: %s %s key=%q poison=%v%s", r.n, r.tenant, r.source, r.key, r.poison, held)
		crng := rand.New(rand.NewPCG(w.seed^0xc11e, uint64(r.n)))
		w.clients.Add(1)
		if r.held {
			go w.holder(r, crng)
		} else {
			go w.client(r, crng)
		}
	}
}

func (w *world) isStopping() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

func (w *world) record(r request, n *node) *queue.Record {
	var sinks []queue.SinkRef
	for _, id := range sources[r.source] {
		sinks = append(sinks, queue.SinkRef{Num: n.nums[store.SinkRef{Source: r.source, Sink: id}], ID: id})
	}
	rec := &queue.Record{
		ReceivedAt: time.Now(), Tenant: r.tenant, Source: r.source, ContentType: "application/json",
		Body: r.body, Sinks: sinks,
	}
	if r.key != "" {
		rec.DedupeKey, rec.DedupeTTL = r.key, time.Hour
	}
	return rec
}

// provide runs one provider's attempts at r, up to six, each against the
// node up at that instant (none up: the connection is refused, and the
// provider tries again a second later). try makes one attempt and says
// whether the provider is done, and otherwise how long it waits before
// the next. Every wake of a provider lands on an instant of its own (a
// seeded offset under a millisecond): two goroutines woken at one instant
// run in the scheduler's order, which a replay need not repeat.
func (w *world) provide(r request, crng *rand.Rand, try func(n *node, att int) (done bool, wait time.Duration)) {
	defer w.clients.Done()
	sleep := func(d time.Duration) { time.Sleep(d + time.Duration(1+crng.IntN(999))*time.Microsecond) }
	sleep(0)
	for att := 1; att <= 6; att++ {
		if w.isStopping() {
			return
		}
		n := w.current()
		if n == nil {
			w.tracef("req %d att %d: connection refused (node down)", r.n, att)
			sleep(time.Second)
			continue
		}
		done, wait := try(n, att)
		if done {
			return
		}
		sleep(wait)
	}
}

// dropped is a provider's wait after a dropped connection or a 503.
func dropped(crng *rand.Rand) time.Duration {
	return time.Duration(1000+crng.IntN(2000)) * time.Millisecond
}

// answerLost reports whether the answer to a successful attempt was lost
// on the way back (the provider retries), with the wait before it does.
func answerLost(crng *rand.Rand) (bool, time.Duration) {
	if crng.IntN(8) != 0 {
		return false, 0
	}
	return true, time.Duration(500+crng.IntN(2000)) * time.Millisecond
}

// client is one provider: it submits until it sees a 201, up to six
// attempts, with the retries a provider makes.
func (w *world) client(r request, crng *rand.Rand) {
	w.provide(r, crng, func(n *node, att int) (bool, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := n.q.Submit(ctx, w.record(r, n))
		cancel()
		if n.dead.Load() {
			// The process died before the answer left: the provider sees a
			// dropped connection, whatever the queue decided.
			w.tracef("req %d att %d: connection dropped", r.n, att)
			return false, dropped(crng)
		}
		if err == nil {
			w.onAck(r, att, res, n)
			lost, wait := answerLost(crng) // the 201 lost on the way back
			return !lost, wait
		}
		w.onRefusal(r, att, err)
		wait := dropped(crng)
		if errors.Is(err, queue.ErrIntakePending) {
			wait = time.Second // Retry-After: 1
		}
		return false, wait
	})
}

func refusal(err error) string {
	switch {
	case errors.Is(err, queue.ErrIntakePending):
		return "intake_pending"
	case errors.Is(err, queue.ErrIntakeUnavailable):
		return "intake_unavailable"
	case errors.Is(err, queue.ErrStoreUnavailable):
		return "store_unavailable"
	case errors.Is(err, queue.ErrOverload):
		return "overload"
	case errors.Is(err, queue.ErrClosed):
		return "closed"
	case errors.Is(err, context.DeadlineExceeded):
		return "client timeout"
	}
	return "error"
}

func (w *world) onRefusal(r request, att int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tracefLocked("req %d att %d: 503 %s", r.n, att, refusal(err))
	if r.key != "" {
		ki := w.key(r.scope())
		if ki.firstRefusal.IsZero() {
			ki.firstRefusal = time.Now()
		}
	}
}

// key returns the dedupe key's record. REQUIRES: w.mu held.
func (w *world) key(scope string) *keyInfo {
	ki := w.keys[scope]
	if ki == nil {
		ki = &keyInfo{named: map[[16]byte]bool{}}
		w.keys[scope] = ki
	}
	return ki
}

// onAck records a 201 and checks what can be checked at the instant of the
// answer: rule 2 (a duplicate names a hook confirmed where it must be),
// rule 3 (one hook id per dedupe key) and rule 6 (seq → id never changes).
func (w *world) onAck(r request, att int, res queue.Result, n *node) {
	// Local durability of the named hook, read before taking w.mu. A
	// store that cannot be read at this instant (a fence's reopen in
	// progress, or failed: its open's flush met a failing fsync, F2) says
	// nothing either way: rule 8 checks the named hook, an ack like any
	// other, at the next checkpoint and after every crash.
	durable, readable := false, true
	if v, err := n.st.Get(store.HookIDKey(res.ID)); err != nil {
		readable = false
	} else if v != nil {
		if seq, ok := store.ParseU64(v); ok && seq <= n.q.Durable() {
			durable = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	kind := "201 new"
	if res.Duplicate {
		kind = "201 duplicate"
	}
	w.tracefLocked("req %d att %d: %s", r.n, att, kind)
	a := w.acks[res.ID]
	if a == nil {
		a = &ackInfo{body: r.body, source: r.source, key: r.scope(), dup: res.Duplicate, req: r.n}
		w.acks[res.ID] = a
	}
	if !res.Duplicate {
		if prev, ok := w.seqID[res.Seq]; ok && prev != res.ID {
			w.violateLocked("6", "req %d was acked under a seq that named another hook", r.n)
		}
		w.seqID[res.Seq] = res.ID
		w.noteSeqLocked(res.ID, res.Seq, "acked")
	}
	if res.Duplicate {
		delivered := w.fullyDeliveredLocked(res.ID, a.source)
		if readable && !durable && !delivered {
			w.violateLocked("2", "req %d got a 201 duplicate naming a hook (of req %d) that is not durable in the store", r.n, a.req)
		}
		// A hook every sink already has is past the promise: a crash
		// loses the pending set, and such a hook, reclaimed, is in
		// neither place for the republish to find. Its duplicate is right.
		if w.cfg.dual && !w.landed[res.ID] && !delivered {
			w.violateLocked("2", "req %d got a 201 duplicate naming a hook (of req %d) that is not in the intake log%s", r.n, a.req, w.debugf(n, res))
		}
	}
	if r.key != "" {
		ki := w.key(r.scope())
		if !res.Duplicate && !ki.firstRefusal.IsZero() && time.Since(ki.firstRefusal) > reconcileDeadline {
			// ADR section 3: past the deadline a stuck original releases its
			// key and the retry may become a second hook.
			ki.sanctioned = true
		}
		// Sanctioned too: every id named so far is lost in an accepted gap,
		// or (dual) its log half never landed — the stuck half of ADR
		// section 3, which a host loss can end before the deadline does.
		gap := len(ki.named) > 0
		for id := range ki.named {
			gap = gap && (w.excused[id] || (w.cfg.dual && !w.landed[id]))
		}
		// Checked where a second id is made: a 201 new. (A duplicate naming
		// another id that exists in both places creates nothing; seeds 573
		// and 674 show one after a torn cut — see docs/testing.md.)
		if !res.Duplicate && len(ki.named) > 0 && !ki.named[res.ID] && !ki.sanctioned && !gap {
			extra := ""
			if os.Getenv("SIM_DEBUG") != "" {
				for id := range ki.named {
					extra += fmt.Sprintf(" [named: hook of req %d landed=%v confirmed=%v]", w.acks[id].req, w.landed[id], w.confirmed[id])
				}
				extra += fmt.Sprintf(" [this: hook of req %d dup=%v landed=%v]", w.acks[res.ID].req, res.Duplicate, w.landed[res.ID])
			}
			w.violateLocked("3", "req %d: dedupe key %s answered with a second hook id%s", r.n, r.scope(), extra)
		}
		ki.named[res.ID] = true
	}
}

// debugf is extra detail for a violation while diagnosing (SIM_DEBUG=1).
func (w *world) debugf(n *node, res queue.Result) string {
	if os.Getenv("SIM_DEBUG") == "" {
		return ""
	}
	wm := uint64(0)
	if v, _ := n.st.Get(store.KeyIntakeSeq); v != nil {
		wm, _ = store.ParseU64(v)
	}
	ds, _ := n.q.Dual()
	return fmt.Sprintf(" [seq %d stored wm %d live wm %d attempted %v pending %d gen %d]", res.Seq, wm, ds.Watermark, w.attempted[res.ID], ds.Pending.Records, n.gen)
}
