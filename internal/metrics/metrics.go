// Package metrics turns the callbacks of the edge and the commit path into
// Prometheus series. The core packages never import Prometheus: they call an
// Observer interface (queue.Observer, the edge's Observer) that Metrics
// implements, and the registry is passed in by the wiring, never a promauto
// global.
//
// Series names are part of the operator contract (CONTRACTS.md, "Metrics"):
// renaming one breaks dashboards and alerts.
//
// Cardinality: every label value comes from a fixed set below or from a
// configured source id, never from request input, so the series count does
// not grow with traffic, tenants or scanners.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
)

// Outcome label values of ankusa_ingest_requests_total. The edge passes one
// of these; anything else is counted as OutcomeOther so a caller's mistake
// cannot mint series.
const (
	OutcomeAccepted  = "accepted"
	OutcomeDuplicate = "duplicate"
	OutcomeRefused   = "refused"
	OutcomeRejected  = "rejected"
	// OutcomeQuarantined: 202, held in the quarantine pen.
	OutcomeQuarantined = "quarantined"
	OutcomeOther       = "other"
)

// Refusal reasons of ankusa_ingest_refused_total. A reason outside this set
// is counted as ReasonOther.
const (
	ReasonOverload         = "overload"
	ReasonStoreUnavailable = "store_unavailable"
	ReasonPayloadTooLarge  = "payload_too_large"
	ReasonInvalidHeader    = "invalid_header"
	ReasonBodyReadFailed   = "body_read_failed"
	ReasonUnknownSource    = "unknown_source"
	ReasonClosed           = "closed"
	ReasonIntakeUnavail    = "intake_unavailable"
	ReasonIntakePending    = "intake_pending"
	ReasonVerifyFailed     = "verification_failed"
	ReasonRateLimited      = "rate_limited"
	ReasonQuarantineRate   = "quarantine_rate_limited"
	ReasonQuarantineFull   = "quarantine_full"
	// A connection refused at the ingest listener's cap (a canned 503).
	ReasonMaxConns      = "max_conns"
	ReasonMaxConnsPerIP = "max_conns_per_ip"
	ReasonDedupePending = "dedupe_pending"
	ReasonDedupeUnavail = "dedupe_unavailable"
	ReasonSinkUnavail   = "sink_unavailable" // wal.type: none
	ReasonOther         = "other"
)

var outcomes = []string{OutcomeAccepted, OutcomeDuplicate, OutcomeRefused, OutcomeRejected, OutcomeQuarantined}

var reasons = []string{
	ReasonOverload, ReasonStoreUnavailable, ReasonPayloadTooLarge, ReasonInvalidHeader,
	ReasonBodyReadFailed, ReasonUnknownSource, ReasonClosed, ReasonIntakeUnavail, ReasonIntakePending,
	ReasonVerifyFailed, ReasonRateLimited, ReasonQuarantineRate, ReasonQuarantineFull,
	ReasonMaxConns, ReasonMaxConnsPerIP, ReasonDedupePending, ReasonDedupeUnavail, ReasonSinkUnavail,
}

