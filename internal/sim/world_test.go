package sim

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/archive"
	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
)

// The simulated node's fixed layout and settings.
const (
	nodeID   = "n1"
	storeDir = "/data/store"
	// logMaxRecord is the memory log's max record size, below the queue's
	// intake.max_record_bytes (a topology that intake.verify_topic: false
	// lets through): a poison body passes the queue's check and is refused
	// Permanent by the log at every publish, the stuck record of defect A.
	logMaxRecord   = 4096
	poisonBodySize = 6000
	signingKey     = "sim-signing-key-0123456789abcdef"

	reconcileDeadline = 3 * time.Second
	retention         = 8 * time.Second
	faultPhase        = 15 * time.Second
)

// sources and their sinks: the route of every hook.
// Sink l does no I/O (sink.NoIO, as the log sink): the dispatcher runs its
// attempts on a worker of their own, without a deadline, and the schedule
// never makes it fail or hang.
var sources = map[string][]string{
	"github": {"a"},
	"stripe": {"a", "b", "l"},
}

var sourceNames = []string{"github", "stripe"}

var discard = slog.New(slog.DiscardHandler)

// ackInfo is one hook some provider was answered 201 for.
type ackInfo struct {
	body   []byte
	source string
	key    string // dedupe scope+key, "" without one
	dup    bool   // first seen in a duplicate answer
	req    int    // the request it answered (traces name requests, not ids)
}

// keyInfo is what the simulator knows about one dedupe key.
type keyInfo struct {
	named        map[[16]byte]bool // ids named by 201 answers
	firstRefusal time.Time         // first 503 of an attempt for this key
	sanctioned   bool              // a 201 new came past the reconcile deadline of a refused original
}

// counts are the faults a schedule injected, per class.
type counts struct {
	fsync, write, publish, crash, hostloss int
	// Of fsync and write: open counts the writes that refused a log's
	// creation or reuse, recycled the faults in a recycled log.
	open, recycled int
	// swept counts the hooks a history sweep removed (with history on,
	// every reclaim is one: a delivered hook is retained, not removed);
	// archived, those of them removed by the archive's sweep.
	swept, archived int
	// resent counts the resends the operator was answered for (resend_test.go).
	resent int
	// dlqJobs counts the dlq replay jobs it was answered for (dlqreplay_test.go).
	dlqJobs int
	// archiveJobs counts the archive replay jobs it was answered for.
	archiveJobs int
}

func (c *counts) add(o counts) {
	c.fsync += o.fsync
	c.write += o.write
	c.publish += o.publish
	c.crash += o.crash
	c.hostloss += o.hostloss
	c.open += o.open
	c.recycled += o.recycled
	c.swept += o.swept
	c.archived += o.archived
	c.resent += o.resent
	c.dlqJobs += o.dlqJobs
	c.archiveJobs += o.archiveJobs
}

// schedCfg is what a seed chose for a schedule: the mode and the weights
// of each event class.
type schedCfg struct {
	dual    bool
	backups bool
	weights map[string]int
	// release is the release class's weight, 0–3 (release_test.go): the
	// share of requests held (release/12) and the pace of the release
	// job's ticks. Drawn from a stream of its own, it is not in weights:
	// its events run on the releaser's goroutine, not the main loop.
	release int
	// memtable is the store's MemTableSize (0: the store's default), drawn
	// from a stream of its own so that no other draw moved. Why smaller
	// ones: a schedule writes a few hundred small hooks, so with the
	// default Pebble rarely switched logs by itself and never recycled
	// one; the switch (F1) and the recycled log are where a WAL fault
	// bites hardest.
	memtable uint64
	// history is the dispatcher's delivery history, drawn from a stream of
	// its own: "" (a delivered hook is removed at once), "retain" (kept for
	// historyRetention or until historyMaxBytes of bodies, then swept on
	// the loop), or "archive" (swept through an archive on a file store
	// outside the node's disk, as an object store is). Why: the sweep's
	// removals are unsynced writes a fault or a crash can drop, and the
	// history counters must survive that (rule 7).
	history string
}

// The history's bounds: short and small, so that a schedule sweeps by age
// and by bytes both.
const (
	historyRetention = time.Second
	historyMaxBytes  = 2048
	historySweep     = 200 * time.Millisecond
)

