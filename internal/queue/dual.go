// The dual commit of wal.type: dual (ADR sections 2-7), split by concern:
// this file owns its options, refusals, observer and the shared state
// (dualState) every part reads; dual_join.go joins a group's two halves
// and answers its callers; dual_publish.go is the log half's group
// commit; dual_reconcile.go completes carried records; dual_marks.go keeps
// the watermark and offset.

package queue

import (
	"errors"
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
	// both places (by its dedupe key, or by its own id: ack rule 7). 503
	// with Retry-After: 1 — never a 201 duplicate.
	ErrIntakePending = errors.New("queue: intake pending")
)

// recordBound is intake.RecordBound of r's log record: its envelope's exact
// encoded size (store.EnvelopeSize) framed as this node's record.
func (d *dualState) recordBound(r *Record) int64 {
	env := store.Envelope{
		Tenant: r.Tenant, Source: r.Source, ContentType: r.ContentType, DedupeKey: r.DedupeKey,
		Headers: r.Headers, Body: r.Body,
	}
	rec := intake.Record{
		Version: intake.RecordVersion, Kind: intake.KindHook, Node: d.node, Incarnation: d.incarnation,
		Tenant: r.Tenant, Source: r.Source,
	}
	return intake.RecordBound(&rec, store.EnvelopeSize(&env))
}

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
	IntakeRefused(reason string)                 // breaker | backlog | pending_dedupe | pending_id | record_too_large
	IntakeReconciled(half string)                // local | log
}

// NopDualObserver ignores everything.
type NopDualObserver struct{}

func (NopDualObserver) IntakePublish(time.Duration, string) {}
func (NopDualObserver) IntakeRefused(string)                {}
func (NopDualObserver) IntakeReconciled(string)             {}

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
	// spend hands an answered group's replies slice back to the writer
	// (syncer.spend).
	spend   func([]pendingReply)
	log     *slog.Logger
	now     func() time.Time
	wakeRec chan struct{} // capacity 1
	pub     *publisher
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