// Buckets, in seconds. An ingest spans a group commit and one fsync; an
// apply is memory work; an fsync on a sick disk can take seconds, and those
// are exactly the ones an operator needs to see.
var (
	ingestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	applyBuckets  = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	syncBuckets   = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// 1, 2, 4, … 4096 records per group.
	batchBuckets = prometheus.ExponentialBuckets(1, 2, 13)
	// A publish to the intake log is a quorum confirm of a few ms, and the
	// dual ack's budget is that confirm plus 2 ms: every 0.5 ms from 4 to
	// 10 ms, so a p50 near a 5 ms confirm reads to 0.25 ms (with syncBuckets'
	// 5 and 10 ms, any publish in between read as about 7.5 ms; issue 14).
	publishBuckets = []float64{.0005, .001, .002, .003, .004, .0045, .005, .0055, .006, .0065, .007, .0075, .008, .0085,
		.009, .0095, .01, .015, .02, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
)

// Metrics holds every series of one instance, registered on the registry
// given to New. It is safe for concurrent use.
type Metrics struct {
	reg         *prometheus.Registry
	fleetClaims *prometheus.CounterVec // op, result; nil unless dedupe.scope: fleet

	ingestRequests *prometheus.CounterVec // source_id, outcome
	ingestDuration prometheus.Histogram
	ingestRefused  *prometheus.CounterVec // reason
	handshakes     *prometheus.CounterVec // source_id, provider
	loadShed       prometheus.Counter

	commitDuration prometheus.Histogram
	commitBatch    prometheus.Histogram
	syncDuration   prometheus.Histogram
	syncFailures   prometheus.Counter

	intakePublish    *prometheus.HistogramVec // outcome; nil unless InitIntake
	intakeFailures   *prometheus.CounterVec   // class
	intakeRefused    *prometheus.CounterVec   // reason
	intakeReconciled *prometheus.CounterVec   // half
	intakeReplay     *prometheus.CounterVec   // result
	intakeReplayDur  prometheus.Gauge

	backupOnce sync.Once
	backupRuns *prometheus.CounterVec // result

	deliveries       *prometheus.CounterVec // result, sink
	deliveryDuration prometheus.Histogram
	deadLettered     prometheus.Counter
}

// Dispatch reports through this interface.
var _ dispatch.Observer = (*Metrics)(nil)

// The commit path reports through this interface.
var _ queue.Observer = (*Metrics)(nil)

// New creates the series and registers them on reg. It panics if reg
// already holds one of them (a wiring mistake: build one Metrics per
// registry).
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		reg: reg,
		ingestRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ankusa_ingest_requests_total",
			Help: "Ingest requests answered, by configured source id and outcome (accepted, duplicate, refused, rejected).",
		}, []string{"source_id", "outcome"}),
		ingestDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ankusa_ingest_duration_seconds",
			Help:    "Time from the start of an ingest request to its answer.",
			Buckets: ingestBuckets,
		}),
		ingestRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ankusa_ingest_refused_total",
			Help: "Ingest requests refused, by reason.",
		}, []string{"reason"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ankusa_ingest_handshakes_total",
			Help: "Provider handshakes answered (stored and delivered nothing), by configured source id and provider.",
		}, []string{"source_id", "provider"}),
		loadShed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ankusa_load_shed_total",
			Help: "Ingest requests shed because the batcher was full or a record waited past its deadline.",
		}),
		commitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ankusa_wal_commit_duration_seconds",
			Help:    "Time to build and apply one group commit (without its fsync).",
			Buckets: applyBuckets,
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ankusa_wal_commit_batch_size",
			Help:    "Records taken from the batcher per group commit.",
			Buckets: batchBuckets,
		}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ankusa_wal_sync_duration_seconds",
			Help:    "Duration of one WAL fsync, failed ones included.",
			Buckets: syncBuckets,
		}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ankusa_wal_sync_failures_total",
			Help: "WAL fsyncs that failed; each one fences the store until the unsynced groups are removed.",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ankusa_dispatch_deliveries_total",
			Help: "Delivery attempts finished, by result (delivered, retry, dead) and configured sink id.",
		}, []string{"result", "sink"}),
		deliveryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ankusa_dispatch_attempt_duration_seconds",
			Help:    "Duration of one delivery attempt.",
			Buckets: ingestBuckets,
		}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ankusa_dispatch_dead_lettered_total",
			Help: "Deliveries moved to the dead-letter queue (permanent error or attempts exhausted).",
		}),
	}
	reg.MustRegister(
		m.ingestRequests, m.ingestDuration, m.ingestRefused, m.handshakes, m.loadShed,
		m.commitDuration, m.commitBatch, m.syncDuration, m.syncFailures,
		m.deliveries, m.deliveryDuration, m.deadLettered,
	)
	// Every reason exists from the start at 0, so rate() and alerts work
	// before the first refusal.
	for _, r := range reasons {
		m.ingestRefused.WithLabelValues(r)
	}
	return m
}