// world is one schedule: the disk, the log, the node that runs on them,
// the providers submitting and the record of what they were told.
type world struct {
	seed   uint64
	rng    *rand.Rand // the main goroutine's: every schedule decision
	cfg    schedCfg
	start  time.Time
	tmpDir string
	logDir string
	// stores is every store the node opened, one per life: check W sums
	// their misuse counts. Written by the main goroutine only.
	stores []*store.Store

	disk   *vfs.MemFS
	faults *diskFaults

	// The release class (release_test.go): holdRng decides which requests
	// are held (main goroutine), rel is the replay job of kind quarantine.
	holdRng *rand.Rand
	rel     *releaser

	// lmu guards the log wrapper's armed faults.
	lmu        sync.Mutex
	dupNext    int
	delayNext  []time.Duration
	logSamples []logSample

	gen       int
	prefix    string // backup prefix of the current store lineage
	hasBackup bool
	inc       string

	mu        sync.Mutex
	node      *node
	stopping  bool
	trace     []traceEntry
	acks      map[[16]byte]*ackInfo
	landed    map[[16]byte]bool            // in the log (confirmed or not)
	confirmed map[[16]byte]bool            // in the log, and the publisher was told so
	attempted map[[16]byte]int             // publishes tried (debugging)
	dropped   map[[16]byte]intake.Position // dropped by retention: the id's last dropped position
	excused   map[[16]byte]bool            // lost in a gap an operator accepted
	delivered map[[16]byte]map[string][32]byte
	seqID     map[uint64][16]byte
	held      map[[16]byte]*heldInfo       // every hook the pen took (Q, R)
	idSeqs    map[[16]byte]map[uint64]bool // every seq a hook id was stored or delivered under (R)
	twice     map[[16]byte]bool            // ids R reported
	leftRows  int                          // holds answered with an error whose row was there (P)
	keys      map[string]*keyInfo
	sinkFail  map[string]time.Time
	sinkHang  map[string]time.Time
	found     []violation
	injected  counts
	reqs      int
	// The resend class (resend_test.go): its draws, the resends answered
	// (by resend id) and the sinks sent each one.
	resend  operatorClass
	resends map[string]*resendInfo
	resent  map[string]map[string]bool
	// The dlq class (dlqreplay_test.go): its draws and the jobs answered.
	dlq     operatorClass
	dlqJobs []*dlqJob // the archive class's jobs too
	// The archive class (dlqreplay_test.go): its draws.
	archJobs operatorClass
	clients  sync.WaitGroup
}

type violation struct {
	inv  string // "1".."8", "L" (liveness), "C" (recovery refusal), "W", "Q", "R", "P", "S", "D"
	what string
}

type traceEntry struct {
	at   time.Duration
	text string
}

type logSample struct {
	at   time.Time
	last intake.Position
}

func newWorld(seed uint64, tmp string, exclude map[string]bool) *world {
	w := &world{
		seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)),
		tmpDir: tmp, logDir: filepath.Join(tmp, "intake"),
		disk: vfs.NewCrashableMem(), faults: &diskFaults{},
		acks: map[[16]byte]*ackInfo{}, landed: map[[16]byte]bool{}, confirmed: map[[16]byte]bool{}, attempted: map[[16]byte]int{}, dropped: map[[16]byte]intake.Position{},
		excused: map[[16]byte]bool{}, delivered: map[[16]byte]map[string][32]byte{},
		seqID: map[uint64][16]byte{}, keys: map[string]*keyInfo{},
		held: map[[16]byte]*heldInfo{}, idSeqs: map[[16]byte]map[uint64]bool{}, twice: map[[16]byte]bool{},
		sinkFail: map[string]time.Time{}, sinkHang: map[string]time.Time{},
		inc: "0", prefix: "ankusa/n1-0",
	}
	w.cfg = w.pickConfig()
	for k := range exclude {
		delete(w.cfg.weights, k)
	}
	// The release class's streams, apart from w.rng (release_test.go).
	rr := rand.New(rand.NewPCG(seed, 0x4e1ea5e))
	w.cfg.release = rr.IntN(4)
	if exclude["release"] {
		w.cfg.release = 0
	}
	w.holdRng = rand.New(rand.NewPCG(rr.Uint64(), 1))
	w.cfg.memtable = []uint64{0, 256 << 10, 64 << 10}[rand.New(rand.NewPCG(seed, 0x3e3)).IntN(3)]
	if !exclude["history"] {
		w.cfg.history = []string{"", "retain", "archive"}[rand.New(rand.NewPCG(seed, 0x415)).IntN(3)]
	}
	w.resend = newOperatorClass(seed, 0x7e5e, !exclude["resend"] && w.cfg.history != "") // a resend takes a stored delivered hook
	w.resends, w.resent = map[string]*resendInfo{}, map[string]map[string]bool{}
	w.dlq = newOperatorClass(seed, 0xd1a, !exclude["dlq"])
	w.archJobs = newOperatorClass(seed, 0xa3c, !exclude["archivejob"] && w.cfg.history == "archive")
	w.rel = newReleaser(w, rr.Uint64(), w.cfg.release)
	return w
}

