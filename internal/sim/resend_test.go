package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ankusa/ankusa/internal/store"
)

// The resend class: an operator resends delivered hooks (POST
// /v1/hooks/{id}/resend: dispatch.Dispatcher.Resend) while the faults run.
// A resend answered with its resend id is a synced write the operator was
// told happened, so it is owed like a 201: checked by S below.
//
//   - S, an answered resend is not lost: after the drain, each sink it
//     named has been sent the hook again under its resend id (the
//     message's ReplayID), or holds its delivery dead-lettered (sink b
//     refuses some bodies for good). A host loss forgives the resends
//     answered before it (the resend is a local write: no log carries it,
//     and the backup restored may predate it).
//
// It draws from a stream of its own (seed, 0x7e5e), at each event instant
// of the main loop after the event, so that no draw of the other classes
// moved (EXCLUDE=resend is the simulator as it was before it). It needs a
// history (a resend takes a delivered hook that is still stored): the
// weight is 0 in a schedule without one.

// resendInfo is one resend the operator was answered for.
type resendInfo struct {
	req     int      // the acked request whose hook was resent
	id      [16]byte // the hook
	source  string
	sinks   []string // the sinks the resend named
	excused bool     // answered before a host loss
}

// operatorClass is the draws of one operator class (resend here, dlq and
// archivejob in dlqreplay_test.go): a weight 0–3 from a PCG stream of the
// class's own, so that adding the class moved no other draw; 0 when the
// class is left out or the schedule cannot serve it. Only the main
// goroutine draws from rng.
type operatorClass struct {
	weight int
	rng    *rand.Rand
}

// newOperatorClass draws the class's weight from stream (always, so that
// the stream is the same whether or not the class is on).
func newOperatorClass(seed, stream uint64, on bool) operatorClass {
	r := rand.New(rand.NewPCG(seed, stream))
	weight := r.IntN(4)
	if !on {
		weight = 0
	}
	return operatorClass{weight: weight, rng: r}
}

// fires draws whether the class acts at this event instant: a chance of
// weight/per (no draw at weight 0).
func (c operatorClass) fires(per int) bool {
	return c.weight > 0 && c.rng.IntN(per) < c.weight
}

// maybeResend is the class's draw at one event instant: with a chance of
// weight/8, one acked hook delivered to every sink of its source is
// resent to all of them. Acked requests are taken in request order (ids
// are not deterministic, requests are), one of them by the class's rng.
func (w *world) maybeResend() {
	if !w.resend.fires(8) {
		return
	}
	pick := w.resend.rng.Uint64()
	n := w.current()
	if n == nil || n.q.Stats().Fenced {
		return
	}
	w.mu.Lock()
	type cand struct {
		req    int
		id     [16]byte
		source string
	}
	var cs []cand
	for id, a := range w.acks {
		if !w.excused[id] && w.fullyDeliveredLocked(id, a.source) {
			cs = append(cs, cand{a.req, id, a.source})
		}
	}
	w.mu.Unlock()
	if len(cs) == 0 {
		return
	}
	// One of the last eight: the history keeps a delivered hook about a
	// second, so older ones are mostly swept (a resend of one is refused,
	// no such hook, and tells nothing).
	slices.SortFunc(cs, func(a, b cand) int { return a.req - b.req })
	c := cs[len(cs)-1-int(pick%uint64(min(8, len(cs))))]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	res, err := n.d.Resend(ctx, c.id, "")
	cancel()
	if err != nil || n.dead.Load() {
		// Refused, or the process died before the answer left it: nobody
		// was told it happened.
		w.tracef("resend of req %d: not answered (%v)", c.req, err)
		return
	}
	w.mu.Lock()
	w.resends[res.ResendID] = &resendInfo{req: c.req, id: c.id, source: c.source, sinks: res.Sinks}
	w.tracefLocked("resend of req %d answered: %d sinks", c.req, len(res.Sinks))
	w.injected.resent++
	w.mu.Unlock()
}

// noteResentLocked records a delivery made under a resend id. REQUIRES:
// w.mu held.
func (w *world) noteResentLocked(resendID, sinkID string) {
	if resendID == "" {
		return
	}
	got := w.resent[resendID]
	if got == nil {
		got = map[string]bool{}
		w.resent[resendID] = got
	}
	got[sinkID] = true
}

// excuseResendsLocked forgives the resends answered so far (a host loss).
// REQUIRES: w.mu held.
func (w *world) excuseResendsLocked() {
	for _, r := range w.resends {
		r.excused = true
	}
}

// unresent: S, after the drain. It returns the requests whose answered
// resend some sink has neither been sent nor holds dead-lettered.
func (w *world) unresent(n *node) (reqs []int, why map[string]int) {
	why = map[string]int{}
	w.mu.Lock()
	type owed struct {
		rid string
		r   resendInfo
	}
	var list []owed
	for rid, r := range w.resends {
		if r.excused || w.excused[r.id] {
			continue
		}
		for _, sk := range r.sinks {
			if !w.resent[rid][sk] {
				list = append(list, owed{rid, *r})
				break
			}
		}
	}
	w.mu.Unlock()
	for _, o := range list {
		v, err := n.st.Get(store.HookIDKey(o.r.id))
		seq, ok := store.ParseU64(v)
		if err != nil || !ok {
			reqs = append(reqs, o.r.req)
			why["hook gone"]++
			continue
		}
		reason := ""
		w.mu.Lock()
		got := w.resent[o.rid]
		w.mu.Unlock()
		for _, sk := range o.r.sinks {
			if got[sk] {
				continue
			}
			dv, _ := n.st.Get(store.DeliveryKey(seq, n.nums[store.SinkRef{Source: o.r.source, Sink: sk}]))
			dl, err := store.DecodeDelivery(dv)
			switch {
			case dv != nil && err == nil && dl.State == store.StateDead:
				continue
			case dv == nil:
				reason = "no delivery row"
			case err != nil:
				reason = "bad delivery row"
			case dl.ReplayID != o.rid:
				reason = "delivery row no longer tagged with the resend"
			default:
				reason = "not delivered"
			}
			break
		}
		if reason != "" {
			reqs = append(reqs, o.r.req)
			why[reason]++
		}
	}
	return reqs, why
}
