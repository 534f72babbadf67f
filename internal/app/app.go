// Package app wires one Ankusa instance from a Config: store, queue, edge,
// operator API and metrics. Everything hangs off the Instance, so two
// instances can run in one test process.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ankusa/ankusa/internal/admin"
	"github.com/ankusa/ankusa/internal/archive"
	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/direct"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/listen"
	"github.com/ankusa/ankusa/internal/metrics"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/ratelimit"
	"github.com/ankusa/ankusa/internal/ratelog"
	"github.com/ankusa/ankusa/internal/sink"
	apisources "github.com/ankusa/ankusa/internal/sources"
	"github.com/ankusa/ankusa/internal/store"
)

// Options are the test seams of an instance.
type Options struct {
	Logger *slog.Logger
	// FS replaces the real disk under the store (errorfs, crashable mem).
	FS store.FS
	// OnFatal is called when the store cannot be reopened after a failure;
	// the binary exits with ExitStoreFatal. Nil only logs.
	OnFatal func(error)
	// Version and Commit (the build's, stamped by -ldflags) are shown by
	// /health and the startup log.
	Version string
	Commit  string
}

// ExitStoreFatal is the exit status when the store cannot be reopened after
// a failed write: distinct from a config error (78) so a supervisor can
// tell "restart me" from "fix me" (EX_TEMPFAIL).
const ExitStoreFatal = 75

// logRepeatInterval: a warning or error of the same shape is logged at
// most once per interval (internal/ratelog).
const logRepeatInterval = 10 * time.Second

// ErrStoreOpen: New could not open (or first write) the store, a full or
// failing disk most often. The binary exits ExitStoreOpen before anything
// listens.
var ErrStoreOpen = errors.New("cannot open the store")

// ExitStoreOpen is the exit status when the store cannot be opened at
// start (EX_IOERR): restart once the disk is fixed.
const ExitStoreOpen = 74

// ErrDrainIncomplete: Stop's drain hit its deadline with requests still in
// progress; they were cut. The binary exits 1.
var ErrDrainIncomplete = errors.New("shutdown drain did not finish")

// Instance is one running node.
type Instance struct {
	cfg      *config.Config
	log      *slog.Logger
	store    *store.Store
	queue    *queue.Queue
	disp     *dispatch.Dispatcher
	pen      *quarantine.Pen
	targets  map[uint16]dispatch.Target
	intake   intake.Intake // nil under wal.type: disk
	metrics  *metrics.Metrics
	reg      *prometheus.Registry
	version  string
	opts     Options
	nums     map[store.SinkRef]uint16
	restored bool // the store came from a backup (its restore marker is still there)
	storeDir string
	// apiSources is nil unless source_store.type: persistent.
	apiSources *apisources.Manager
	stopped    atomic.Bool
	// recovering: boot recovery is running; ingest and /ready answer 503.
	recovering atomic.Bool
	backups    *backup.Scheduler // nil unless backup.enabled
	// archive and closeArchive are nil unless archive.enabled.
	archive      *archive.Archive
	closeArchive func()
	limiter      *ratelimit.GCRA
	sources      *edge.Registry
	// fleet and settler are nil unless dedupe.scope: fleet.
	fleet   *dedupe.FleetClaims
	settler *dedupe.Settler

	// The listeners' handlers and options are built by New; the servers
	// exist once StartContext has bound the ports.
	ingestOpts, adminOpts listen.Options
	ingest, adminSrv      *listen.Server
	ingestLn, adminLn     net.Listener
	certs                 []*certReloader // one per TLS listener; ReloadTLS swaps them

	// closers close every component New opened, in the drain's order.
	closers closers
	built   bool // New returned the instance: Stop's closers take the final backup
}

