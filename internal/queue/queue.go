// Package queue is the commit path of a hook: the batcher in front, the one
// writer goroutine that assigns seqs and applies groups, and the syncer whose
// WAL fsync releases the callers.
//
// The ack protocol. This list is where each rule is stated; the code that
// keeps one, and every doc and test that relies on it, cites it as "ack
// rule N" (internal/sim numbers its own checked invariants separately,
// cited there as "rule N"):
//
//  1. A caller gets a success only from an fsync that started after the
//     group holding its record was applied (syncer.go). Pebble makes an
//     applied batch visible before it is durable, so "I can read it" never
//     means "it is safe"; durable_seq (Syncer.Durable) is the only truth.
//  2. The dedupe rows ride in the same batch as the hook (writer.putHook,
//     and under disk writer.apply's store.PutRowsByFamily; store.HookRows),
//     so a dedupe hit can never name a hook that is not in the store.
//  3. A duplicate answer waits for the fsync that covers the original
//     (writer.duplicate), so the duplicate of a hook still in flight is
//     never answered first.
//  4. Seqs are dense, assigned only by the writer, never reused: a group
//     that is undone after a failed fsync keeps its seqs consumed, and
//     m:next_seq rides in every batch (writer.apply) and in the fence's
//     cleanup.
//  5. After a failed fsync nothing more is acked until the groups no
//     successful fsync covered are deleted by a synced write on a reopened
//     DB (fence.go).
//  6. Readers that act on rows (dispatch) read only at or below
//     durable_seq: a row above it belongs to a group no fsync has covered
//     yet, which rule 5's fence may still delete.
//  7. A held (quarantined) hook is committed once, under its own id.
//     (a) A record that brings its id (Record.ID) is answered by the hook
//     holding it, if any: as a duplicate of a stored one or of one in its
//     group, and under dual, while a record with that id is unconfirmed
//     (in flight or carried, at any age), refused ErrIntakePending
//     (writer.idTaken). (b) The pen row it is released from (Record.Held)
//     is deleted in the batch that writes its hook's rows, by the writer
//     and by complete-local, and put back by the fence that undoes that
//     batch (writer.putHook, fence step 3). Boot recovery, which writes a
//     hook from its log record (naming no pen row), deletes the row its
//     envelope names in the chunk that writes the hook: a released hook
//     keeps the id and receive time it was held under, the pen row's key
//     (store.HeldRef; applier.write), and the boot recounts the open pen
//     (Summary.Unheld). So every writer of a hook's rows takes its pen
//     row with them, and a retried release never finds the pen row of a
//     hook that is committed or being carried to it, whether its local
//     half was written by the commit, complete-local or the replay after
//     a crash or a restore; the id row alone is no such proof, as the
//     hook's reclaim deletes it.
package queue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ankusa/ankusa/internal/store"
)

// Refusals a caller can get instead of a success. The edge maps them to
// 503 bodies; none of them means the hook was stored.
var (
	// ErrOverload: the batcher is full, or the record waited past its
	// deadline to start committing.
	ErrOverload = errors.New("queue: overload")
	// ErrStoreUnavailable: the store failed to make the record durable (a
	// failed write or fsync, or the fence that follows one).
	ErrStoreUnavailable = errors.New("queue: store unavailable")
	// ErrClosed: the queue is shutting down.
	ErrClosed = errors.New("queue: closed")
)

// SinkRef is one delivery obligation of a record: the store's own type,
// so a record's sinks become its delivery rows (store.HookRows) as they are.
type SinkRef = store.HookSink

// Record is one hook on its way into the store.
type Record struct {
	// ID is zero for a new hook (the batcher mints a UUIDv7); a released
	// quarantined hook keeps the id it was given when it was held. A hook
	// already holding the id answers the record (ack rule 7).
	ID [16]byte
	// Held, for a released quarantined hook, is the pen row it leaves (its
	// Value owned by the record): deleted in the batch that writes the
	// hook's rows, put back if that batch is undone (ack rule 7).
	Held        *store.PenRow
	ReceivedAt  time.Time
	Tenant      string
	Source      string
	ContentType string
	Headers     []store.Header
	Body        []byte
	// DedupeKey is empty when the source has no dedupe; DedupeTTL is then unused.
	DedupeKey string
	DedupeTTL time.Duration
	Flagged   bool
	Sinks     []SinkRef
	// BodySHA256 is sha256(Body) when HasBodySHA256: the edge hashes the
	// body on its request's goroutine, so the one writer goroutine does not
	// (at 256 KiB the hash was most of the writer's time per hook). Without
	// it the writer computes the sum.
	BodySHA256    [32]byte
	HasBodySHA256 bool
}

// size is what a record costs the batcher's byte bound.
func (r *Record) size() int64 {
	n := int64(len(r.Body) + len(r.ContentType) + len(r.DedupeKey) + 64)
	for _, h := range r.Headers {
		n += int64(len(h.Name) + len(h.Value))
	}
	return n
}

