package sim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"time"

	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// The release class: quarantine holds and their release, the path of ack
// rule 7 (internal/queue/queue.go: a held hook is committed once, under its
// own id). A share of the providers' requests fail verification, as under
// verify.on_fail: quarantine, and are held in a quarantine.Pen over the
// node's store (202); a releaser, the replay job of kind quarantine
// (dispatch.stepRelease), releases them through the node's queue at seeded
// instants and again after every fault that may have left a step half
// done. Checked by Q, R and P (check_test.go).
//
// The class draws from streams of its own (seeded from the schedule's
// seed, apart from w.rng): adding it shifted no draw of the other classes,
// so a schedule run with -sim.exclude=release is the schedule the
// simulator ran before the class existed.

// holdReason is the reason every simulated hold gives (the edge's is the
// verifier's error).
const holdReason = "sim: signature mismatch"

// heldInfo is one hook the pen took (Hold returned nil).
type heldInfo struct {
	ackInfo              // body, source, req (no dedupe key: the sim's sources have no extractor)
	ref     store.PenRef // its pen row
	// answered: the provider saw the 202 (a hold whose process died before
	// the answer left is a row nobody was promised; R and P still count it).
	answered bool
	// lost: held after the last backup and gone with the host (hostLoss):
	// the pen lives on the local disk only, and no log carries it.
	lost bool
	// both: a boot found it stored and still held (boot recovery wrote it
	// from the log, which knows no pen rows, over a pen row a fence put
	// back or a restore brought back): ack rule 7's one exception. R names
	// it when the id then gets a second seq.
	both bool
}