// New opens the store and builds every component; nothing listens yet.
func New(cfg *config.Config, o Options) (_ *Instance, err error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// A failing disk makes every write path report the same error many
	// times a second: one line per shape per interval, with a count.
	o.Logger = slog.New(ratelog.New(o.Logger.Handler(), logRepeatInterval, nil))
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Commit == "" {
		o.Commit = "unknown"
	}
	in := &Instance{cfg: cfg, log: o.Logger, version: o.Version, opts: o}
	// Certificates first: a bad file is a config error, found before the
	// store is opened.
	ingestTLS, adminTLS, err := in.loadTLS()
	if err != nil {
		return nil, err
	}
	in.reg = prometheus.NewRegistry()
	in.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	in.metrics = metrics.New(in.reg)

	// One cleanup path (closers.go): every component pushes its close once
	// it is open; a failed New runs the stack here, Stop runs it after the
	// listeners drained. The stack runs in reverse, so the pushes below are
	// the drain's order read bottom-up, and New opens the components in
	// the order that makes it so:
	//
	//  1. dispatch stops first: its cancelled attempts stay inflight and
	//     return to due at the next start, and nothing it uses (the API
	//     sources' sinks, the sinks, the archive) may close under it;
	//  2. the API sources' sinks close once dispatch no longer calls them;
	//  3. the queue syncs and answers its last groups (its records' 2xx
	//     wait for that fsync), publishing to the intake under dual;
	//  4. the fleet settler after the queue: its last held claims are
	//     settled, not dropped;
	//  5. the final backup after the queue's last sync, so its offset is
	//     the log head and a replacement replays nothing it did not need to;
	//  6. the archive, the sinks and the intake log, which nothing above
	//     uses any more;
	//  7. the store closes last.
	var cl closers
	defer func() {
		if err != nil {
			_ = cl.close(context.Background())
		}
	}()

	// A 64 MiB memtable: hooks are written and, once delivered, deleted soon
	// after, so most never need flushing; measured ~25% less CPU per 201.
	storeDir := filepath.Join(cfg.Node.DataDir, "store")
	if o.FS == nil {
		restored, err := restoreIfEmpty(context.Background(), cfg, storeDir, o.Logger)
		if err != nil {
			return nil, err
		}
		in.restored = restored
	}
	st, err := store.Open(store.Options{Dir: storeDir, FS: o.FS, Logger: o.Logger, MemTableSize: 64 << 20})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStoreOpen, err)
	}
	cl.push(func(context.Context) error { return st.Close() }) // (7)
	in.store = st
	in.storeDir = storeDir
	if o.FS == nil {
		restored, err := backup.MintIncarnation(incarnations{st}, storeDir)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStoreOpen, err)
		}
		in.restored = restored
		if restored && cfg.WAL.Type != "dual" {
			// Nothing checks a restored disk store against a log: done.
			if err := clearRestoreMarker(storeDir); err != nil {
				return nil, err
			}
		}
	}

	nums, err := sinkNumbers(st, cfg)
	if err != nil {
		return nil, err
	}
	in.nums = nums

	var dual *queue.DualOptions
	if cfg.WAL.Type == "dual" {
		if err := queue.StampNode(st, cfg.Intake.NodeID); err != nil {
			return nil, err
		}
		in.intake, err = openIntake(cfg, o.Logger)
		if err != nil {
			return nil, fmt.Errorf("open intake: %w", err)
		}
		cl.push(func(context.Context) error { _ = in.intake.Close(); return nil }) // (6)
		in.metrics.InitIntake(func() (queue.DualStats, bool) { return in.queue.Dual() })
		dual = dualOptions(cfg, in.intake, incarnation(st), in.metrics)
	}
	targets, err := buildTargets(cfg, nums, o.Logger)
	if err != nil {
		return nil, err
	}
	cl.pushFunc(func() { closeTargets(targets) }) // (6)
	in.targets = targets

	var arch dispatch.Archiver
	if cfg.Archive.Enabled {
		in.archive, in.closeArchive, err = openArchive(context.Background(), cfg, o.Logger)
		if err != nil {
			return nil, err
		}
		cl.pushFunc(in.closeArchive) // (6)
		arch = in.archive
	}
	if cfg.Backup.Enabled {
		in.backups, err = newScheduler(context.Background(), cfg, st, in.metrics.BackupRun, o.Logger)
		if err != nil {
			return nil, fmt.Errorf("backups: %w", err)
		}
		// (5) Stop takes the final backup; a New that fails only closes
		// the locations (in is never returned, so Stop cannot run).
		cl.push(func(ctx context.Context) error {
			if !in.built {
				in.backups.Close()
				return nil
			}
			return in.backups.Stop(ctx)
		})
		in.metrics.WatchBackupAge(in.backups.Age) // registers the runs counter too, before the first run
	}

	var claims dedupe.Claimer
	if cfg.Dedupe.Scope == "fleet" {
		in.fleet, err = dedupe.NewFleetClaims(dedupe.FleetOptions{
			URL: cfg.Fleet.Redis.URL, Prefix: cfg.Fleet.KeyPrefix,
			PendingTTL: time.Duration(cfg.Fleet.PendingTTLMs) * time.Millisecond,
			Timeout:    time.Duration(cfg.Fleet.Redis.TimeoutMs) * time.Millisecond,
			Observer:   in.metrics,
		})
		if err != nil {
			return nil, err
		}
		in.metrics.InitFleet(in.fleet.Up)
		// Sized like the pending set: every carried record may hold a claim.
		in.settler = dedupe.NewSettler(in.fleet, max(cfg.Intake.Pending.MaxRecords, 1024), o.Logger)
		cl.pushFunc(func() { in.settler.Stop(); _ = in.fleet.Close() }) // (4)
		claims = in.fleet
	}

	var disp *dispatch.Dispatcher // set below; the queue's OnDurable wakes it
	onFatal := o.OnFatal
	if onFatal == nil {
		onFatal = func(err error) { in.log.Error("store cannot be reopened", "err", err) }
	}
	// A node that dispatches takes its new hooks from memory (dispatch's
	// hot cache); one that only ingests leaves them to the store.
	var onCommitted func([]store.Committed)
	if in.hasRole("dispatch") {
		onCommitted = func(cs []store.Committed) {
			if disp != nil {
				disp.Committed(cs)
			}
		}
	}
	b := cfg.Batcher
	q, err := queue.New(st, queue.Options{
		Dual:          dual,
		Partitions:    b.Partitions,
		MaxBatch:      b.MaxBatch,
		MaxDelay:      time.Duration(b.MaxDelayMs) * time.Millisecond,
		MaxQueue:      b.MaxQueue,
		MaxQueueBytes: b.MaxQueueBytes,
		Deadline:      time.Duration(b.DeadlineMs) * time.Millisecond,
		SweepInterval: time.Duration(cfg.Dedupe.SweepIntervalMs) * time.Millisecond,
		SweepBatch:    cfg.Dedupe.SweepBatch,
		Observer:      in.metrics,
		Logger:        o.Logger,
		OnFatal:       onFatal,
		OnDurable: func() {
			if disp != nil {
				disp.Wake()
			}
		},
		OnCommitted: onCommitted,
	})
	if err != nil {
		return nil, err
	}
	cl.pushFunc(q.Close) // (3)
	in.queue = q
	pen, err := quarantine.New(st, quarantine.Options{
		MaxBytes: cfg.Quarantine.MaxBytes, Rate: cfg.Quarantine.Rate, Burst: cfg.Quarantine.Burst, Logger: o.Logger,
		OnStoreFailure: q.ReportStoreFailure,
	})
	if err != nil {
		return nil, err
	}
	in.pen = pen // boot recovery, which runs later, may delete rows under it (bootIntake)
	// in.sources is set below, before anything runs; the release reads it late.
	release := quarantine.NewRelease(pen, func(id string) (*edge.Source, bool) { return in.sources.Get(id) }, q)
	dc, rc := cfg.Dispatch, cfg.Retry
	disp = dispatch.New(st, dispatch.Options{
		Concurrency:      dc.Concurrency,
		MaxInflight:      dc.MaxInflight,
		MaxInflightBytes: dc.MaxInflightBytes,
		AttemptTimeout:   time.Duration(dc.AttemptTimeoutMs) * time.Millisecond,
		ScanBatch:        dc.ScanBatch,
		Poll:             time.Duration(dc.PollMs) * time.Millisecond,
		BreakerFailures:  dc.BreakerFailures,
		BreakerCooldown:  time.Duration(dc.BreakerCooldownMs) * time.Millisecond,
		Retry: dispatch.RetryPolicy{
			Base:        time.Duration(rc.BaseMs) * time.Millisecond,
			Max:         time.Duration(rc.MaxMs) * time.Millisecond,
			MaxAttempts: rc.MaxAttempts,
		},
		Retention:         cfg.Retention.DeliveredDuration(),
		RetentionMaxBytes: cfg.Retention.MaxBytes,
		SweepInterval:     time.Duration(cfg.Retention.SweepIntervalMs) * time.Millisecond,
		Archive:           arch,
		SegmentBytes:      cfg.Archive.SegmentBytes,
		// in.sources is set below, before anything runs.
		Route:     archiveRoute(func() *edge.Registry { return in.sources }),
		OnRestore: q.Restored,
		Targets:   targets,
		Release:   release,
		Durable:   q.Durable,
		OnReclaim: q.Reclaimed,
		// A failed write of the dispatcher's fences the queue, which
		// reopens the store (dispatch.Dispatcher.apply).
		OnStoreFailure: q.ReportStoreFailure,
		Observer:       in.metrics,
		Logger:         o.Logger,
	})
	in.disp = disp
	in.metrics.WatchDispatch(disp.Gauges)
	in.metrics.WatchQueue(q.Stats, st.DiskBytes)

	deps := admin.Deps{Recovering: in.recovering.Load, Config: cfg, Store: st, Queue: q, Dispatch: disp, Quarantine: pen, Registry: in.reg, Version: o.Version, Commit: o.Commit, Logger: o.Logger}
	if in.fleet != nil {
		deps.Fleet = in.fleet
	}
	ready := admin.NewReadiness(deps)
	deps.Readiness = ready // one probe cache for both ports
	ingestMux := http.NewServeMux()
	health := admin.HealthHandler(deps, ready)
	ingestMux.Handle("GET /health", health)
	ingestMux.Handle("GET /ready", health)
	sources, err := EdgeSources(cfg.Sources, nums)
	in.sources = edge.NewRegistry(sources)
	if err != nil {
		return nil, err
	}
	in.limiter = newLimiter(cfg)
	overrides, err := ratelimit.LoadOverrides(st, in.limiter, configuredLimits(cfg))
	if err != nil {
		return nil, err
	}
	ingestMux.Handle(cfg.HTTP.Prefix+"/", edge.RefuseWhile(in.recovering.Load, cfg.Intake.RetryAfterS, edge.New(edge.Options{
		Routing:      cfg.HTTP.Routing,
		Prefix:       cfg.HTTP.Prefix,
		MaxBodyBytes: cfg.HTTP.MaxBodyBytes,
		Budget:       edge.NewBudget(cfg.HTTP.MaxInflightBodyBytes),
		Sources:      in.sources,
		Limiter:      in.limiter,
		Quarantine:   pen,
		Committer:    committer(cfg, q, targets),
		Observer:     in.metrics,
		Logger:       o.Logger,
		Claims:       claims,
		Settler:      in.settler,
		Holder:       holder(q, dual != nil),

		OwnBucketPerTenant: cfg.RateLimits.UnlistedTenants == config.UnlistedTenantsOwn,

		IntakeRetryAfterSecs: cfg.Intake.RetryAfterS,
	})))
	readTimeout := time.Duration(cfg.HTTP.ReadTimeoutMs) * time.Millisecond
	in.ingestOpts = listen.Options{
		Name:              "ingest",
		Handler:           ingestMux,
		MaxConnsPerIP:     cfg.HTTP.MaxConnsPerIP,
		ReadHeaderTimeout: readTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       time.Duration(cfg.HTTP.IdleTimeoutMs) * time.Millisecond,
		MaxHeaderBytes:    cfg.HTTP.MaxHeaderBytes,
		Logger:            o.Logger,
		OnRefused:         in.metrics.IngestRefused,
	}
	if cfg.SourceStore.Type == config.SourceStorePersistent {
		in.apiSources = apisources.New(apiSourcesOptions(cfg, st, in.sources, disp, o.Logger))
		cl.pushFunc(in.apiSources.Close) // (2)
		if err := in.apiSources.Load(); err != nil {
			return nil, fmt.Errorf("load API sources: %w", err)
		}
		deps.Sources = in.apiSources
	}
	// (1) Pushed last, though built before the queue: the API sources need
	// the dispatcher, and it must stop before their sinks close. Nothing of
	// it runs before StartContext, so a failed New has nothing to stop.
	cl.pushFunc(disp.Stop)
	deps.RateLimits = overrides
	adminRead := time.Duration(cfg.Admin.ReadTimeoutMs) * time.Millisecond
	in.adminOpts = listen.Options{
		Name:              "admin",
		Handler:           admin.New(deps),
		ReadHeaderTimeout: adminRead,
		ReadTimeout:       adminRead,
		IdleTimeout:       time.Duration(cfg.Admin.IdleTimeoutMs) * time.Millisecond,
		Logger:            o.Logger,
	}
	if err := in.capConns(); err != nil {
		return nil, err
	}
	in.ingestOpts.TLS, in.adminOpts.TLS = ingestTLS, adminTLS
	in.closers = cl
	in.built = true
	return in, nil
}