// pickConfig draws the schedule's profile: some seeds are crash-heavy,
// some log-heavy, some disk-heavy, so every mix gets exercised.
func (w *world) pickConfig() schedCfg {
	c := schedCfg{dual: w.rng.IntN(4) != 0, backups: w.rng.IntN(3) != 0}
	c.weights = map[string]int{
		"submit": 40, "check": 6,
		"fsync": w.rng.IntN(4), "write": w.rng.IntN(3), "outage": w.rng.IntN(2), "writeoutage": w.rng.IntN(2),
		"crash": w.rng.IntN(3), "sink": 1 + w.rng.IntN(3),
	}
	if c.dual {
		for _, k := range []string{"pubfail", "lostack", "throttle", "permanent", "slow", "hang", "down", "dup", "reorder", "poison"} {
			c.weights[k] = w.rng.IntN(4)
		}
		c.weights["hostloss"] = w.rng.IntN(2)
		c.weights["retention"] = w.rng.IntN(3)
		if c.backups {
			c.weights["backup"] = 3
		}
	}
	return c
}

func (w *world) now() time.Duration { return time.Since(w.start) }

// tracef appends to the schedule's trace. Entries carry the virtual time
// and nothing nondeterministic (no hook ids, no seqs): the same seed must
// give the same trace.
func (w *world) tracef(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tracefLocked(format, args...)
}

func (w *world) tracefLocked(format string, args ...any) {
	w.trace = append(w.trace, traceEntry{at: w.now(), text: fmt.Sprintf(format, args...)})
}

func (w *world) violate(inv, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violateLocked(inv, format, args...)
}

func (w *world) violateLocked(inv, format string, args ...any) {
	v := violation{inv: inv, what: fmt.Sprintf(format, args...)}
	w.found = append(w.found, v)
	w.tracefLocked("VIOLATION inv %s: %s", inv, v.what)
}

// traceLines is the trace sorted by time, then text: goroutines that act
// at the same virtual instant may append in any order.
func (w *world) traceLines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	es := append([]traceEntry(nil), w.trace...)
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].at != es[j].at {
			return es[i].at < es[j].at
		}
		return es[i].text < es[j].text
	})
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%7dms %s", e.at.Milliseconds(), e.text)
	}
	return out
}

// ---- the node ------------------------------------------------------------

// node is one process: a store generation, its queue and dispatcher, and
// its handle on the shared intake log. A crash marks it dead first, so that
// nothing it does afterwards reaches the log, a sink or a provider.
type node struct {
	gen    int
	st     *store.Store
	pen    *quarantine.Pen
	rel    *quarantine.Release
	q      *queue.Queue
	d      *dispatch.Dispatcher
	log    *memory.Log
	in     *simIntake
	nums   map[store.SinkRef]uint16
	dead   atomic.Bool
	deadCh chan struct{}
	fatal  atomic.Bool
}

func (w *world) current() *node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.node
}

func (w *world) route(nums map[store.SinkRef]uint16) func(string) (queue.Route, bool) {
	return func(src string) (queue.Route, bool) {
		sinks, ok := sources[src]
		if !ok {
			return queue.Route{}, false
		}
		r := queue.Route{DedupeTTL: time.Hour}
		for _, id := range sinks {
			r.Sinks = append(r.Sinks, queue.SinkRef{Num: nums[store.SinkRef{Source: src, Sink: id}], ID: id})
		}
		return r, true
	}
}

func sinkRefs() []store.SinkRef {
	var refs []store.SinkRef
	for _, src := range sourceNames {
		for _, id := range sources[src] {
			refs = append(refs, store.SinkRef{Source: src, Sink: id})
		}
	}
	return refs
}