// releaser is the schedule's replay job of kind quarantine. It runs on a
// goroutine of its own with its own rng (the main goroutine's draws stay
// the schedule's): a job starts at each seeded tick and at each kick
// (a boot, a failed fsync that fences, a reconciler's complete-local) and
// steps through the pen until a step says done; a step that errored is
// retried at the next tick of the job, as dispatch.stepRelease's job is.
type releaser struct {
	w     *world
	rng   *rand.Rand // this goroutine's only
	every time.Duration
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// jobTick is the replay job's tick (dispatch's replayTick): a failed step
// is tried again at the next one.
const jobTick = 100 * time.Millisecond

func newReleaser(w *world, seed uint64, weight int) *releaser {
	rl := &releaser{
		w: w, rng: rand.New(rand.NewPCG(seed, 0x4e1e)),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	if weight > 0 {
		rl.every = time.Duration(2400/weight) * time.Millisecond
	}
	return rl
}

// poke asks for a release job now. It never blocks: observers of the real
// code call it on the writer, syncer and reconciler goroutines.
func (rl *releaser) poke() {
	if rl == nil || rl.every == 0 {
		return
	}
	select {
	case rl.kick <- struct{}{}:
	default:
	}
}

// sleep waits d plus a seeded offset under a millisecond (every wake on an
// instant of its own, as the providers'); false if the releaser stopped.
func (rl *releaser) sleep(d time.Duration) bool {
	t := time.NewTimer(d + time.Duration(1+rl.rng.IntN(999))*time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-rl.stop:
		return false
	}
}

func (rl *releaser) run() {
	defer close(rl.done)
	for {
		t := time.NewTimer(time.Duration(300+rl.rng.IntN(int(rl.every/time.Millisecond))) * time.Millisecond)
		select {
		case <-rl.stop:
			t.Stop()
			return
		case <-t.C:
		case <-rl.kick:
			t.Stop()
		}
		if !rl.sleep(0) {
			return
		}
		rl.job(rl.stop)
	}
}

// halt stops the releaser and waits for its step in flight.
func (rl *releaser) halt() {
	if rl.every == 0 {
		return
	}
	close(rl.stop)
	<-rl.done
}

// job steps through the pen as a replay job does: from the start, up to
// 1–4 held hooks a step, until a step reports done with no error. It ends
// early when the node is down or dies under it (the next boot kicks a new
// job; the real job's stored cursor would resume where this one restarts,
// past rows that are gone either way). It returns whether it finished.
func (rl *releaser) job(stop <-chan struct{}) bool {
	w := rl.w
	var cursor []byte
	gen := 0
	until := time.Now().UnixMilli()
	for {
		select {
		case <-stop:
			return false
		default:
		}
		n := w.current()
		if n == nil {
			return false
		}
		if n.gen != gen {
			cursor, gen = nil, n.gen
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		moved, skipped, next, done, err := n.rel.Release(ctx, "", cursor, until, 1+rl.rng.IntN(4))
		cancel()
		if n.dead.Load() {
			return false
		}
		switch {
		case err != nil:
			w.tracef("release step: moved=%d skipped=%d failed: %s", moved, skipped, releaseRefusal(err))
		case moved > 0 || skipped > 0:
			w.tracef("release step: moved=%d skipped=%d done=%v", moved, skipped, done)
		}
		if next != nil {
			cursor = next // stepRelease saves it, failed step or not
		}
		if done && err == nil {
			return true
		}
		wait := time.Duration(0)
		if err != nil {
			wait = jobTick
		}
		if !rl.sleep(wait) {
			return false
		}
	}
}

func releaseRefusal(err error) string {
	if _, ok := queue.Carried(err); ok {
		return "carried " + refusal(err)
	}
	if errors.Is(err, store.ErrClosed) {
		return "store closed"
	}
	return refusal(err)
}

// releaseRest is the operator's release once every fault healed: one job
// to the end, on the main goroutine (the releaser is stopped). A job that
// cannot finish in 30 s is Q's: a held hook the pen cannot let go.
func (w *world) releaseRest() {
	if w.cfg.release == 0 {
		return
	}
	w.rel.halt()
	never := make(chan struct{})
	for range 300 {
		if w.rel.job(never) {
			w.tracef("release job done")
			return
		}
		time.Sleep(jobTick)
	}
	w.violate("Q", "the release job did not finish 30 s after every fault healed")
}

// holdSources are the node's sources as the releaser sees them: the sim's
// routes, no verifier (the operator fixed the secret), no dedupe.
func holdSources(nums map[store.SinkRef]uint16) func(string) (*edge.Source, bool) {
	srcs := map[string]*edge.Source{}
	for _, id := range sourceNames {
		s := &edge.Source{ID: id, OnFailure: edge.OnFailureQuarantine}
		for _, sk := range sources[id] {
			s.Sinks = append(s.Sinks, queue.SinkRef{Num: nums[store.SinkRef{Source: id, Sink: sk}], ID: sk})
		}
		srcs[id] = s
	}
	return func(id string) (*edge.Source, bool) {
		s, ok := srcs[id]
		return s, ok
	}
}

// heldEnvelope is what the edge's quarantine() holds for one attempt: a
// new id each time (drawn from the provider's rng, in UUIDv7 layout, so
// that the pen's key order replays), the receive time, the body.
func heldEnvelope(r request, crng *rand.Rand) *store.Envelope {
	now := time.Now()
	var id [16]byte
	binary.BigEndian.PutUint64(id[:8], uint64(now.UnixMilli())<<16|uint64(crng.IntN(1<<12)))
	binary.BigEndian.PutUint64(id[8:], crng.Uint64())
	id[6] = 0x70 | id[6]&0x0f
	id[8] = 0x80 | id[8]&0x3f
	return &store.Envelope{
		ID: id, ReceivedAt: now.UnixNano(), Tenant: r.tenant, Source: r.source,
		ContentType: "application/json", Body: r.body, SHA256: sha256.Sum256(r.body),
	}
}

// holder is a provider whose hook fails verification: the edge holds it
// and answers 202, which the provider takes as delivered. Like client it
// retries after a 503, a dropped connection or a lost answer, up to six
// attempts; each attempt is a new hold under a new id, as at the edge.
func (w *world) holder(r request, crng *rand.Rand) {
	w.provide(r, crng, func(n *node, att int) (bool, time.Duration) {
		env := heldEnvelope(r, crng)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.pen.Hold(ctx, env, holdReason)
		cancel()
		dead := n.dead.Load()
		if err == nil {
			w.onHeld(r, att, env, !dead)
		}
		if dead {
			w.tracef("req %d att %d: connection dropped", r.n, att)
			return false, dropped(crng)
		}
		if err == nil {
			lost, wait := answerLost(crng) // the 202 lost on the way back
			return !lost, wait
		}
		w.tracef("req %d att %d: hold refused: %s", r.n, att, releaseRefusal(err))
		if pv, perr := n.st.ReadPen(store.HeldRef(env)); perr == nil && pv != nil {
			// A failed ApplySync may leave its batch applied: the row is
			// there until the pen's next clean deletes it (P watches the
			// counters meanwhile).
			w.onHeld(r, att, env, false)
			w.mu.Lock()
			w.leftRows++
			w.mu.Unlock()
		}
		return false, dropped(crng)
	})
}

func (w *world) onHeld(r request, att int, env *store.Envelope, answered bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if answered {
		w.tracefLocked("req %d att %d: 202 quarantined", r.n, att)
	}
	w.held[env.ID] = &heldInfo{
		ackInfo:  ackInfo{body: r.body, source: r.source, req: r.n},
		ref:      store.HeldRef(env),
		answered: answered,
	}
}

// excuseHeldLost runs after a host loss's boot: a 202 whose hook is neither
// in the restored pen nor stored (after recovery's replay) nor delivered
// to every sink died with the host: it was held after the last backup (or
// with none), or released by a commit that had not reached the log. A held
// hook lives on the local disk only (no log carries a hold) until its
// release is in the log, so this is the pen's limit, not rule 7's
// concern; the count is traced (docs/testing.md, Simulation).
func (w *world) excuseHeldLost(n *node) {
	lost := 0
	for _, hr := range w.heldRows(n, func(id [16]byte, h *heldInfo) bool {
		return h.answered && !h.lost && !w.fullyDeliveredLocked(id, h.source)
	}) {
		if os.Getenv("SIM_DEBUG") != "" {
			w.tracef("debug: after the host loss req %d: pen row %v, id row %v (%v)", hr.h.req, hr.pen, hr.hook, hr.err)
		}
		if hr.err == nil && !hr.pen && !hr.hook {
			lost++
			w.mu.Lock()
			hr.h.lost = true
			w.mu.Unlock()
		}
	}
	if lost > 0 {
		w.tracef("host loss took %d held hooks (202) the restored pen lacks", lost)
	}
}

// heldRow is what n's store holds of one held hook: its pen row, its id
// row (err: a read failed, and neither says anything).
type heldRow struct {
	h         *heldInfo
	pen, hook bool
	err       error
}

// heldRows reads what n's store holds of every held hook keep admits
// (keep runs under w.mu; the reads do not).
func (w *world) heldRows(n *node, keep func(id [16]byte, h *heldInfo) bool) []heldRow {
	w.mu.Lock()
	var check []*heldInfo
	for id, h := range w.held {
		if keep(id, h) {
			check = append(check, h)
		}
	}
	w.mu.Unlock()
	out := make([]heldRow, 0, len(check))
	for _, h := range check {
		pv, err := n.st.ReadPen(h.ref)
		iv, err2 := n.st.Get(store.HookIDKey(h.ref.ID))
		out = append(out, heldRow{h: h, pen: pv != nil, hook: iv != nil, err: errors.Join(err, err2)})
	}
	return out
}

// releaseQueue is the node's queue as the releaser commits through it
// (quarantine.Submitter): it notes each commit's seq for R, as onAck does
// for a provider's 201.
type releaseQueue struct {
	w *world
	n *node
}

// MayUndo and FenceEpoch are the queue's (quarantine.Finality), as
// the app's release has them.
func (s releaseQueue) MayUndo(id [16]byte) bool { return s.n.q.MayUndo(id) }
func (s releaseQueue) FenceEpoch() uint64       { return s.n.q.FenceEpoch() }

func (s releaseQueue) Submit(ctx context.Context, rec *queue.Record) (queue.Result, error) {
	res, err := s.n.q.Submit(ctx, rec)
	if s.n.dead.Load() {
		return res, err // nobody hears a dead process's answer
	}
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if os.Getenv("SIM_DEBUG") != "" {
		req := 0
		if h := w.held[rec.ID]; h != nil {
			req = h.req
		}
		w.tracefLocked("debug: release of req %d: seq %d duplicate %v err %v", req, res.Seq, res.Duplicate, err)
	}
	if err == nil && !res.Duplicate {
		w.noteSeqLocked(res.ID, res.Seq, "committed")
	}
	return res, err
}

// noteHeldAndStored runs at each boot, after recovery and before dispatch
// starts: it marks the held hooks the store holds both as a hook and as a
// pen row (heldInfo.both), and traces how many.
func (w *world) noteHeldAndStored(n *node) {
	both := 0
	for _, hr := range w.heldRows(n, func([16]byte, *heldInfo) bool { return true }) {
		if hr.err == nil && hr.pen && hr.hook {
			both++
			w.mu.Lock()
			hr.h.both = true
			w.mu.Unlock()
		}
	}
	if both > 0 {
		w.tracef("boot: %d held hooks are stored and still in the pen", both)
	}
}

// simObserver pokes the releaser at a failed WAL fsync: a fence follows,
// and a release step run across it is the path ack rule 7 (b) keeps.
type simObserver struct{ w *world }

func (simObserver) Group(int, int, time.Duration) {}

func (o simObserver) Sync(_ time.Duration, err error) {
	if err != nil {
		o.w.rel.poke()
	}
}

// simDualObserver pokes the releaser when the reconciler wrote a carried
// record's local half (complete-local): the step retried after it is the
// one the defect of ack rule 7 (a) committed twice.
type simDualObserver struct {
	queue.NopDualObserver
	w *world
}

func (o simDualObserver) IntakeReconciled(half string) {
	if half == "local" {
		o.w.rel.poke()
	}
}

var (
	_ queue.Observer     = simObserver{}
	_ queue.DualObserver = simDualObserver{}
	_ edge.Quarantine    = (*quarantine.Pen)(nil)
)