// committer is the edge's commit path: the queue, or under wal.type: none
// the synchronous delivery to every sink (no hook is stored).
func committer(cfg *config.Config, q *queue.Queue, targets map[uint16]dispatch.Target) edge.Committer {
	if cfg.WAL.Type != "none" {
		return q
	}
	sinks := make(map[uint16]sink.Sink, len(targets))
	for n, t := range targets {
		sinks[n] = t.Sink
	}
	return direct.New(direct.Options{
		Sinks:       sinks,
		Deadline:    time.Duration(cfg.Batcher.DeadlineMs) * time.Millisecond,
		MaxInflight: cfg.Batcher.MaxQueue,
	})
}

// holder is the queue's claim hold under dual, else nil (nothing is carried).
func holder(q *queue.Queue, dual bool) edge.Holder {
	if !dual {
		return nil
	}
	return q
}

// DurabilityLine states in one line what a 2xx means in this mode; it is
// never stronger than what is true.
func (in *Instance) DurabilityLine() string {
	if in.intake != nil {
		log := in.intake.Describe()
		if in.cfg.Intake.VerifyTopic != nil && !*in.cfg.Intake.VerifyTopic && !strings.Contains(log, "UNVERIFIED") {
			log += " (intake topic settings UNVERIFIED)"
		}
		if in.cfg.Intake.Type == "memory" {
			// Never stronger than what is true: this log shares the host.
			return fmt.Sprintf("durability: wal.type=dual with intake.type=memory (TEST ONLY): a 201 means the hook is fsynced in the local store (%s) "+
				"and in a file-backed log on this host (%s); both are lost if this host's disk is lost", in.store.Dir(), log)
		}
		return fmt.Sprintf("durability: wal.type=dual: a 201 means the hook is fsynced in the local store (%s) AND confirmed by the intake log: %s; "+
			"an acked hook is lost only if this host and every in-sync replica of the log are lost together", in.store.Dir(), log)
	}
	if in.cfg.WAL.Type == "none" {
		return fmt.Sprintf("durability: wal.type=none: no local hook store; a 201 means every sink of the hook confirmed it "+
			"within %s (the sinks hold it, nothing is kept on this node); a sink failure is a 503 and the provider's retry delivers again",
			time.Duration(in.cfg.Batcher.DeadlineMs)*time.Millisecond)
	}
	if in.backups != nil {
		return fmt.Sprintf("durability: wal.type=disk: a 201 means the hook is fsynced in the local store (%s); "+
			"if this host's disk is lost, the hooks acked since the last backup are lost (backed up every %s)",
			in.store.Dir(), time.Duration(in.cfg.Backup.IntervalMs)*time.Millisecond)
	}
	return fmt.Sprintf("durability: wal.type=disk: a 201 means the hook is fsynced in the local store (%s); "+
		"an acked hook is lost only if this host's disk is lost (backups are not configured)", in.store.Dir())
}