// boot opens the store on the current disk, runs boot recovery (dual) and
// starts the queue and the dispatcher, as the app's boot does.
func (w *world) boot() error {
	w.faults.set(func(f *diskFaults) { f.on = false })
	w.gen++
	n := &node{gen: w.gen, deadCh: make(chan struct{})}
	lg, err := memory.Open(memory.Options{Dir: w.logDir, Node: nodeID, MaxRecordBytes: logMaxRecord, Logger: discard})
	if err != nil {
		return fmt.Errorf("open intake log: %w", err)
	}
	n.log, n.in = lg, &simIntake{Log: lg, w: w, n: n}
	restored := false
	if _, err := w.disk.Stat(w.disk.PathJoin(storeDir, backup.MarkerName)); err == nil {
		restored = true
	}
	st, err := store.Open(store.Options{Dir: storeDir, FS: newFaultFS(w.disk, w.faults),
		MemTableSize: w.cfg.memtable, Logger: discard})
	if err != nil {
		_ = lg.Close()
		return fmt.Errorf("open store: %w", err)
	}
	n.st = st
	w.stores = append(w.stores, st) // W: each life's misuse count (checkSingleDeletes)
	if st.Created() {
		// A new store lineage backs up under a prefix of its own (the old
		// one holds another store id's backups).
		w.prefix = fmt.Sprintf("ankusa/n1-%d", w.gen)
		w.hasBackup = false
	}
	// Rule 8, checked before recovery: every acked hook survived the
	// crash on the local disk (an ack waits for the local fsync).
	if !restored && !st.Created() {
		w.checkAckedPresent(n, "after reopen, before recovery")
		w.checkHeldPresent(n, "after reopen, before recovery")
	}
	nums, err := st.SinkNumbers(sinkRefs())
	if err != nil {
		return w.bootFail(n, fmt.Errorf("sink numbers: %w", err))
	}
	n.nums = nums
	var carry []uint64
	if w.cfg.dual {
		if err := w.recover(n, restored, &carry); err != nil {
			return w.bootFail(n, err)
		}
		if restored {
			if err := w.disk.Remove(w.disk.PathJoin(storeDir, backup.MarkerName)); err != nil {
				return w.bootFail(n, err)
			}
		}
	}
	w.noteHeldAndStored(n)
	var d *dispatch.Dispatcher
	qo := queue.Options{
		// One partition: a group's records are then in arrival order, and
		// which of two same-key records is the original repeats in a replay.
		Partitions: 1, MaxBatch: 8, MaxDelay: 2 * time.Millisecond, MaxQueue: 2000,
		FenceRetry: 200 * time.Millisecond, Logger: discard,
		OnDurable: func() { d.Wake() },
		// As the app wires a dispatching node: new hooks reach dispatch
		// from memory (its hot cache), the store is the fallback.
		OnCommitted: func(cs []store.Committed) { d.Committed(cs) },
		OnFatal:     func(error) { n.fatal.Store(true) },
		Observer:    simObserver{w},
	}
	if w.cfg.dual {
		qo.Dual = &queue.DualOptions{
			Intake: n.in, Node: nodeID, Incarnation: w.inc,
			PublishTimeout: time.Second, ReconcileDeadline: reconcileDeadline,
			BreakerFailures: 3, Probe: time.Second, OffsetFlush: 500 * time.Millisecond,
			MaxRecordBytes: 1 << 20, ReconcileEvery: 100 * time.Millisecond,
			Observer: simDualObserver{w: w},
		}
	}
	targets := map[uint16]dispatch.Target{}
	for ref, num := range nums {
		ss := &simSink{w: w, n: n, id: ref.Sink}
		var sk sink.Sink = ss
		if ref.Sink == "l" {
			sk = simNoIOSink{ss}
		}
		targets[num] = dispatch.Target{ID: ref.Sink, Sink: sk}
	}
	q, err := queue.New(st, qo)
	if err != nil {
		return w.bootFail(n, fmt.Errorf("queue: %w", err))
	}
	// The pen over this life's store, and its release through its queue
	// (as the app wires them when a source quarantines; a failed pen write
	// fences the queue, which reopens the store).
	pen, err := quarantine.New(st, quarantine.Options{Logger: discard, OnStoreFailure: q.ReportStoreFailure})
	if err != nil {
		q.Close()
		return w.bootFail(n, fmt.Errorf("pen: %w", err))
	}
	n.q = q // releaseQueue commits through it
	n.pen, n.rel = pen, quarantine.NewRelease(pen, holdSources(nums), releaseQueue{w: w, n: n})
	// As the app does: what the republish could not place stays pending.
	if err := q.Carry(carry, true); err != nil {
		return w.bootFail(n, fmt.Errorf("carry: %w", err))
	}
	do := dispatch.Options{
		Concurrency: 4, AttemptTimeout: time.Second, Poll: 500 * time.Millisecond,
		BreakerFailures: 3, BreakerCooldown: 2 * time.Second,
		Retry:   dispatch.RetryPolicy{Base: 100 * time.Millisecond, Max: 2 * time.Second, MaxAttempts: 10_000},
		Targets: targets, Durable: q.Durable, OnReclaim: q.Reclaimed, OnStoreFailure: q.ReportStoreFailure,
		Logger: discard, Jitter: func() float64 { return 0.75 },
	}
	if w.cfg.history != "" {
		do.Retention, do.RetentionMaxBytes, do.SweepInterval = historyRetention, historyMaxBytes, historySweep
		do.OnReclaim = func(hooks, rows int) {
			q.Reclaimed(hooks, rows)
			w.mu.Lock()
			w.injected.swept += hooks
			if w.cfg.history == "archive" {
				w.injected.archived += hooks
			}
			w.mu.Unlock()
		}
		if w.cfg.history == "archive" {
			a, err := w.archive()
			if err != nil {
				q.Close()
				return w.bootFail(n, fmt.Errorf("archive: %w", err))
			}
			do.Archive = a
		}
	}
	d = dispatch.New(st, do)
	if err := d.Start(); err != nil {
		return w.bootFail(n, fmt.Errorf("dispatch: %w", err))
	}
	q.Start()
	n.q, n.d = q, d
	w.faults.set(func(f *diskFaults) { f.on = true })
	w.mu.Lock()
	w.node = n
	w.tracefLocked("boot gen=%d dual=%v restored=%v fresh=%v", n.gen, w.cfg.dual, restored, st.Created())
	w.mu.Unlock()
	w.rel.poke() // a job after every boot: a crash may have cut a step
	return nil
}

