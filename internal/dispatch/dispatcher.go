// Package dispatch delivers every durable hook to every sink of its source,
// at least once: due scan, claim, bounded concurrent delivery, outcome
// recording with retries and a dead-letter queue, per-sink breakers, replay
// jobs and the reclaim of fully delivered hooks.
//
// One goroutine (run) owns every dispatch write — claims, outcomes,
// reclaims, replay moves — so no two writers race on a delivery row. The
// queue's writer only ever creates rows for new seqs; dispatch only touches
// rows at or below durable_seq (ack rule 6, internal/queue: Pebble shows a
// row before it is durable, and a row of a group that is later undone must
// never be delivered).
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
)

// Observer receives dispatch measurements; methods must not block.
type Observer interface {
	// Delivery: result is delivered | retry | dead; sink is the configured sink id.
	Delivery(sinkID, result string, d time.Duration)
}

type nopObserver struct{}

func (nopObserver) Delivery(string, string, time.Duration) {}

// Target is one configured sink.
type Target struct {
	ID   string // the sink id within its source
	Sink sink.Sink
}

// Options configure a Dispatcher.
type Options struct {
	Concurrency      int
	MaxInflight      int
	MaxInflightBytes int64
	AttemptTimeout   time.Duration
	ScanBatch        int
	Poll             time.Duration
	BreakerFailures  int
	BreakerCooldown  time.Duration
	Retry            RetryPolicy

	// Targets maps the store's sink numbers to sinks.
	Targets map[uint16]Target
	// Durable is the queue's durable_seq: nothing above it is delivered.
	Durable func() uint64
	// OnReclaim tells the queue's counters how many hooks and delivery rows
	// were removed.
	OnReclaim func(hooks, deliveries int)
	// OnStoreFailure, if set, is told when a write of the dispatcher's
	// failed because the store's generation failed (Dispatcher.apply): the
	// app fences the queue with it, which reopens the store.
	OnStoreFailure func(error)
	// Release, when set, serves replay jobs of kind "quarantine": it
	// re-verifies up to n held hooks after cursor (of job.SourceID, if set)
	// and commits those that pass under their original ids.
	Release Releaser

	// Retention keeps a fully delivered hook this long (history.go); 0
	// removes it at once. RetentionMaxBytes bounds the bodies kept (the
	// oldest go first past it); SweepInterval is how often the sweep runs.
	Retention         time.Duration
	RetentionMaxBytes int64
	SweepInterval     time.Duration

	// Archive, when set, receives every hook the sweep removes before its
	// rows go (archive.go), in segments of about SegmentBytes of bodies,
	// and serves replay jobs of kind "archive". Route resolves the sinks a
	// replayed hook is owed from its source's current configuration;
	// OnRestore raises the queue's counters by what a replay wrote back.
	Archive      Archiver
	SegmentBytes int64
	Route        func(source string) ([]store.DueSink, bool)
	OnRestore    func(hooks, deliveries int)

	Observer Observer
	Logger   *slog.Logger
	Now      func() time.Time
	// Jitter returns a value in [0.5, 1.0]; nil means random.
	Jitter func() float64
}