// Start is StartContext with a background context.
func (in *Instance) Start() error { return in.StartContext(context.Background()) }

// StartContext begins serving: boot recovery under dual (before anything
// else writes the store), the queue's goroutines, dispatch (when this node
// has the dispatch role), then both listeners. ctx bounds only the boot
// recovery's wait for an unreachable log.
func (in *Instance) StartContext(ctx context.Context) error {
	recover := in.intake != nil && (in.cfg.Intake.RecoverOnBoot == nil || *in.cfg.Intake.RecoverOnBoot)
	// Listen first: while the log is replayed, /ready answers 503 with
	// intake "recovering" and ingest answers 503, instead of a load
	// balancer seeing connections refused.
	in.recovering.Store(recover)
	var err error
	in.ingestLn, err = net.Listen("tcp", net.JoinHostPort(in.cfg.HTTP.IP, strconv.Itoa(in.cfg.HTTP.Port)))
	if err != nil {
		return fmt.Errorf("listen ingest: %w", err)
	}
	in.adminLn, err = net.Listen("tcp", net.JoinHostPort(in.cfg.Admin.IP, strconv.Itoa(in.cfg.Admin.Port)))
	if err != nil {
		_ = in.ingestLn.Close()
		return fmt.Errorf("listen admin: %w", err)
	}
	in.ingest = listen.New(in.ingestLn, in.ingestOpts)
	in.adminSrv = listen.New(in.adminLn, in.adminOpts)
	for _, srv := range []*listen.Server{in.ingest, in.adminSrv} {
		go func() {
			if err := srv.Serve(); err != nil {
				in.log.Error("listener stopped", "addr", srv.Addr().String(), "err", err)
			}
		}()
	}
	var carry []uint64
	if in.intake != nil {
		if carry, err = in.bootIntake(ctx, recover); err != nil {
			return err
		}
	}
	if recover {
		// The replay wrote hooks under their own seqs: the writer must
		// start above them, and they are durable (synced chunks).
		if err := in.queue.Reload(); err != nil {
			return err
		}
	}
	// Hooks the log refused at the republish stay pending, stuck: the
	// reconciler retries them and the watermark stays below them. A dual
	// boot without the republish carries every hook above the watermark
	// instead, for the same reason.
	refused := true
	if in.intake != nil && !recover {
		if carry, err = queue.UnconfirmedHooks(in.store, in.cfg.Intake.Pending.MaxRecords); err != nil {
			return fmt.Errorf("boot: %w", err)
		}
		refused = false
	}
	if err := in.queue.Carry(carry, refused); err != nil {
		return fmt.Errorf("boot recovery: %w", err)
	}
	if in.settler != nil {
		in.settler.Start()
	}
	in.queue.Start()
	if in.backups != nil {
		in.backups.Start()
	}
	if in.hasRole("dispatch") {
		if err := in.disp.Start(); err != nil {
			in.queue.Close()
			return fmt.Errorf("start dispatch: %w", err)
		}
	}
	in.recovering.Store(false)
	in.log.Info(in.DurabilityLine())
	in.log.Info("ankusa serving", "instance", in.cfg.Node.Instance, "version", in.version, "commit", in.opts.Commit,
		"ingest", in.ingestLn.Addr().String(), "admin", in.adminLn.Addr().String(), "store_id", in.store.ID())
	return nil
}

