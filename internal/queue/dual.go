package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/store"
)

// Refusals of wal.type: dual. Neither means the hook was stored as acked.
var (
	// ErrIntakeUnavailable: the log did not confirm (the record is carried),
	// or the gate is open, the pending set is full, or the record is too
	// large (refused before any seq). 503 with intake.retry_after_s.
	ErrIntakeUnavailable = errors.New("queue: intake unavailable")
	// ErrIntakePending: a retry met an original that is not yet confirmed in
	// both places. 503 with Retry-After: 1 — never a 201 duplicate.
	ErrIntakePending = errors.New("queue: intake pending")
)

// envelopeOverhead bounds what an envelope adds to a record's size.
const envelopeOverhead = 256

// DualOptions configure wal.type: dual.
type DualOptions struct {
	Intake            intake.Intake
	Node              string
	Incarnation       string
	PublishTimeout    time.Duration
	ReconcileDeadline time.Duration
	BreakerFailures   int
	Probe             time.Duration
	OffsetFlush       time.Duration
	PendingMaxRecords int
	PendingMaxBytes   int64
	MaxRecordBytes    int64
	// ReconcileEvery is the reconciler's pace; default 50 ms. Negative: no
	// background reconciler (tests drive Queue.Reconcile themselves).
	ReconcileEvery time.Duration
	Observer       DualObserver
}

// DualObserver receives the dual commit's measurements; must not block.
type DualObserver interface {
	IntakePublish(d time.Duration, class string) // "ok" or an intake.Class name
	IntakeRefused(reason string)                 // breaker | backlog | pending_dedupe | record_too_large
	IntakeReconciled(half string)                // local | log
}

// NopDualObserver ignores everything.
type NopDualObserver struct{}

func (NopDualObserver) IntakePublish(time.Duration, string) {}
func (NopDualObserver) IntakeRefused(string)                {}
func (NopDualObserver) IntakeReconciled(string)             {}

// Meta keys of the intake (ADR section 7).
var (
	KeyIntakeSeq    = []byte("m:intake_seq")
	KeyIntakeOffset = []byte("m:intake_offset")
)

// dualState is the writer's dual-commit machinery.
type dualState struct {
	in          intake.Intake
	node        string
	incarnation string
	opts        DualOptions
	gate        *gate
	pending     *pendingSet
	maxRecord   int64
	unavailable error
	obs         DualObserver
	answer      func(*item, outcome)
	log         *slog.Logger
	now         func() time.Time
	wakeRec     chan struct{} // capacity 1
	pub         *publisher
	// passMu makes reconciler passes one at a time, so a record is never
	// republished by two passes at once.
	passMu sync.Mutex
	// holdUntil (unix ns) is when the reconciler may publish again after a
	// throttled answer, whoever got it.
	holdUntil atomic.Int64
	// lastWarn (unix ns) rate-limits the reconciler's failure logs.
	lastWarn atomic.Int64
	// caughtUpAt (unix ns) is when the stored offset last covered every
	// record the log had confirmed: ankusa_intake_offset_lag_seconds is
	// the time since. A healthy node catches up at every offset flush; a
	// record held in the log only (its local half failing) holds it back.
	caughtUpAt atomic.Int64
}

// hold defers republishing after a throttled answer.
func (d *dualState) hold(err error) {
	if c, ra := intake.ClassOf(err); c == intake.Throttled && ra > 0 {
		until := d.now().Add(ra).UnixNano()
		for {
			cur := d.holdUntil.Load()
			if cur >= until || d.holdUntil.CompareAndSwap(cur, until) {
				return
			}
		}
	}
}

// warn logs a reconciler failure at most every 30 s: a stuck record is
// retried every pass and must not flood the log.
func (d *dualState) warn(msg string, args ...any) {
	now := d.now().UnixNano()
	last := d.lastWarn.Load()
	if now-last < int64(30*time.Second) || !d.lastWarn.CompareAndSwap(last, now) {
		return
	}
	d.log.Warn(msg, args...)
}