func (w *world) bootFail(n *node, err error) error {
	_ = n.st.Close()
	_ = n.log.Close()
	return err
}

// recover is boot recovery as the app runs it, plus the operator: a
// refused truncated log is accepted with --allow-gap, and the hooks only
// the dropped prefix held are excused from rule 1 (the operator took that
// loss knowingly). It also checks defect C's rule: a fresh or restored
// store over a log truncated past what it needs must be refused.
func (w *world) recover(n *node, restored bool, carry *[]uint64) error {
	ctx := context.Background()
	origin := queue.OriginExisting
	switch {
	case restored:
		origin = queue.OriginRestored
	case n.st.Created():
		origin = queue.OriginFresh
	}
	earliest, _ := n.log.Earliest(ctx)
	offset, hasOffset := intake.Position(-1), false
	if v, err := n.st.Get(store.KeyIntakeOffset); err == nil {
		if o, ok := store.ParseU64(v); ok {
			offset, hasOffset = intake.Position(o), true
		}
	}
	needs := intake.Position(0)
	if hasOffset {
		needs = offset + 1
	}
	// ADR section 8: a fresh store over this node's log truncated at all is
	// refused. A restored one is owed a refusal at least where a record it
	// needs is gone and held a hook the store lacks and no sink has (the
	// loss the refusal is there to stop; the recovery's own test is by
	// seq, so that it also works on logs shared by several nodes).
	mustRefuse := origin == queue.OriginFresh && n.log.Last() >= 0 && earliest > 0
	if origin == queue.OriginRestored && earliest > needs {
		w.mu.Lock()
		for id, pos := range w.dropped {
			if pos < needs || w.delivered[id] != nil {
				continue
			}
			if v, err := n.st.Get(store.HookIDKey(id)); err == nil && v == nil {
				mustRefuse = true
				break
			}
		}
		w.mu.Unlock()
	}
	if os.Getenv("SIM_DEBUG") != "" {
		wm := uint64(0)
		if v, _ := n.st.Get(store.KeyIntakeSeq); v != nil {
			wm, _ = store.ParseU64(v)
		}
		var seqs []uint64
		_ = n.st.Scan([]byte{store.PrefixHook}, []byte{store.PrefixHook + 1}, func(k, v []byte) bool {
			if s, ok := store.ParseU64(k[1:]); ok {
				seqs = append(seqs, s)
			}
			return true
		})
		w.tracef("debug: before recovery stored wm %d offset %d hooks %v", wm, offset, seqs)
	}
	ro := queue.RecoverOptions{Intake: n.in, Node: nodeID, Origin: origin, Resolve: w.route(n.nums), Logger: discard}
	sum, err := queue.Recover(ctx, n.st, ro)
	switch {
	case errors.Is(err, queue.ErrIntakeTruncated):
		if earliest <= needs {
			w.violate("C", "recovery refused a log that reaches back far enough (earliest %d, needs %d)", earliest, needs)
		}
		w.tracef("recovery refused: intake_truncated (earliest %d, needs %d); operator accepts the gap", earliest, needs)
		w.mu.Lock()
		for id := range w.dropped {
			w.excused[id] = true
		}
		// Rule 6 forgives the seqs of the hooks lost in the gap: their
		// records are gone from the log and their rows from the store, so
		// a fresh store whose whole past aged out of the log counts its
		// seqs from the start again (nothing holds them; the sinks and the
		// log tell hooks apart by id).
		for s, id := range w.seqID {
			if w.excused[id] {
				delete(w.seqID, s)
			}
		}
		w.mu.Unlock()
		ro.AllowGap = true
		sum, err = queue.Recover(ctx, n.st, ro)
	case err == nil && mustRefuse:
		w.violate("C", "%s store over a log truncated to %d (it needs %d) was not refused", originName(origin), earliest, needs)
	}
	if err != nil {
		w.violate("5", "boot recovery failed with every fault off: %v", err)
		return fmt.Errorf("boot recovery: %w", err)
	}
	w.tracef("recovery %s: applied=%d present=%d collided=%d republished=%d refused=%d", originName(origin),
		sum.Applied, sum.Present, sum.Collided, sum.Republished, len(sum.Refused))
	*carry = sum.Refused
	if sum.Collided > 0 {
		w.violate("6", "replay met %d seq collisions on a single node", sum.Collided)
	}
	return nil
}