// Ingest counts one answered ingest request and observes its duration.
//
// sourceID must be a configured source id (or the edge's single placeholder
// for unknown sources), never a value read from the request: it becomes a
// label, and request input there would let any caller grow the series count
// without bound. outcome is one of the Outcome constants; any other value is
// counted as OutcomeOther.
func (m *Metrics) Ingest(sourceID, outcome string, d time.Duration) {
	m.ingestRequests.WithLabelValues(sourceID, normalise(outcome, outcomes, OutcomeOther)).Inc()
	m.ingestDuration.Observe(d.Seconds())
}

// IngestRefused counts one refusal. reason is one of the Reason constants
// (anything else is counted as ReasonOther); ReasonOverload also counts as
// load shed.
func (m *Metrics) IngestRefused(reason string) {
	reason = normalise(reason, reasons, ReasonOther)
	m.ingestRefused.WithLabelValues(reason).Inc()
	if reason == ReasonOverload {
		m.loadShed.Inc()
	}
}

// Handshakes are the provider values of ankusa_ingest_handshakes_total; any
// other value is counted as ReasonOther.
var handshakeProviders = []string{"slack", "zoom", "meta", "discord", "msgraph", "dropbox"}

// Handshake counts one answered provider handshake (edge.HandshakeObserver).
// sourceID is a configured source id, provider one of handshakeProviders:
// both fixed sets, never request input.
func (m *Metrics) Handshake(sourceID, provider string) {
	m.handshakes.WithLabelValues(sourceID, normalise(provider, handshakeProviders, ReasonOther)).Inc()
}

// Group implements queue.Observer: one group commit of records taken from
// the batcher (written of them were new hooks), applied in apply.
func (m *Metrics) Group(records, written int, apply time.Duration) {
	m.commitBatch.Observe(float64(records))
	m.commitDuration.Observe(apply.Seconds())
}

// Sync implements queue.Observer: one WAL fsync.
func (m *Metrics) Sync(d time.Duration, err error) {
	m.syncDuration.Observe(d.Seconds())
	if err != nil {
		m.syncFailures.Inc()
	}
}

// WatchQueue registers the gauges read at scrape time: the queue's counters
// (stats) and the store's size on disk (diskBytes). Both functions must be
// cheap and safe for concurrent use. Call it once: a second call panics
// because the series are already registered.
func (m *Metrics) WatchQueue(stats func() queue.Stats, diskBytes func() uint64) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	m.reg.MustRegister(
		gauge("ankusa_store_hooks", "Hooks in the store.",
			func() float64 { return float64(stats().Hooks) }),
		gauge("ankusa_store_deliveries", "Delivery rows in the store.",
			func() float64 { return float64(stats().Deliveries) }),
		gauge("ankusa_store_disk_bytes", "Size of the store on disk, as Pebble reports it.",
			func() float64 { return float64(diskBytes()) }),
		gauge("ankusa_wal_next_seq", "The seq the next hook will get.",
			func() float64 { return float64(stats().NextSeq) }),
		gauge("ankusa_wal_durable_seq", "The highest seq covered by a successful WAL fsync.",
			func() float64 { return float64(stats().DurableSeq) }),
		gauge("ankusa_queue_depth", "Records in the batcher: queued or awaiting their fsync.",
			func() float64 { return float64(stats().Queued) }),
	)
}

// normalise returns v if it is in set, otherwise other.
func normalise(v string, set []string, other string) string {
	for _, s := range set {
		if s == v {
			return v
		}
	}
	return other
}

// Delivery implements dispatch.Observer. sinkID is a configured sink id and
// result one of delivered, retry, dead: both fixed sets.
func (m *Metrics) Delivery(sinkID, result string, d time.Duration) {
	// The total first: a scrape that sees deliveries{result="dead"} rise
	// then also sees dead_lettered_total, never one without the other.
	if result == "dead" {
		m.deadLettered.Inc()
	}
	m.deliveryDuration.Observe(d.Seconds())
	m.deliveries.WithLabelValues(result, sinkID).Inc()
}