func newDualState(o DualOptions, b *batcher, log *slog.Logger, now func() time.Time) *dualState {
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 2 * time.Second
	}
	if o.ReconcileDeadline <= 0 {
		o.ReconcileDeadline = 20 * time.Second
	}
	if o.Probe <= 0 {
		o.Probe = time.Second
	}
	if o.OffsetFlush <= 0 {
		o.OffsetFlush = time.Second
	}
	if o.PendingMaxRecords <= 0 {
		o.PendingMaxRecords = 50_000
	}
	if o.PendingMaxBytes <= 0 {
		o.PendingMaxBytes = 256 << 20
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = 10_000_000
	}
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = 50 * time.Millisecond
	}
	if o.Observer == nil {
		o.Observer = NopDualObserver{}
	}
	d := &dualState{
		in: o.Intake, node: o.Node, incarnation: o.Incarnation, opts: o,
		gate:    newGate(o.BreakerFailures, o.Probe),
		pending: newPendingSet(o.PendingMaxRecords, o.PendingMaxBytes), maxRecord: o.MaxRecordBytes,
		unavailable: ErrIntakeUnavailable, obs: o.Observer, answer: b.answer,
		log: log.With("component", "intake"), now: now, wakeRec: make(chan struct{}, 1),
	}
	d.pub = newPublisher(d)
	d.caughtUpAt.Store(now().UnixNano())
	return d
}

// seedMarks starts the offset at the stored m:intake_offset (boot, and
// again after a boot replay moved it), so the node reports where its store
// stands instead of -1 until the next publish. Every position up to the
// stored offset is in the store (the row's invariant), so it is a valid
// floor for the offset.
func (w *writer) seedMarks() error {
	if w.dual == nil {
		return nil
	}
	v, err := w.st.Get(KeyIntakeOffset)
	if err != nil {
		return fmt.Errorf("read %s: %w", KeyIntakeOffset, err)
	}
	if n, ok := store.ParseU64(v); ok {
		p := w.dual.pending
		p.mu.Lock()
		p.completePos = max(p.completePos, intake.Position(n))
		p.mu.Unlock()
	}
	w.dual.caughtUpAt.Store(w.dual.now().UnixNano())
	return nil
}

// confirmedHead is the highest position the log confirmed to this process:
// complete records and those held in the log only. -1 when none.
func (p *pendingSet) confirmedHead() intake.Position {
	p.mu.Lock()
	defer p.mu.Unlock()
	head := p.completePos
	for _, e := range p.bySeq {
		if e.logDone && e.pos > head {
			head = e.pos
		}
	}
	return head
}

// dualGroup joins the two halves of one group (ADR section 2): the local
// apply+fsync (from the syncer) and the publish (from its goroutine). The
// callers are answered once both are known, so an ack never precedes the
// local fsync even when the log confirmed first, and costs max(fsync,
// confirm), not their sum.
type dualGroup struct {
	d       *dualState
	replies []pendingReply
	entries []*pendingEntry // parallel to replies; nil for an in-group duplicate

	mu               sync.Mutex
	localIn, logIn   bool
	localErr, logErr error
	positions        []intake.Position // per record, when the log confirmed
}

// begin registers the group's entries and starts its publish.
func (d *dualState) begin(replies []pendingReply, entries []*pendingEntry) *dualGroup {
	g := &dualGroup{d: d, replies: replies, entries: entries}
	var recs []intake.Record
	var live []*pendingEntry
	for _, e := range entries {
		if e != nil {
			recs = append(recs, e.rec)
			live = append(live, e)
		}
	}
	d.pending.add(live)
	d.pub.submit(pubJob{g: g, recs: recs})
	return g
}

// maxPublishRecords bounds one merged publish.
const maxPublishRecords = 2048

// maxPublishesInFlight lets the next merged publish start while earlier
// ones await their confirms (ADR section 2: several groups may await
// confirmation at once), so a caller does not wait a whole confirm for the
// publish ahead of it. Readers dedupe by (node, seq), so the log's order
// across concurrent publishes does not matter.
const maxPublishesInFlight = 4

type pubJob struct {
	g    *dualGroup
	recs []intake.Record
}

// publisher is the log half's group commit, the syncer's twin: one publish
// carries the records of every group applied while the previous publish
// was in flight. Without it every group paid a confirm of its own, and a
// closed loop of C clients saw groups of one or two records, capped by one
// log round trip per hook.
type publisher struct {
	d        *dualState
	slots    chan struct{}
	inflight sync.WaitGroup
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []pubJob // REQUIRES: mu held
	stopping bool     // REQUIRES: mu held
}