func (in *Instance) hasRole(r string) bool {
	for _, x := range in.cfg.Node.Roles {
		if x == r {
			return true
		}
	}
	return false
}

// Dispatcher exposes the delivery stage (tests).
func (in *Instance) Dispatcher() *dispatch.Dispatcher { return in.disp }

// IngestAddr and AdminAddr are the bound addresses (useful with port 0).
func (in *Instance) IngestAddr() string { return in.ingestLn.Addr().String() }
func (in *Instance) AdminAddr() string  { return in.adminLn.Addr().String() }

// Queue exposes the commit path (tests, bench).
func (in *Instance) Queue() *queue.Queue { return in.queue }

// Store exposes the store (tests, bench).
func (in *Instance) Store() *store.Store { return in.store }

// Stop drains: no new connections, in-flight requests get their answers
// (their records are synced by the queue's last fsync), then the store
// closes.
func (in *Instance) Stop(ctx context.Context) error {
	// Idempotent: a second Stop must not take a second "final" backup over
	// a successor's.
	if !in.stopped.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	// The ingest drain first: the admin port keeps answering /metrics and
	// /ready while it runs.
	if in.ingest != nil {
		if err := in.ingest.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrDrainIncomplete, err))
		}
	}
	if in.adminSrv != nil {
		if err := in.adminSrv.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrDrainIncomplete, err))
		}
	}
	// Then every component, in the order New pushed them (see New): dispatch
	// first, the queue's last fsync, the final backup, the store last.
	errs = append(errs, in.closers.close(ctx))
	in.log.Info("ankusa stopped")
	return errors.Join(errs...)
}

// newLimiter builds the per-tenant limiter from rate_limits: the default
// and one override per configured tenant.
func newLimiter(cfg *config.Config) *ratelimit.GCRA {
	var def ratelimit.Limit
	if d := cfg.RateLimits.Default; d != nil {
		def = ratelimit.Limit{Rate: d.Rate, Burst: d.Burst}
	}
	g := ratelimit.NewGCRA(ratelimit.Options{Default: def})
	for t, l := range configuredLimits(cfg) {
		g.SetLimit(t, l)
	}
	return g
}

// configuredLimits is rate_limits.tenants as limiter limits.
func configuredLimits(cfg *config.Config) map[string]ratelimit.Limit {
	out := make(map[string]ratelimit.Limit, len(cfg.RateLimits.Tenants))
	for t, l := range cfg.RateLimits.Tenants {
		out[t] = ratelimit.Limit{Rate: l.Rate, Burst: l.Burst}
	}
	return out
}

// Config is the instance's effective configuration.
func (in *Instance) Config() *config.Config { return in.cfg }

// The edge counts provider handshakes through its optional observer
// ability; the metrics are what the binary passes as its Observer.
var _ edge.HandshakeObserver = (*metrics.Metrics)(nil)