func originName(o queue.Origin) string {
	switch o {
	case queue.OriginRestored:
		return "restored"
	case queue.OriginFresh:
		return "fresh"
	}
	return "existing"
}

// kill stops a node as a crash does: it is marked dead before anything
// else, so the goroutines that wind down afterwards reach neither the log,
// nor a sink, nor a provider. The disk it leaves behind is the caller's
// business (a clone taken before the kill).
func (w *world) kill(n *node) {
	n.dead.Store(true)
	close(n.deadCh)
	w.mu.Lock()
	if w.node == n {
		w.node = nil
	}
	w.mu.Unlock()
	// Whatever the old process still writes goes to a disk the crash has
	// already replaced; faults there would only keep its fence spinning.
	w.faults.set(func(f *diskFaults) { f.on = false })
	n.log.ClearFaults()
	n.q.Close()
	n.d.Stop()
	_ = n.st.Close()
	_ = n.log.Close()
}

// crash cuts the node at this instant and boots a new process on what the
// disk kept: a power cut keeps only what was synced, a kill -9 keeps what
// the OS had buffered, a torn cut keeps a seeded part of the unsynced data.
func (w *world) crash(kind string) {
	n := w.current()
	if n == nil {
		return
	}
	if w.cfg.dual && !n.q.Stats().Fenced {
		// Rule 4 at the instant of the cut: the marks the disk keeps are
		// what the next boot's republish starts from.
		w.checkMarks(n)
	}
	var clone *vfs.MemFS
	switch kind {
	case "powercut":
		clone = w.disk.CrashClone(vfs.CrashCloneCfg{})
	case "kill9":
		clone = w.disk.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(w.rng.Uint64(), 1))})
	default: // torn
		clone = w.disk.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 1 + w.rng.IntN(99), RNG: rand.New(rand.NewPCG(w.rng.Uint64(), 2))})
	}
	w.mu.Lock()
	w.injected.crash++
	w.tracefLocked("crash %s gen=%d", kind, n.gen)
	w.mu.Unlock()
	w.kill(n)
	w.disk = clone
	time.Sleep(time.Duration(200+w.rng.IntN(2000)) * time.Millisecond)
	w.mustBoot()
}

// superviseExit is the supervisor's restart of a node whose store could
// not be reopened: the binary exits 75 (OnFatal, after maxReopenFailures
// reopens failed in a row) and systemd restarts it after RestartSec
// (deploy/systemd/ankusa.service: 2 s). A process exit keeps what the OS
// buffered, as a kill -9 does. Without it such a node stayed fenced to the
// end of the schedule (seed 193, once log creation faults could fail the
// fence's reopens twenty times in a row). It draws nothing from w.rng:
// when it happens is the real code's doing, not the schedule's.
func (w *world) superviseExit() {
	n := w.current()
	if n == nil || !n.fatal.Load() {
		return
	}
	clone := w.disk.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(w.seed, 75))})
	w.tracef("exit 75 gen=%d: the store could not be reopened; the supervisor restarts the node in 2s", n.gen)
	w.kill(n)
	w.disk = clone
	time.Sleep(2 * time.Second)
	w.mustBoot()
}

// hostLoss drops the store: the replacement restores the last backup (or
// starts fresh without one) and replays the log.
func (w *world) hostLoss() {
	n := w.current()
	if n == nil {
		return
	}
	w.mu.Lock()
	w.injected.hostloss++
	w.excuseResendsLocked()
	w.excuseDLQJobsLocked()
	w.tracefLocked("host loss gen=%d backup=%v", n.gen, w.hasBackup)
	w.mu.Unlock()
	w.kill(n)
	disk := vfs.NewCrashableMem()
	if w.hasBackup {
		dir, err := os.MkdirTemp(w.tmpDir, "restore-")
		if err == nil {
			_ = os.Remove(dir)
			loc, lerr := backup.NewFileStore(filepath.Join(w.tmpDir, "backups"))
			err = lerr
			if err == nil {
				_, err = backup.Restore(context.Background(), loc, w.prefix, dir, []byte(signingKey))
			}
			if err == nil {
				err = copyIn(dir, disk, storeDir)
			}
		}
		if err != nil {
			w.violate("1", "restore from the last backup failed: %v", err)
		}
		w.inc = fmt.Sprintf("%016x", w.rng.Uint64())
	}
	// Seq reuse across a host loss is only a reuse if the lost hook is
	// still somewhere: a hook that never reached the log died with the host.
	w.mu.Lock()
	for s, id := range w.seqID {
		if !w.landed[id] {
			delete(w.seqID, s)
		}
	}
	// R likewise: a hook that never reached the log died with the host,
	// and a release from a restored pen row is its first commit again.
	for id := range w.idSeqs {
		if !w.landed[id] {
			delete(w.idSeqs, id)
		}
	}
	w.mu.Unlock()
	w.disk = disk
	time.Sleep(time.Duration(500+w.rng.IntN(2000)) * time.Millisecond)
	w.mustBoot()
	if n := w.current(); n != nil {
		w.excuseHeldLost(n)
	}
}