func newPublisher(d *dualState) *publisher {
	p := &publisher{d: d, slots: make(chan struct{}, maxPublishesInFlight)}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *publisher) submit(j pubJob) {
	p.mu.Lock()
	p.queue = append(p.queue, j)
	p.mu.Unlock()
	p.cond.Signal()
}

// stop publishes what is queued, then ends run.
func (p *publisher) stop() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *publisher) run() {
	defer p.inflight.Wait()
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.stopping {
			p.cond.Wait()
		}
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		// A free slot first: while all are busy, groups keep merging.
		p.slots <- struct{}{}
		p.mu.Lock()
		// Whole groups only: a group's callers are answered from one outcome.
		n, recs := 0, 0
		for n < len(p.queue) && (n == 0 || recs+len(p.queue[n].recs) <= maxPublishRecords) {
			recs += len(p.queue[n].recs)
			n++
		}
		jobs := append([]pubJob(nil), p.queue[:n]...)
		rest := copy(p.queue, p.queue[n:])
		clear(p.queue[rest:])
		p.queue = p.queue[:rest]
		p.mu.Unlock()

		p.inflight.Add(1)
		go func() {
			defer func() { <-p.slots; p.inflight.Done() }()
			p.publish(jobs, recs)
		}()
	}
}

func (p *publisher) publish(jobs []pubJob, recs int) {
	all := make([]intake.Record, 0, recs)
	for _, j := range jobs {
		all = append(all, j.recs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.d.opts.PublishTimeout)
	start := time.Now()
	pos, err := publish(ctx, p.d.in, all)
	cancel()
	p.d.observePublish(time.Since(start), err)
	off := 0
	for _, j := range jobs {
		var jp []intake.Position
		if err == nil {
			jp = pos[off : off+len(j.recs)]
		}
		off += len(j.recs)
		j.g.log(jp, err)
	}
}

func (d *dualState) observePublish(dur time.Duration, err error) {
	class := "ok"
	if err != nil {
		c, _ := intake.ClassOf(err)
		class = c.String()
	}
	d.obs.IntakePublish(dur, class)
}

func (g *dualGroup) local(err error) {
	g.mu.Lock()
	g.localIn, g.localErr = true, err
	both := g.logIn
	g.mu.Unlock()
	if both {
		g.resolve()
	}
}

func (g *dualGroup) log(pos []intake.Position, err error) {
	g.mu.Lock()
	g.logIn, g.logErr, g.positions = true, err, pos
	both := g.localIn
	g.mu.Unlock()
	if both {
		g.resolve()
	}
}

// resolve answers the callers from the pair of outcomes (ADR section 3).
// A record whose halves did not both succeed stays in the pending set,
// carried: the reconciler completes it; nothing is undone.
func (g *dualGroup) resolve() {
	d := g.d
	d.gate.result(g.logErr == nil, d.now())
	if g.logErr != nil {
		d.hold(g.logErr)
	}
	carried := false
	d.pending.mu.Lock()
	i := 0
	for _, e := range g.entries {
		if e == nil {
			continue
		}
		e.inflight = false
		if g.localErr == nil {
			e.localDone = true
		}
		if g.logErr == nil {
			e.logDone = true
			e.pos = g.positions[i]
		}
		if !d.pending.settleLocked(e) {
			carried = true
		}
		i++
	}
	d.pending.mu.Unlock()
	var err error
	switch {
	case g.localErr != nil && errors.Is(g.localErr, ErrStoreUnavailable):
		err = g.localErr // the syncer already said so
	case g.localErr != nil:
		err = fmt.Errorf("%w: %w", ErrStoreUnavailable, g.localErr)
	case g.logErr != nil:
		err = fmt.Errorf("%w: %w", ErrIntakeUnavailable, g.logErr)
	}
	for _, r := range g.replies {
		if err != nil {
			// Every record of the group exists in one half (or is an in-group
			// duplicate of one that does): carried, not refused.
			d.answer(r.it, outcome{err: &CarriedError{ID: r.res.ID, Err: err}})
		} else {
			d.answer(r.it, outcome{res: r.res})
		}
	}
	if carried {
		d.wakeReconciler()
	}
}

func (d *dualState) wakeReconciler() {
	select {
	case d.wakeRec <- struct{}{}:
	default:
	}
}

// positioner is implemented by adapters whose log may be shared by several
// nodes (a JetStream stream; a Kafka partition two node ids hash to): a
// batch's positions then have gaps, and only the adapter knows each one.
type positioner interface {
	PublishBatchPositions(ctx context.Context, recs []intake.Record) ([]intake.Position, error)
}

// publish returns every record's position. The offset must never pass a
// record that is only in the log, so a position may be a lower bound but
// never above the record's real one.
func publish(ctx context.Context, in intake.Intake, recs []intake.Record) ([]intake.Position, error) {
	if p, ok := in.(positioner); ok {
		return p.PublishBatchPositions(ctx, recs)
	}
	// An adapter without per-record positions confirms a batch at
	// contiguous positions ending at the last one (the memory log: one file
	// per node).
	last, err := in.PublishBatch(ctx, recs)
	if err != nil {
		return nil, err
	}
	out := make([]intake.Position, len(recs))
	for i := range out {
		out[i] = last - intake.Position(len(recs)-1-i)
	}
	return out, nil
}

// localRequest asks the writer to complete local halves.
type localRequest struct {
	entries []*pendingEntry
	reply   chan error
}

// completeLocal writes the local half of carried records whose local write
// failed (ADR section 7, :half_log): a point read first — the row may have
// landed after all — then the held ops in one synced batch. Runs on the
// writer goroutine, so it is ordered after any fence cleanup that removed
// the failed group's rows.
func (w *writer) completeLocal(es []*pendingEntry) error {
	if w.fenced.Load() {
		return ErrStoreUnavailable
	}
	b := w.st.NewBatch()
	if b.Err() != nil {
		return store.ErrClosed
	}
	defer b.Close()
	var written []*pendingEntry
	var present []*pendingEntry
	deliveries := uint64(0)
	for _, e := range es {
		v, err := w.st.Get(store.HookKey(e.seq))
		if err != nil {
			return err
		}
		if v != nil {
			present = append(present, e)
			continue
		}
		for _, o := range e.ops {
			_ = b.Set(o.k, o.v, nil)
			if len(o.k) > 0 && o.k[0] == store.PrefixDelivery {
				deliveries++
			}
		}
		written = append(written, e)
	}
	if len(written) == 0 && len(present) > 0 {
		// A row found present may be one a failed synced write left in the
		// page cache: make it durable before calling the half done.
		if err := w.st.SyncWAL(); err != nil {
			w.fenceAfterReply(err)
			return err
		}
	}
	if len(written) > 0 {
		if err := w.st.ApplySync(b); err != nil {
			w.fenceAfterReply(err)
			return err
		}
		w.hooks.Add(uint64(len(written)))
		w.deliveries.Add(deliveries)
		w.opts.OnDurable()
	}
	p := w.dual.pending
	p.mu.Lock()
	for _, e := range append(written, present...) {
		e.localDone = true
		p.settleLocked(e)
	}
	p.mu.Unlock()
	for range written {
		w.dual.obs.IntakeReconciled("local")
	}
	return nil
}

// fenceAfterReply is the fence of a write that failed inside a request
// someone waits on (completeLocal, asked by the reconciler): step 1 at once
// — nothing is acked, the syncer starts no fsync — and the rest (reopen,
// cleanup, retried for as long as the disk fails) on the writer loop once
// the request is answered, so the reconciler's pass and the log halves
// after it are not held by the disk.
func (w *writer) fenceAfterReply(err error) {
	w.fenced.Store(true)
	w.s.enterFence()
	select {
	case w.fenceCh <- err:
	default: // a fence is already pending; it covers this failure too
	}
}

// flushMarks writes the watermark and offset (not synced: a lagging mark
// costs redundant republishes, never a hook).
func (w *writer) flushMarks() {
	if w.dual == nil || w.fenced.Load() {
		return
	}
	head := w.dual.pending.confirmedHead()
	wm, off := w.dual.pending.marks(w.nextSeq)
	b := w.st.NewBatch()
	if b.Err() != nil {
		return // the store is closed
	}
	defer b.Close()
	_ = b.Set(KeyIntakeSeq, store.U64(wm), nil)
	if off >= 0 {
		_ = b.Set(KeyIntakeOffset, store.U64(uint64(off)), nil)
	}
	if err := w.st.Apply(b); err != nil {
		w.fence(context.Background(), err)
		return
	}
	if off >= head {
		w.dual.caughtUpAt.Store(w.dual.now().UnixNano())
	}
}

// reconciler completes carried records (ADR section 7): half_local by
// republishing, half_log by a point read and a re-apply, both_pending local
// first. It never drops a record; a permanent class marks it stuck and keeps
// retrying.
type reconciler struct {
	w *writer
	d *dualState
}

func (r *reconciler) run(ctx context.Context) {
	t := time.NewTicker(r.d.opts.ReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.d.wakeRec:
		}
		if r.d.now().UnixNano() < r.d.holdUntil.Load() {
			continue
		}
		r.pass(ctx)
	}
}