func (o *Options) fill() {
	if o.Concurrency <= 0 {
		o.Concurrency = 512 // config's default (dispatch.concurrency)
	}
	if o.MaxInflight < o.Concurrency {
		o.MaxInflight = max(o.Concurrency, 1000)
	}
	if o.MaxInflightBytes <= 0 {
		o.MaxInflightBytes = 64 << 20
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 30 * time.Second
	}
	if o.ScanBatch <= 0 {
		o.ScanBatch = 256
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = 5
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = 10 * time.Second
	}
	o.Retry.fill()
	if o.RetentionMaxBytes <= 0 {
		o.RetentionMaxBytes = 1 << 30
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Second
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = 8 << 20
	}
	if o.Route == nil {
		o.Route = func(string) ([]store.DueSink, bool) { return nil, false }
	}
	if o.OnRestore == nil {
		o.OnRestore = func(int, int) {}
	}
	if o.OnReclaim == nil {
		o.OnReclaim = func(int, int) {}
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Jitter == nil {
		o.Jitter = func() float64 { return 0.5 + rand.Float64()/2 }
	}
}

// claimed is one row handed to a worker.
type claimed struct {
	seq uint64
	num uint16
	at  int64 // the due key's time
	// gen is the store generation the claim's scan read: a reopen since
	// may have dropped writes the row's state came from (record).
	gen      uint64
	delivery store.Delivery
	size     int64
	// value is the hook's envelope from the hot cache (nil: the attempt
	// reads the hook row).
	value []byte
	// noIO: handed to noIOWorker, counted in noIOInflight until recorded.
	noIO bool
}

type result struct {
	c claimed
	// hook names the hook's rows, from the envelope the attempt read (zero
	// when the attempt never read it): a fully delivered hook is removed
	// from it without reading the hook again.
	hook store.HookRef
	err  error
	dur  time.Duration
}

// Dispatcher is the delivery stage of one store.
type Dispatcher struct {
	o   Options
	st  *store.Store
	log *slog.Logger

	wake    chan struct{} // capacity 1
	results chan result
	work    chan claimed // claims for the workers; capacity MaxInflight
	// noIOWork carries a scan pass's claims of sinks that do no I/O to
	// noIOWorker; capacity MaxInflight (scan.go).
	noIOWork chan []claimed
	// noIOSpare holds batches noIOWorker is done with, for the next ones.
	noIOSpare chan []claimed
	cmds      chan func() // run on the loop goroutine (replay job changes)

	// owned by the run goroutine
	inflight      int
	inflightBytes int64
	// noIOInflight counts the claims in inflight handed to noIOWorker
	// (bounded by noIOMax, scan.go).
	noIOInflight int
	// claims are the deliveries claimed, in memory only (claims.go): K1,
	// K2. Written by the run goroutine; read by anyone.
	claims claimSet
	// gen is the store generation the loop's view of the rows is of
	// (resync).
	gen uint64
	// unrecorded holds finished attempts whose outcome write failed (the
	// store was failing): they are recorded again at the next loop turn.
	// Their claims are held meanwhile, so no scan claims them twice.
	unrecorded []result
	// finished holds results gathered for the next outcome batch (run:
	// outcomeWait). Their claims are held, as if still attempted.
	finished []result
	// scratch is the loop's reusable memory (outcome.go).
	scratch loopScratch
	// low is the due-scan cursor (ms): the scan starts there, skipping the
	// tombstones of claimed rows below it. Invariant D1: no due row the
	// scan has not seen lies below it. New hooks keep it (the writer's due
	// times are monotonic); every other writer of a due row — a completed
	// local half of a dual commit, boot replay, a DLQ or quarantine replay,
	// a source change, dispatch's own retries — may write behind it, and
	// the store's due floor (Store.TakeDueFloor, read before every scan)
	// moves it back. No writer has to know the cursor exists.
	low int64
	// parked holds, per sink whose breaker was open when the scan stepped
	// over its rows, the earliest due time of those rows: D1 exempts them
	// (the cursor passes them), so a dead sink's backlog is walked once,
	// not on every scan. Invariant D2: every due row below low that the
	// scan has not claimed belongs to a sink in parked, at or after its
	// time there. A half-open breaker's probe is looked up from there
	// (probeParked); the first success of the sink moves the cursor back
	// to it (unpark). The sinks that do no I/O are parked the same way
	// while their claims are at noIOMax, and unparked once a recorded
	// outcome takes them below it (unparkNoIO).
	parked   map[uint16]int64
	breakers map[uint16]*breaker
	// hot holds new hooks the commit path handed over (hot.go).
	hot  hotCache
	jobs map[string]*job

	deadGauge atomic.Int64
	// retainedHooks and retainedBytes count the retained rows (history.go
	// invariant 1); written on the loop, read by scrapes.
	retainedHooks atomic.Int64
	retainedBytes atomic.Int64
	// archivedHooks and archiveErrors count archive sweep work (archive.go).
	archivedHooks atomic.Int64
	archiveErrors atomic.Int64

	// started is set by Start: from then on every delivery-row write runs
	// on the loop; before it, offLoop serialises the few that run without it.
	started atomic.Bool
	offLoop sync.Mutex

	cancel  context.CancelFunc
	done    chan struct{}
	workers sync.WaitGroup

	// targetsMu guards o.Targets: API-managed sources add and remove sinks
	// while workers read them.
	targetsMu sync.RWMutex

	// afterOutcome is a test seam: called on the loop goroutine after each
	// outcome write reached the store (a crash is simulated there).
	afterOutcome func()
	// afterArchive is a test seam: called by the archive goroutine after a
	// segment was written and before its hooks' rows are removed; an error
	// stops the pass there (a crash is simulated there).
	afterArchive func() error
	// beforeArchiveSync is a test seam: called by the archive goroutine
	// after it read a pass's hooks and before the WAL sync of invariant 3.
	beforeArchiveSync func()
	// loopCtx is the loop's context (Start), for the goroutines the loop
	// starts (fetchArchive); cancelled by Stop.
	loopCtx context.Context
	// bg is the archive goroutine and the archive jobs' reads, stopped
	// with the loop.
	bg sync.WaitGroup
}

func (d *Dispatcher) target(num uint16) (Target, bool) {
	d.targetsMu.RLock()
	defer d.targetsMu.RUnlock()
	t, ok := d.o.Targets[num]
	return t, ok
}

// SetTarget adds or replaces the sink behind a number (an API-managed
// source was created or changed). The replaced sink is returned so the
// caller can close it once no attempt uses it.
func (d *Dispatcher) SetTarget(num uint16, t Target) (old Target, replaced bool) {
	d.targetsMu.Lock()
	defer d.targetsMu.Unlock()
	if d.o.Targets == nil {
		d.o.Targets = map[uint16]Target{}
	}
	old, replaced = d.o.Targets[num]
	d.o.Targets[num] = t
	return old, replaced
}

// RemoveTarget drops a sink; rows still due for it dead-letter as "sink is
// no longer configured" when attempted.
func (d *Dispatcher) RemoveTarget(num uint16) (old Target, ok bool) {
	d.targetsMu.Lock()
	defer d.targetsMu.Unlock()
	old, ok = d.o.Targets[num]
	delete(d.o.Targets, num)
	return old, ok
}

// New builds a dispatcher; Start runs it.
func New(st *store.Store, o Options) *Dispatcher {
	o.fill()
	return &Dispatcher{
		o: o, st: st, log: o.Logger.With("component", "dispatch"),
		wake:      make(chan struct{}, 1),
		results:   make(chan result, o.MaxInflight),
		work:      make(chan claimed, o.MaxInflight),
		noIOWork:  make(chan []claimed, o.MaxInflight),
		noIOSpare: make(chan []claimed, 4),
		cmds:      make(chan func()),
		breakers:  make(map[uint16]*breaker),
		parked:    make(map[uint16]int64),
		jobs:      make(map[string]*job),
	}
}

// Wake asks for a scan now (a commit made rows durable). It never blocks.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Start returns every inflight row an older build left to due
// (at-least-once after a restart), loads replay jobs and runs the loop
// until Stop.
func (d *Dispatcher) Start() error {
	if err := d.recoverInflight(); err != nil {
		return err
	}
	if err := d.sweepDelivered(); err != nil {
		return err
	}
	if err := d.loadJobs(); err != nil {
		return err
	}
	// Under offLoop: a DeadLetterDue running off the loop (a source deleted
	// through the admin API, which serves before dispatch starts) adds to
	// the gauge; its write and its Add fall wholly before the count or
	// wholly after the Store, never between them.
	d.offLoop.Lock()
	n, err := d.st.CountDead()
	if err == nil {
		d.deadGauge.Store(int64(n))
	}
	d.offLoop.Unlock()
	if err != nil {
		return fmt.Errorf("count dead rows: %w", err)
	}
	if err := d.loadRetained(); err != nil {
		return err
	}
	d.gen = d.st.Generation()
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.loopCtx = ctx
	d.done = make(chan struct{})
	// Under offLoop: a DeadLetterDue that saw started false and runs off
	// the loop finishes before the loop starts (it writes the hot cache's
	// line, which the loop owns from here on).
	d.offLoop.Lock()
	d.started.Store(true)
	d.offLoop.Unlock()
	d.hot.open.Store(true)
	for range d.o.Concurrency {
		d.workers.Add(1)
		go d.worker(ctx)
	}
	d.workers.Add(1)
	go d.noIOWorker(ctx)
	go func() {
		defer close(d.done)
		d.run(ctx)
	}()
	if d.o.Archive != nil && d.o.Retention > 0 {
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			d.archiveLoop(ctx)
		}()
	}
	return nil
}