// WatchDispatch registers the delivery queue gauges, read at scrape time.
func (m *Metrics) WatchDispatch(gauges func() dispatch.Gauges) {
	// The gauges read the store: a scrape during a store fault answers the
	// last reading instead of hanging (none before the first).
	lg := &lastGood[dispatch.Gauges]{fn: gauges}
	m.reg.MustRegister(&dispatchCollector{gauges: lg.get})
}

// dispatchCollector reads the gauges once per scrape (they read the
// store). ok false: no reading yet, and no series is reported.
type dispatchCollector struct {
	gauges func() (g dispatch.Gauges, ok bool)
}

var (
	descPending  = prometheus.NewDesc("ankusa_queue_pending", "Delivery rows due or waiting for a retry.", nil, nil)
	descInflight = prometheus.NewDesc("ankusa_queue_inflight", "Delivery rows claimed by dispatch (waiting for a worker or being attempted); returned to due at restart.", nil, nil)
	descDead     = prometheus.NewDesc("ankusa_queue_dead", "Delivery rows in the dead-letter queue.", nil, nil)
	descOldest   = prometheus.NewDesc("ankusa_queue_oldest_due_age_seconds", "How long the oldest due row has waited (dispatch lag).", nil, nil)
	descHistHook = prometheus.NewDesc("ankusa_history_hooks", "Delivered hooks kept by retention.delivered.", nil, nil)
	descHistByte = prometheus.NewDesc("ankusa_history_bytes", "Body bytes of the delivered hooks kept; bounded by retention.max_bytes (the oldest go first past it).", nil, nil)
	descArchived = prometheus.NewDesc("ankusa_archive_hooks_total", "Delivered hooks written to the archive (archive.enabled) since start.", nil, nil)
	descArchErrs = prometheus.NewDesc("ankusa_archive_errors_total", "Archive sweep passes that failed; their hooks stay local and are retried.", nil, nil)
)

func (c *dispatchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPending
	ch <- descInflight
	ch <- descDead
	ch <- descOldest
	ch <- descHistHook
	ch <- descHistByte
	ch <- descArchived
	ch <- descArchErrs
}

func (c *dispatchCollector) Collect(ch chan<- prometheus.Metric) {
	g, ok := c.gauges()
	if !ok {
		return // absent, not 0: nothing was measured yet
	}
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(g.Pending))
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(g.Inflight))
	ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(g.Dead))
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, g.OldestDueAge.Seconds())
	ch <- prometheus.MustNewConstMetric(descHistHook, prometheus.GaugeValue, float64(g.HistoryHooks))
	ch <- prometheus.MustNewConstMetric(descHistByte, prometheus.GaugeValue, float64(g.HistoryBytes))
	ch <- prometheus.MustNewConstMetric(descArchived, prometheus.CounterValue, float64(g.ArchivedHooks))
	ch <- prometheus.MustNewConstMetric(descArchErrs, prometheus.CounterValue, float64(g.ArchiveErrors))
}

// Dual reports through this interface.
var _ queue.DualObserver = (*Metrics)(nil)