// pass does one round; it returns when to try again at the earliest (a
// throttled log's Retry-After).
func (r *reconciler) pass(ctx context.Context) time.Time {
	r.d.passMu.Lock()
	defer r.d.passMu.Unlock()
	r.d.pending.releaseStuckClaims(r.d.now(), r.d.opts.ReconcileDeadline)
	es := r.d.pending.carried()
	if len(es) == 0 {
		return time.Time{}
	}
	var needLocal, needLog []*pendingEntry
	r.d.pending.mu.Lock()
	for _, e := range es {
		if !e.localDone {
			needLocal = append(needLocal, e)
		} else if !e.logDone {
			needLog = append(needLog, e)
		}
	}
	r.d.pending.mu.Unlock()
	if len(needLocal) > 0 {
		// A fenced writer is busy reopening and cleaning up for as long as
		// the store fails: asking it now would hold this pass (and the log
		// halves below) hostage to the disk. The local half waits for a
		// later pass; the log half goes ahead.
		if !r.w.fenced.Load() {
			req := localRequest{entries: needLocal, reply: make(chan error, 1)}
			select {
			case r.w.localReq <- req:
				select {
				case err := <-req.reply:
					if err != nil {
						r.d.warn("reconciler: local half still failing", "records", len(needLocal), "err", err)
					}
				case <-ctx.Done():
					return time.Time{} // the reply is buffered: the writer never blocks on it
				}
			case <-ctx.Done():
				return time.Time{}
			}
		}
		// Local first (it makes the hook deliverable), then the log half of
		// the both-pending ones in the same pass — also when the local half
		// failed again: a record the log holds is safe from the loss of
		// this host, and the local half follows once the store is back.
		r.d.pending.mu.Lock()
		for _, e := range needLocal {
			if !e.logDone {
				needLog = append(needLog, e)
			}
		}
		r.d.pending.mu.Unlock()
	}
	for len(needLog) > 0 {
		n := min(len(needLog), 256)
		chunk := needLog[:n]
		needLog = needLog[n:]
		recs := make([]intake.Record, n)
		for i, e := range chunk {
			recs[i] = e.rec
		}
		pctx, cancel := context.WithTimeout(ctx, r.d.opts.PublishTimeout)
		start := time.Now()
		pos, err := publish(pctx, r.d.in, recs)
		cancel()
		r.d.observePublish(time.Since(start), err)
		if err == nil {
			// A confirmed republish shows the log is back; a failed one is
			// not counted, so the gate's probe accounting stays the commit
			// path's own.
			r.d.gate.result(true, r.d.now())
		}
		if err != nil {
			r.d.hold(err)
			class, retryAfter := intake.ClassOf(err)
			if class == intake.Permanent || class == intake.NotFound {
				r.d.pending.mu.Lock()
				for _, e := range chunk {
					e.stuck = true
				}
				r.d.pending.mu.Unlock()
			}
			r.d.warn("reconciler: republish failed; will retry", "records", n, "class", class.String(), "err", err)
			if class == intake.Throttled && retryAfter > 0 {
				return r.d.now().Add(retryAfter)
			}
			return time.Time{}
		}
		r.d.pending.mu.Lock()
		for i, e := range chunk {
			e.logDone, e.stuck = true, false
			e.pos = pos[i]
			r.d.pending.settleLocked(e)
		}
		r.d.pending.mu.Unlock()
		for range chunk {
			r.d.obs.IntakeReconciled("log")
		}
	}
	return time.Time{}
}