// Stop cancels attempts in flight and waits for the loop. A cancelled
// attempt is not recorded: its row stays due, to be attempted at the next
// start without spending an attempt.
func (d *Dispatcher) Stop() {
	if d.cancel == nil {
		return
	}
	d.hot.open.Store(false)
	d.cancel()
	// The loop first: it starts goroutines of bg (fetchArchive), so bg is
	// waited for only once it has exited. Neither the archive goroutine
	// nor a read waits on the loop once it is gone (do and the reads'
	// hand-over select on done or the context).
	<-d.done
	d.bg.Wait()
}

func (d *Dispatcher) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	jobTick := time.NewTicker(replayTick)
	defer jobTick.Stop()
	sweepTick := time.NewTicker(d.o.SweepInterval)
	defer sweepTick.Stop()
	// flush fires outcomeWait after the first result held in finished.
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	flushArmed := false
	record := func() {
		if flushArmed && !flush.Stop() {
			<-flush.C
		}
		flushArmed = false
		rs := d.finished
		d.record(rs)
		// record keeps nothing of rs (a failed write copies it into
		// unrecorded), so its array gathers the next batch; cleared, so it
		// keeps no hook's value alive meanwhile.
		clear(rs)
		d.finished = rs[:0]
	}
	scan := true
	var next time.Time
	for {
		d.current()
		if rs := d.unrecorded; len(rs) > 0 {
			d.unrecorded = nil
			d.record(rs)
		}
		if scan {
			next = d.scanAndClaim(ctx)
		}
		scan = true
		wait := d.o.Poll
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(d.o.Now()), time.Millisecond))
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			d.workers.Wait()
			d.cancelUnstarted(ctx.Err())
			d.drainResults()
			return
		case r := <-d.results:
			d.finished = d.takeResults(append(d.finished, r))
			// Rows whose outcome write failed stay counted in flight
			// until it is retried: they are not attempts still running.
			if len(d.finished) < d.inflight-len(d.unrecorded) && len(d.finished) < maxOutcomeBatch {
				// Attempts are still running: their outcomes join this
				// batch unless outcomeWait passes first. No claim was
				// freed, so the next turn skips the scan — unless the
				// last one said more is due now (it stopped at ScanBatch).
				if !flushArmed {
					flush.Reset(outcomeWait)
					flushArmed = true
				}
				scan = !next.IsZero() && !next.After(d.o.Now())
				break
			}
			record()
		case <-flush.C:
			flushArmed = false
			record()
		case <-d.wake:
		case <-timer.C:
		case <-jobTick.C:
			d.runJobs()
		case <-sweepTick.C:
			if d.o.Archive != nil {
				break // the archive goroutine sweeps (archive.go)
			}
			// One pass of at most sweepBatch hooks, so the loop's other
			// work waits at most one pass; while more are due the next
			// pass comes at once.
			if d.sweep() {
				sweepTick.Reset(time.Millisecond)
			} else {
				sweepTick.Reset(d.o.SweepInterval)
			}
		case f := <-d.cmds:
			f()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// takeResults appends the results waiting on the channel to rs.