// Result is a success: the record (or the original it duplicates) is durable.
type Result struct {
	ID        [16]byte
	Seq       uint64
	Duplicate bool
}

// Observer receives the commit path's measurements. Every method must be
// cheap and must not block: it runs on the writer or syncer goroutine.
type Observer interface {
	Group(records, written int, apply time.Duration)
	Sync(d time.Duration, err error)
}

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) Group(int, int, time.Duration) {}
func (NopObserver) Sync(time.Duration, error)     {}

// Options configure a Queue (batcher.* config keys).
type Options struct {
	Partitions    int
	MaxBatch      int
	MaxDelay      time.Duration
	MaxQueue      int
	MaxQueueBytes int64
	// Deadline is how long a record may wait to start committing.
	Deadline time.Duration
	// SweepInterval and SweepBatch bound the expired-dedupe sweep; a zero
	// interval turns the background sweep off (tests call Sweep directly).
	SweepInterval time.Duration
	SweepBatch    int
	// FenceRetry is how long the fence waits between cleanup attempts.
	FenceRetry time.Duration

	Observer Observer
	// OnDurable is called (on the syncer goroutine; it must not block) each
	// time durable_seq rises, so dispatch wakes on commits instead of polling.
	OnDurable func()
	// OnCommitted, when set, receives the new hooks of each group once the
	// fsync that covers them returned (on the syncer goroutine, before
	// OnDurable; it must not block, and must not keep the slice, which the
	// writer reuses, though it may keep its elements): what dispatch
	// needs to deliver them without reading their rows back. Never called
	// for a group that was not made durable (ack rule 1). Under dual that
	// is the local half, whatever the log answers (the due scan delivers
	// such a hook as well); a record whose local half failed is written
	// later by complete-local and never handed over.
	OnCommitted func([]store.Committed)
	// Dual, when set, makes every group a dual commit (wal.type: dual).
	Dual *DualOptions
	// Logger for the writer and fence; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnFatal is called when the store cannot be reopened after a failure:
	// the node must stop so that its supervisor restarts it. Nil panics.
	OnFatal func(error)
}

func (o *Options) fill() {
	if o.Partitions <= 0 {
		o.Partitions = 2
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 10_000
	}
	if o.MaxQueueBytes <= 0 {
		o.MaxQueueBytes = 256 << 20
	}
	if o.Deadline <= 0 {
		o.Deadline = 15 * time.Second
	}
	if o.SweepBatch <= 0 {
		o.SweepBatch = 1000
	}
	if o.FenceRetry <= 0 {
		o.FenceRetry = 500 * time.Millisecond
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OnDurable == nil {
		o.OnDurable = func() {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnFatal == nil {
		o.OnFatal = func(err error) { panic(err) }
	}
}

// Queue is the commit path of one store.
type Queue struct {
	opts    Options
	st      *store.Store
	batcher *batcher
	writer  *writer
	syncer  *syncer

	cancel context.CancelFunc
	done   chan struct{}
}

// New builds a queue over st; it recovers next_seq and the counts from the
// store. Start must be called before Submit.
func New(st *store.Store, opts Options) (*Queue, error) {
	opts.fill()
	q := &Queue{opts: opts, st: st}
	q.batcher = newBatcher(&q.opts)
	q.syncer = newSyncer(st, &q.opts, q.batcher)
	w, err := newWriter(st, &q.opts, q.batcher, q.syncer)
	if err != nil {
		return nil, err
	}
	if opts.Dual != nil {
		if opts.Dual.Intake == nil {
			return nil, errors.New("queue: dual commit needs an intake")
		}
		w.dual = newDualState(*opts.Dual, q.batcher, q.opts.Logger, q.opts.Now)
		w.dual.spend = func(r []pendingReply) { q.syncer.spend(r, nil) } // before the writer runs
		if err := w.seedMarks(); err != nil {
			return nil, err
		}
	}
	q.writer = w
	return q, nil
}

// Reload reads next_seq and the counts back from the store again: boot
// recovery wrote hooks after New. REQUIRES: Start not yet called.
func (q *Queue) Reload() error {
	if err := q.writer.recover(); err != nil {
		return err
	}
	return q.writer.seedMarks()
}

// Start runs the writer and syncer goroutines until Close.
func (q *Queue) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	q.cancel = cancel
	q.done = make(chan struct{})
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); q.syncer.run() }()
	if d := q.writer.dual; d != nil && d.opts.ReconcileEvery > 0 {
		rec := &reconciler{w: q.writer, d: d}
		go rec.run(ctx)
	}
	var pubDone chan struct{}
	if d := q.writer.dual; d != nil {
		pubDone = make(chan struct{})
		go func() { defer close(pubDone); d.pub.run() }()
	}
	go func() {
		defer close(q.done)
		q.writer.run(ctx)
		if pubDone != nil {
			// Groups the writer issued are published before the stop
			// completes: their callers are answered, not abandoned.
			q.writer.dual.pub.stop()
			<-pubDone
		}
		// The syncer outlives the writer so that the last groups handed to
		// it are synced and answered rather than dropped.
		q.syncer.stop()
		<-syncDone
	}()
}