var (
	intakeClasses   = []string{"ok", "unavailable", "throttled", "not_found", "permanent"}
	intakeRefusals  = []string{"breaker", "backlog", "pending_dedupe", "record_too_large"}
	intakeHalves    = []string{"local", "log"}
	descIntakeRecs  = prometheus.NewDesc("ankusa_intake_pending_records", "Records not yet confirmed in both the store and the intake log.", nil, nil)
	descIntakeBytes = prometheus.NewDesc("ankusa_intake_pending_bytes", "Bytes held by the pending set.", nil, nil)
	descIntakeAge   = prometheus.NewDesc("ankusa_intake_reconcile_oldest_age_seconds", "Age of the oldest pending record.", nil, nil)
	descIntakeStuck = prometheus.NewDesc("ankusa_intake_reconcile_stuck", "Pending records past intake.reconcile_deadline_ms (alert when > 0).", nil, nil)
	descIntakeLag   = prometheus.NewDesc("ankusa_intake_offset_lag_seconds", "Time since the stored intake offset last covered every record the log confirmed (alert above 3 x intake.offset_flush_ms).", nil, nil)
	descIntakeReady = prometheus.NewDesc("ankusa_intake_ready", "1 when the intake gate is closed and the log answers, else 0.", nil, nil)
)

var (
	fleetOps     = []string{"claim", "promote", "release", "ping"}
	fleetResults = []string{"ok", "error"}
)

// InitFleet registers ankusa_fleet_claims_total{op,result} and
// ankusa_fleet_redis_up (dedupe.scope: fleet only); up is read at scrape.
func (m *Metrics) InitFleet(up func() bool) {
	m.fleetClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ankusa_fleet_claims_total", Help: "Calls to the fleet dedupe claim store (Redis), by operation and result.",
	}, []string{"op", "result"})
	for _, op := range fleetOps {
		for _, r := range fleetResults {
			m.fleetClaims.WithLabelValues(op, r)
		}
	}
	m.reg.MustRegister(m.fleetClaims, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ankusa_fleet_redis_up", Help: "1 when the last call to the fleet claim store succeeded, else 0 (ingest of dedupe-keyed hooks answers 503).",
	}, func() float64 {
		if up() {
			return 1
		}
		return 0
	}))
}

// FleetClaim counts one claim store call (dedupe.FleetObserver).
func (m *Metrics) FleetClaim(op, result string) {
	if m.fleetClaims == nil {
		return
	}
	m.fleetClaims.WithLabelValues(normalise(op, fleetOps, "claim"), normalise(result, fleetResults, "error")).Inc()
}

// InitIntake registers the ankusa_intake_* series (wal.type: dual only) and
// the gauges read from stats at scrape time.
func (m *Metrics) InitIntake(stats func() (queue.DualStats, bool)) {
	m.intakePublish = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ankusa_intake_publish_duration_seconds", Help: "One publish to the intake log, by outcome.",
		Buckets: publishBuckets,
	}, []string{"outcome"})
	m.intakeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ankusa_intake_failures_total", Help: "Failed publishes to the intake log, by class.",
	}, []string{"class"})
	m.intakeRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ankusa_intake_refused_total", Help: "Records refused before any seq under dual, by reason.",
	}, []string{"reason"})
	m.intakeReconciled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ankusa_intake_reconciled_total", Help: "Carried halves completed by the reconciler, by half.",
	}, []string{"half"})
	for _, c := range intakeClasses {
		m.intakePublish.WithLabelValues(c)
		if c != "ok" {
			m.intakeFailures.WithLabelValues(c)
		}
	}
	for _, r := range intakeRefusals {
		m.intakeRefused.WithLabelValues(r)
	}
	for _, h := range intakeHalves {
		m.intakeReconciled.WithLabelValues(h)
	}
	m.intakeReplay = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ankusa_intake_replay_total", Help: "Records of the boot replay, by result.",
	}, []string{"result"})
	for _, r := range []string{"applied", "present", "collision", "unroutable", "skipped_unknown"} {
		m.intakeReplay.WithLabelValues(r)
	}
	m.intakeReplayDur = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ankusa_intake_replay_duration_seconds", Help: "How long the last boot recovery (replay and republish) took.",
	})
	m.reg.MustRegister(m.intakePublish, m.intakeFailures, m.intakeRefused, m.intakeReconciled,
		m.intakeReplay, m.intakeReplayDur, &intakeCollector{stats: stats})
}