func (d *Dispatcher) takeResults(rs []result) []result {
	for {
		select {
		case r := <-d.results:
			rs = append(rs, r)
		default:
			return rs
		}
	}
}

// outcomeWait and maxOutcomeBatch bound how outcomes are gathered into one
// batch: the loop records the finished attempts once every claimed one has
// finished, maxOutcomeBatch have, or outcomeWait after the first. Recording
// each result as it came cost one Pebble commit and one due scan per 1.5
// hooks at C=64 (issue 14); the wait delays only the outcome's write (the
// sink already has the hook), never an attempt.
const (
	outcomeWait     = time.Millisecond
	maxOutcomeBatch = 512
)

// drainResults records the attempts that finished at shutdown; cancelled
// ones leave their rows due, for the next start.
func (d *Dispatcher) drainResults() {
	// record leaves cancelled attempts' rows due.
	// Outcomes whose write failed get one more try too.
	if rs := d.takeResults(append(d.unrecorded, d.finished...)); len(rs) > 0 {
		d.unrecorded, d.finished = nil, nil
		d.record(rs)
	}
}

// do runs f on the loop goroutine and waits for it.
func (d *Dispatcher) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case d.cmds <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return fmt.Errorf("dispatch stopped")
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recoverInflight moves every inflight row an older build left back to
// due: whatever attempt was running when the node stopped may or may not
// have reached the sink, so the hook is delivered again (at least once).
// This build writes no such row (claims.go); a store written by an older
// one still holds them after its last run.
func (d *Dispatcher) recoverInflight() error {
	type row struct {
		seq uint64
		num uint16
	}
	var rows []row
	err := d.st.ScanInflight(func(seq uint64, num uint16) bool {
		rows = append(rows, row{seq, num})
		return true
	})
	if err != nil || len(rows) == 0 {
		return err
	}
	nowMs := d.o.Now().UnixMilli()
	b := d.st.NewBatch()
	defer b.Close()
	for _, r := range rows {
		dl, err := d.st.ReadDelivery(r.seq, r.num)
		if err != nil {
			return err
		}
		if dl == nil {
			b.DropInflight(r.seq, r.num)
			continue
		}
		b.Reclaim(r.seq, r.num, dl, nowMs)
	}
	if err := d.apply(b, true); err != nil {
		return fmt.Errorf("return %d inflight rows to due: %w", len(rows), err)
	}
	d.log.Info("returned inflight deliveries to due", "rows", len(rows))
	return nil
}