func (w *world) mustBoot() {
	if err := w.boot(); err != nil {
		w.violate("5", "boot failed: %v", err)
	}
}

// ---- backup --------------------------------------------------------------

// memCheckpointer lets the real Backuper checkpoint a store that lives on
// the in-memory disk: Pebble's checkpoint is taken inside the disk, then
// copied to the directory the Backuper uploads from.
type memCheckpointer struct {
	st   *store.Store
	disk vfs.FS
	n    int
}

func (c *memCheckpointer) ID() string { return c.st.ID() }

func (c *memCheckpointer) Checkpoint(dir string) error {
	c.n++
	mem := fmt.Sprintf("/checkpoints/%d", c.n)
	if err := c.st.Checkpoint(mem); err != nil {
		return err
	}
	defer func() { _ = c.disk.RemoveAll(mem) }()
	return copyOut(c.disk, mem, dir)
}

func (w *world) backup() {
	n := w.current()
	if n == nil {
		return
	}
	loc, err := backup.NewFileStore(filepath.Join(w.tmpDir, "backups"))
	if err != nil {
		w.tracef("backup: %v", err)
		return
	}
	b, err := backup.New(backup.Options{
		Primary: loc, Prefix: w.prefix, SigningKey: []byte(signingKey), Keep: 2,
		Store: &memCheckpointer{st: n.st, disk: w.disk}, TempDir: filepath.Join(w.tmpDir, "tmp"), Logger: discard,
		IntakeOffset: func() int64 {
			if v, err := n.st.Get(store.KeyIntakeOffset); err == nil {
				if o, ok := store.ParseU64(v); ok {
					return int64(o)
				}
			}
			return -1
		},
	})
	if err == nil {
		_, err = b.Run(context.Background())
	}
	if err != nil {
		w.tracef("backup failed")
		return
	}
	w.hasBackup = true
	w.tracef("backup taken")
}

func copyOut(fs vfs.FS, src, dst string) error {
	if err := os.MkdirAll(dst, 0o750); err != nil {
		return err
	}
	names, err := fs.List(src)
	if err != nil {
		return err
	}
	for _, name := range names {
		p := fs.PathJoin(src, name)
		fi, err := fs.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if err := copyOut(fs, p, filepath.Join(dst, name)); err != nil {
				return err
			}
			continue
		}
		in, err := fs.Open(p)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(in)
		_ = in.Close()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// copyIn copies a restored directory onto the in-memory disk, synced (a
// restore fsyncs every file and directory).
func copyIn(src string, fs *vfs.MemFS, dst string) error {
	if err := fs.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(src, e.Name())
		if e.IsDir() {
			if err := copyIn(p, fs, fs.PathJoin(dst, e.Name())); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := fs.Create(fs.PathJoin(dst, e.Name()), vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		_ = f.Close()
	}
	for d := dst; ; d = fs.PathDir(d) {
		df, err := fs.OpenDir(d)
		if err != nil {
			return err
		}
		_ = df.Sync()
		_ = df.Close()
		if fs.PathDir(d) == d {
			break
		}
	}
	return nil
}

// retain simulates the log's retention: records that landed more than
// `retention` ago are dropped. The simulator remembers which hooks only the
// dropped prefix held, for an operator's accepted gap.
func (w *world) retain() {
	n := w.current()
	if n == nil {
		return
	}
	cut := time.Now().Add(-retention)
	w.lmu.Lock()
	upto := intake.Position(-1)
	for _, s := range w.logSamples {
		if !s.at.After(cut) {
			upto = s.last
		}
	}
	w.lmu.Unlock()
	earliest, _ := n.log.Earliest(context.Background())
	if upto < earliest {
		return
	}
	recs := n.log.Records()
	if err := n.log.Truncate(upto); err != nil {
		return
	}
	w.mu.Lock()
	for i, r := range recs {
		if pos := earliest + intake.Position(i); pos <= upto && r.Node == nodeID {
			w.dropped[r.ID] = max(w.dropped[r.ID], pos)
		}
	}
	w.tracefLocked("retention drops the log up to %d", upto)
	w.mu.Unlock()
}

// ---- the log wrapper -----------------------------------------------------

// errDeadProcess is what a dead process's calls get.
var errDeadProcess = errors.New("sim: the process is dead")

// simIntake is the memory intake as the node sees it, with the faults the
// memory log has no hook for: duplicated appends (a producer's retry) and
// delayed ones (publishes that land out of order). It also records which
// hooks landed in the log, for rules 2 and 4.
type simIntake struct {
	*memory.Log
	w *world
	n *node
}

func (s *simIntake) PublishBatch(ctx context.Context, recs []intake.Record) (intake.Position, error) {
	if s.n.dead.Load() {
		return -1, &intake.Error{Class: intake.Unavailable, Err: errDeadProcess}
	}
	w := s.w
	w.lmu.Lock()
	var delay time.Duration
	if len(w.delayNext) > 0 {
		delay, w.delayNext = w.delayNext[0], w.delayNext[1:]
	}
	dup := w.dupNext > 0
	if dup {
		w.dupNext--
	}
	w.lmu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return -1, &intake.Error{Class: intake.Unavailable, Err: ctx.Err()}
		case <-s.n.deadCh:
			t.Stop()
			return -1, &intake.Error{Class: intake.Unavailable, Err: errDeadProcess}
		}
		if s.n.dead.Load() {
			return -1, &intake.Error{Class: intake.Unavailable, Err: errDeadProcess}
		}
	}
	pos, err := s.Log.PublishBatch(ctx, recs)
	landed := err == nil || errors.Is(err, memory.ErrAckLost)
	if landed && dup && !s.n.dead.Load() {
		_, _ = s.Log.PublishBatch(context.Background(), recs)
	}
	w.mu.Lock()
	for _, r := range recs {
		w.attempted[r.ID]++
		w.landed[r.ID] = w.landed[r.ID] || landed
		w.confirmed[r.ID] = w.confirmed[r.ID] || err == nil
	}
	if errors.Is(err, memory.ErrInjected) || delay > 0 || (landed && dup) {
		w.injected.publish++
	}
	w.mu.Unlock()
	w.lmu.Lock()
	w.logSamples = append(w.logSamples, logSample{at: time.Now(), last: s.Log.Last()})
	w.lmu.Unlock()
	return pos, err
}