// IntakePublish implements queue.DualObserver.
func (m *Metrics) IntakePublish(d time.Duration, class string) {
	if m.intakePublish == nil {
		return
	}
	if !contains(intakeClasses, class) {
		class = "unavailable"
	}
	m.intakePublish.WithLabelValues(class).Observe(d.Seconds())
	if class != "ok" {
		m.intakeFailures.WithLabelValues(class).Inc()
	}
}

// IntakeRefused implements queue.DualObserver.
func (m *Metrics) IntakeRefused(reason string) {
	if m.intakeRefused != nil && contains(intakeRefusals, reason) {
		m.intakeRefused.WithLabelValues(reason).Inc()
	}
}

// IntakeReconciled implements queue.DualObserver.
func (m *Metrics) IntakeReconciled(half string) {
	if m.intakeReconciled != nil && contains(intakeHalves, half) {
		m.intakeReconciled.WithLabelValues(half).Inc()
	}
}

func contains(set []string, v string) bool {
	for _, s := range set {
		if s == v {
			return true
		}
	}
	return false
}

type intakeCollector struct {
	stats func() (queue.DualStats, bool)
}

func (c *intakeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIntakeRecs, descIntakeBytes, descIntakeAge, descIntakeStuck, descIntakeLag, descIntakeReady} {
		ch <- d
	}
}

func (c *intakeCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.stats()
	if !ok {
		return
	}
	ready := 0.0
	if s.Ready && !s.GateOpen {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descIntakeRecs, prometheus.GaugeValue, float64(s.Pending.Records))
	ch <- prometheus.MustNewConstMetric(descIntakeBytes, prometheus.GaugeValue, float64(s.Pending.Bytes))
	ch <- prometheus.MustNewConstMetric(descIntakeAge, prometheus.GaugeValue, s.Pending.OldestAge.Seconds())
	ch <- prometheus.MustNewConstMetric(descIntakeStuck, prometheus.GaugeValue, float64(s.Pending.Stuck))
	ch <- prometheus.MustNewConstMetric(descIntakeLag, prometheus.GaugeValue, s.OffsetLag.Seconds())
	ch <- prometheus.MustNewConstMetric(descIntakeReady, prometheus.GaugeValue, ready)
}

// BackupRun counts one backup run by result (ok | refused | error |
// secondary_failed). REQUIRES: WatchBackupAge called first (at wiring).
func (m *Metrics) BackupRun(result string, _ time.Duration) {
	if m.backupRuns == nil {
		return // WatchBackupAge registers the series; backups are off
	}
	switch result {
	case "ok", "refused", "error", "secondary_failed":
	default:
		result = "error"
	}
	m.backupRuns.WithLabelValues(result).Inc()
}

// WatchBackupAge registers ankusa_backup_age_seconds (0 until the first
// successful backup of this process).
func (m *Metrics) WatchBackupAge(age func() time.Duration) {
	m.backupOnce.Do(func() {
		m.backupRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ankusa_backup_runs_total", Help: "Backup runs, by result.",
		}, []string{"result"})
		for _, r := range []string{"ok", "refused", "error", "secondary_failed"} {
			m.backupRuns.WithLabelValues(r)
		}
		m.reg.MustRegister(m.backupRuns)
	})
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ankusa_backup_age_seconds", Help: "Age of the newest successful backup taken by this process.",
	}, func() float64 { return age().Seconds() }))
}

// IntakeReplay records a boot recovery's counts and duration.
func (m *Metrics) IntakeReplay(applied, present, collided, unroutable, skipped int, d time.Duration) {
	if m.intakeReplay == nil {
		return
	}
	m.intakeReplay.WithLabelValues("applied").Add(float64(applied))
	m.intakeReplay.WithLabelValues("present").Add(float64(present))
	m.intakeReplay.WithLabelValues("collision").Add(float64(collided))
	m.intakeReplay.WithLabelValues("unroutable").Add(float64(unroutable))
	m.intakeReplay.WithLabelValues("skipped_unknown").Add(float64(skipped))
	m.intakeReplayDur.Set(d.Seconds())
}