// apply applies b (synced when sync). A failure that failed the store's
// generation is reported (Options.OnStoreFailure), so that the queue
// fences and reopens the store: F1 (store) makes a WAL fault the
// generation's fatal error, which only a reopen clears, and before this
// only the commit path, the pen and the readiness probe reported one. A
// quiet node whose only writer was the dispatcher kept the failed
// generation, its outcomes unrecorded and their claims held, until the
// next hook came (simulator, rule 7, seed 300819). A batch refused as of
// an older generation, or by a closed store, fences nothing.
func (d *Dispatcher) apply(b *store.Batch, sync bool) error {
	apply := d.st.Apply
	if sync {
		apply = d.st.ApplySync
	}
	err := apply(b)
	if err != nil && d.o.OnStoreFailure != nil {
		if f := d.st.Failed(); f != nil && !errors.Is(f, store.ErrClosed) {
			d.o.OnStoreFailure(f)
		}
	}
	return err
}

// current makes the loop's view that of the store's current generation
// (resync, after a reopen) and reports whether it is: false while a count
// resync needs fails (the store failing again), retried at the next call.
func (d *Dispatcher) current() bool {
	if g := d.st.Generation(); g != d.gen {
		d.resync(g)
	}
	return d.gen == d.st.Generation()
}

// resync makes the loop's view of the rows that of store generation g,
// after a reopen (the queue's fence, after a failed WAL write or fsync).
// The reopened store holds what the WAL kept, not everything Pebble had
// reported applied: any of the loop's unsynced batches (outcomes, reclaims,
// replay moves) may be gone. Its rows are then back as they were — a
// delivery due again at its old key, found by the scan from the start
// (Reopen rewinds the due floor) and attempted again, at least once — but
// what the loop counted from them is not: the dead gauge and the retained
// counters are counted again from the rows, and the hot cache, whose
// entries may describe writes that are gone (H1), is dropped. The claims
// stay: their attempts run, and their outcomes, recorded on g, know their
// keys may be gone (record: Batch.DueUnsure), and those recorded again
// are checked against their rows first (R1). The replay jobs are the
// stored ones again (reloadJobs). The queue's own counters are
// recounted by its fence. A count that fails (the store is failing again)
// is retried at the next turn.
func (d *Dispatcher) resync(g uint64) {
	d.hot.reset()
	n, err := d.st.CountDead()
	if err != nil {
		d.log.Warn("recount dead rows after a store reopen", "err", err)
		return
	}
	// With an archive too: its goroutine only reads the counters (pick);
	// every write to them, its removals included (remove, through do), is
	// the loop's, so a recount here is never raced.
	if err := d.loadRetained(); err != nil {
		d.log.Warn("recount retained hooks after a store reopen", "err", err)
		return
	}
	if err := d.reloadJobs(); err != nil {
		d.log.Warn("reload replay jobs after a store reopen", "err", err)
		return
	}
	d.deadGauge.Store(int64(n))
	d.gen = g
}

// noteDue keeps the scan cursor at or below a due key (D1). Dispatch's own
// writes call it directly; everyone else's arrive through the due floor.
func (d *Dispatcher) noteDue(at int64) {
	d.low = min(d.low, at)
}