// Submit queues rec and blocks until it is durable or refused. If ctx ends
// first Submit returns ctx.Err(); the record may still be committed (the
// caller simply never learns it), exactly as when a client disconnects.
func (q *Queue) Submit(ctx context.Context, rec *Record) (Result, error) {
	it, err := q.batcher.add(rec, q.writer.fenced.Load())
	if err != nil {
		return Result{}, err
	}
	select {
	case r := <-it.reply:
		q.batcher.recycle(it) // P1: answered, so no one holds it now
		return r.res, r.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// ReleasesBody marks the promise the edge reuses body buffers on
// (edge.BodyReleaser): once Submit has returned anything but ctx.Err(),
// nothing in the queue references rec any more. The writer reads rec
// (encoding its body into the envelope, which the batch and the intake
// record own) before it answers, and nothing reads it after the answer.
func (*Queue) ReleasesBody() {}

// Reclaimed lowers the counters after dispatch removed fully delivered hooks.
func (q *Queue) Reclaimed(hooks, deliveries int) {
	q.writer.hooks.Add(^uint64(hooks - 1))
	q.writer.deliveries.Add(^uint64(deliveries - 1))
}

// Restored raises the counters after an archive replay wrote hooks back
// under their original seqs (dispatch archive.go).
func (q *Queue) Restored(hooks, deliveries int) {
	q.writer.hooks.Add(uint64(hooks))
	q.writer.deliveries.Add(uint64(deliveries))
}

// ReportStoreFailure fences the queue after a failure found outside the
// commit path (the readiness probe's synced write): the store must not be
// written again before the reopen and cleanup. Several reports make one fence.
func (q *Queue) ReportStoreFailure(err error) {
	select {
	case q.writer.fenceCh <- err:
	default:
	}
}

// Durable is the highest seq covered by a successful fsync.
func (q *Queue) Durable() uint64 { return q.syncer.durable.Load() }

// Stats is a consistent-enough view for /v1/wal and gauges.
type Stats struct {
	NextSeq    uint64
	DurableSeq uint64
	Hooks      uint64
	Deliveries uint64
	Queued     int64
	Fenced     bool
	// Fences counts failures that were fenced and cleaned up.
	Fences uint64
	// Syncs counts successful WAL fsyncs.
	Syncs uint64
}

// Stats reports the writer's counters.
func (q *Queue) Stats() Stats {
	return Stats{
		NextSeq:    q.writer.nextSeqPublic.Load(),
		DurableSeq: q.syncer.durable.Load(),
		Hooks:      q.writer.hooks.Load(),
		Deliveries: q.writer.deliveries.Load(),
		Queued:     q.batcher.records.Load(),
		Fenced:     q.writer.fenced.Load(),
		Fences:     q.writer.fences.Load(),
		Syncs:      q.syncer.syncs.Load(),
	}
}

// LastFailure is when the store last failed a write or fsync (zero if never).
func (q *Queue) LastFailure() time.Time {
	if ns := q.writer.lastFailure.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Sweep runs one expired-dedupe pass on the writer goroutine and returns
// how many keys it removed.
func (q *Queue) Sweep(ctx context.Context) (int, error) {
	return q.writer.requestSweep(ctx)
}

// Close stops accepting work, answers everything still queued with
// ErrClosed, and waits for the goroutines. Records already handed to the
// syncer are synced and answered first, so a clean stop acks what it can.
func (q *Queue) Close() {
	if q.cancel == nil {
		return
	}
	q.batcher.close()
	q.cancel()
	<-q.done
	// A clean stop leaves the watermark and offset as far as they honestly go.
	q.writer.flushMarks()
}

// Reconcile runs one reconciler pass now (tests, and the recover command).
func (q *Queue) Reconcile(ctx context.Context) {
	if d := q.writer.dual; d != nil {
		(&reconciler{w: q.writer, d: d}).pass(ctx)
	}
}

// DualStats is the intake side of /v1/wal, /ready and the metrics.
type DualStats struct {
	Node      string
	GateOpen  bool
	Ready     bool
	Watermark uint64
	Offset    int64
	// OffsetLag is how long since the stored offset last covered every
	// record the log confirmed (ankusa_intake_offset_lag_seconds).
	OffsetLag time.Duration
	Pending   PendingStats
}

// Dual reports the dual commit's state; ok is false under wal.type: disk.
func (q *Queue) Dual() (s DualStats, ok bool) {
	d := q.writer.dual
	if d == nil {
		return DualStats{}, false
	}
	wm, off := d.pending.marks(q.writer.nextSeqPublic.Load())
	return DualStats{
		Node: d.node, GateOpen: d.gate.open(), Ready: d.in.Ready(),
		Watermark: wm, Offset: int64(off),
		OffsetLag: max(0, q.opts.Now().Sub(time.Unix(0, d.caughtUpAt.Load()))),
		Pending:   d.pending.stats(q.opts.Now(), d.opts.ReconcileDeadline),
	}, true
}