// ---- sinks ---------------------------------------------------------------

// simSink is a delivery target that records what it got; schedule events
// make it fail or hang for a while, and sink b refuses a seeded few hooks
// for good (they dead-letter).
type simSink struct {
	w  *world
	n  *node
	id string
}

func (s *simSink) Close() error { return nil }

// simNoIOSink is a simSink that does no I/O (sink l).
type simNoIOSink struct{ *simSink }

func (simNoIOSink) NoIO() {}

func (s *simSink) Deliver(ctx context.Context, m *sink.Message) error {
	if s.n.dead.Load() {
		return errDeadProcess
	}
	w := s.w
	now := time.Now()
	w.mu.Lock()
	fail, hang := now.Before(w.sinkFail[s.id]), now.Before(w.sinkHang[s.id])
	w.mu.Unlock()
	if hang {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.n.deadCh:
			return errDeadProcess
		}
	}
	if fail {
		return errors.New("sim: sink down")
	}
	sum := sha256.Sum256(m.Body)
	if s.id == "b" && sum[0] < 8 {
		return sink.Permanent(errors.New("sim: sink b refuses this body"))
	}
	if s.n.dead.Load() {
		return errDeadProcess
	}
	id := [16]byte(m.ID)
	w.mu.Lock()
	defer w.mu.Unlock()
	if a := w.acks[id]; a != nil && sha256.Sum256(a.body) != sum {
		w.violateLocked("1", "delivery to %s of an acked hook carries a different body", s.id)
	}
	if h := w.held[id]; h != nil && sha256.Sum256(h.body) != sum {
		w.violateLocked("Q", "delivery to %s of a released hook (req %d) carries a different body", s.id, h.req)
	}
	w.noteSeqLocked(id, m.Seq, "delivered")
	w.noteResentLocked(m.ReplayID, s.id)
	got := w.delivered[id]
	if got == nil {
		got = map[string][32]byte{}
		w.delivered[id] = got
	}
	for _, prev := range got {
		if prev != sum {
			w.violateLocked("1", "one hook delivered with two different bodies")
		}
	}
	got[s.id] = sum
	return nil
}

// fullyDelivered reports whether every sink of the hook's source got it
// (the dispatcher may then have reclaimed its rows). REQUIRES: w.mu held.
func (w *world) fullyDeliveredLocked(id [16]byte, source string) bool {
	got := w.delivered[id]
	for _, s := range sources[source] {
		if _, ok := got[s]; !ok {
			return false
		}
	}
	return true
}

func (w *world) stopAll() {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	if n := w.current(); n != nil {
		w.kill(n)
	}
	synctest.Wait()
}

// archive is the history's archive: a file store beside the backups,
// outside the node's disk, so a crash or a host loss keeps what it holds.
func (w *world) archive() (*archive.Archive, error) {
	loc, err := backup.NewFileStore(filepath.Join(w.tmpDir, "archive"))
	if err != nil {
		return nil, err
	}
	return archive.New(archive.Options{Store: loc, Prefix: w.prefix, SigningKey: []byte(signingKey), Logger: discard})
}
