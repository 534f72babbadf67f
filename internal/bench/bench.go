// Package bench is the `ankusa bench` harness: a closed-loop load generator
// that drives, in one run and on the same machine, a null HTTP handler (the
// ceiling: Go's HTTP stack and the load generator alone) and real Ankusa
// instances in disk mode (every 201 waits for a WAL fsync) and, on request,
// dual mode (every 201 also waits for the memory intake log's confirm), so
// the ratios say what the durable commit path costs. RunE2E measures
// delivery end to end: ingest, dispatch and an HTTP receiver.
//
// By default the load generator is a child process (`ankusa bench client`),
// so the CPU and the allocations measured in the bench process are the
// server's alone; it still shares the host's cores, so absolute req/s are a
// floor, not a capacity claim. Options.Client = ClientInProcess keeps the
// older in-process generator.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Mode names what a Result measured.
type Mode string

const (
	// ModeNull is a Go handler that reads the body and answers 201 without
	// storing anything.
	ModeNull Mode = "null"
	// ModeDisk is an Ankusa instance with wal.type=disk and the default config.
	ModeDisk Mode = "disk"
	// ModeDual is an Ankusa instance with wal.type=dual and intake.type=memory
	// (a file-backed log on the same host, TEST ONLY) whose confirms wait
	// Options.ConfirmMs after the log's own fsync.
	ModeDual Mode = "dual"
)

// ParseModes reads a comma list of instance modes ("disk", "dual").
func ParseModes(s string) ([]Mode, error) {
	out, err := parseModeList(s, "mode", ModeDisk, ModeDual)
	if err == nil && len(out) == 0 {
		return nil, fmt.Errorf("no mode")
	}
	return out, err
}

// parseModeList reads a comma list of the allowed modes, each at most
// once; what names them in an error is kind.
func parseModeList(s, kind string, allowed ...Mode) ([]Mode, error) {
	var out []Mode
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		m := Mode(f)
		if !slices.Contains(allowed, m) {
			names := make([]string, len(allowed))
			for i, a := range allowed {
				names[i] = string(a)
			}
			return nil, fmt.Errorf("unknown %s %q (%s)", kind, f, strings.Join(names, "|"))
		}
		if slices.Contains(out, m) {
			return nil, fmt.Errorf("%s %q given twice", kind, f)
		}
		out = append(out, m)
	}
	return out, nil
}

// DefaultRoles are the node roles of config.Default().
var DefaultRoles = []string{"ingest", "dispatch"}

// ParseRoles reads a comma list of node roles (ingest, dispatch); "both"
// is ingest,dispatch. Ingest is required: the bench posts hooks.
func ParseRoles(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch f {
		case "":
			continue
		case "both":
			for _, r := range DefaultRoles {
				if !slices.Contains(out, r) {
					out = append(out, r)
				}
			}
			continue
		case "ingest", "dispatch":
		default:
			return nil, fmt.Errorf("unknown role %q (ingest|dispatch|both)", f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if !slices.Contains(out, "ingest") {
		return nil, fmt.Errorf("the roles must include ingest")
	}
	return out, nil
}

func hasDispatch(roles []string) bool { return slices.Contains(roles, "dispatch") }

// Options configure Run. Zero values take the defaults in brackets.
type Options struct {
	// Clients are the concurrency levels to run, in order [64, 512].
	Clients []int
	// BodyBytes is the size of every request body [1024].
	BodyBytes int
	// Duration is the measured window of each run [10s].
	Duration time.Duration
	// Warmup precedes the window of each run and is excluded from every
	// figure except the error count [1s; negative means none].
	Warmup time.Duration
	// DataDir is where each disk-mode run gets its own fresh data dir. Empty
	// means a new temporary dir (on $TMPDIR), removed afterwards. Every
	// per-run dir is removed when its run ends.
	DataDir string
	// Out receives a header and one line per finished run; nil is silent.
	Out io.Writer
	// Logger is given to the Ankusa instances; nil discards.
	Logger *slog.Logger

	// Modes are the instance modes measured after the null handler at every
	// level, in order [disk].
	Modes []Mode
	// Refs are the references measured after null at every level, in
	// order (ModeNullSHA, ModeNullSync; ParseRefs) [none].
	Refs []Mode
	// ConfirmMs is the memory intake's confirm latency in dual mode
	// (intake.memory.confirm_latency_ms) [0].
	ConfirmMs int
	// IntakeDir is where dual mode's memory intake log goes: IntakeAuto
	// (a tmpfs when there is one), IntakeSame ("" too: the run's data dir),
	// or the parent of a fresh dir per run.
	IntakeDir string
	// Roles are node.roles of the disk-mode instance [ingest, dispatch]:
	// ["ingest"] measures the ingest path without the dispatcher. Dual mode
	// always runs both (config validation requires them under dual), so Run
	// refuses Roles without dispatch when Modes include dual.
	Roles []string
	// Client is where the load generator runs: ClientProcess (a child
	// process, the default) or ClientInProcess.
	Client string
	// ClientArgv starts the child load generator; the harness appends its
	// flags [this executable, "bench", "client"].
	ClientArgv []string
	// Reps repeats the whole sequence (every level, null then each mode)
	// this many times, interleaved, so each ratio gets a range [1].
	Reps int
	// Prime is the longest an instance run primes its store before its
	// warmup and window: the load runs in one-second slices until the
	// store is warm (store.Store.Warm: Pebble's memtables have grown to
	// full size, so rows no longer land on never-touched pages, each a
	// page fault), so that the window is the steady state by
	// construction, not a fresh store's first ~200 MiB of rows [2m;
	// negative means none: the window then starts on a cold store].
	Prime time.Duration
	// Retentions, when set, runs every instance mode once per value of
	// retention.delivered ("0", "2s", "72h"), to measure what keeping
	// history (and its sweep) costs ingest [the default: 0 only].
	Retentions []string
}

func (o *Options) fill() {
	if len(o.Clients) == 0 {
		o.Clients = []int{64, 512}
	}
	if o.BodyBytes <= 0 {
		o.BodyBytes = 1024
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	} else if o.Warmup == 0 {
		o.Warmup = time.Second
	}
	if o.Prime == 0 {
		o.Prime = 2 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Modes) == 0 {
		o.Modes = []Mode{ModeDisk}
	}
	if len(o.Roles) == 0 {
		o.Roles = DefaultRoles
	}
	if o.Client == "" {
		o.Client = ClientProcess
	}
	if o.Reps <= 0 {
		o.Reps = 1
	}
}

// Result is one (mode, clients) run.
type Result struct {
	Mode      Mode
	Clients   int
	BodyBytes int
	// Rep is the repetition (1-based) this run belongs to.
	Rep int
	// Client is where the load generator ran (ClientProcess, ClientInProcess).
	Client string
	// Window is the measured window as it actually elapsed.
	Window time.Duration

	// OK counts 201 answers that completed inside the window.
	OK uint64
	// ReqPerSec is OK / Window.
	ReqPerSec float64
	// P50, P99 and Max are the latencies of the OK requests (send to body
	// fully read), nearest-rank.
	P50, P99, Max time.Duration

	// Failures counts every answer other than 201 plus every transport
	// error, over the whole run (warmup included): any error is a finding.
	Failures

	// CPU is the CPU the bench process used during the window, in cores;
	// -1 when unknown. With ClientProcess that is the server alone (HTTP,
	// the store, Pebble's background work); with ClientInProcess the load
	// generator too. ClientCPU is the child load generator's CPU (from
	// /proc/<pid>/stat; -1 in process or unknown). OtherCPU is the host
	// CPU billed to neither during the window (other processes, steal,
	// interrupt handling), in cores: well above zero means the figures
	// were disturbed. GCCPU is the bench process's GC CPU estimate
	// (runtime/metrics), in cores.
	CPU, ClientCPU, OtherCPU, GCCPU float64

	// FaultsPerReq is the bench process's page faults (minor and major)
	// during the window per 201; -1 when unknown. Near zero is the steady
	// state; a first touch of fresh memory (a cold store's memtable
	// growth, a heap still growing) costs one fault per 4 KiB page.
	FaultsPerReq float64
	// Primed is how long the instance's store was primed before the run
	// (Options.Prime), and Warm whether it was warm when the run began
	// (the null handler has no store: Warm is true, Primed zero).
	Primed time.Duration
	Warm   bool

	// AllocBytesPerReq and AllocsPerReq are the bench process's heap
	// allocations during the window (runtime/metrics deltas: bytes, and
	// objects including tiny ones) per 201. Like CPU they are the
	// server's alone with ClientProcess.
	AllocBytesPerReq, AllocsPerReq float64

	// Instance modes only: successful fsyncs during the window
	// (Stats().Syncs delta) and hooks they made durable (Stats().DurableSeq
	// delta; under disk that is acked, under dual the local half of the ack).
	Fsyncs       uint64
	Hooks        uint64
	FsyncsPerSec float64
	// MeanGroup is Hooks / Fsyncs: how many hooks one fsync acked on average.
	MeanGroup float64
	// GroupBytes is what one fsync carried on average: the WAL's bytes in
	// during the window (disk; the dispatcher's removals ride the same
	// fsyncs) or the bodies appended (nullsync), over Fsyncs.
	GroupBytes float64
	// FsyncCPU is the process CPU one fdatasync of GroupBytes costs this
	// host, calibrated just after the run (fsyncCalibrator); set for
	// nullsync and disk when nullsync is among Options.Refs, so that
	// disk/nullsync can be read with both paying disk's fsyncs per hook.
	FsyncCPU time.Duration

	// Roles are the instance's node.roles (instance modes only).
	Roles []string
	// Retention is retention.delivered of the instance ("" = the default 0).
	Retention string
	// FsyncP50 estimates the median WAL fsync during the window from the
	// bucket deltas of ankusa_wal_sync_duration_seconds (interpolated inside
	// a bucket, as PromQL's histogram_quantile does); zero when unknown.
	FsyncP50 time.Duration
	// DeliveredPerSec is deliveries to the sinks during the window
	// (ankusa_dispatch_deliveries_total{result="delivered"} delta); zero
	// without the dispatch role.
	DeliveredPerSec float64
	// MetricsError is why /metrics could not be read, if it could not; the
	// figures drawn from it are then zero.
	MetricsError string

	// Dual mode only. Confirm is the memory intake's injected confirm
	// latency. Publishes counts PublishBatch calls during the window (the
	// count of ankusa_intake_publish_duration_seconds, every outcome), of
	// which PublishFailures failed. RecsPerPublish is Hooks / Publishes: one
	// publish carries one writer group, so it is the mean group the log saw.
	// PublishP50 estimates the median successful publish (append, the log's
	// fsync and the confirm latency) from the histogram buckets.
	Confirm         time.Duration
	Publishes       uint64
	PublishFailures uint64
	RecsPerPublish  float64
	PublishP50      time.Duration
}

// Run benchmarks every concurrency level in o.Clients: for each, the null
// handler first, then a fresh Ankusa instance per mode of o.Modes, each with
// its own fresh data dir. It stops early, returning what it has, when ctx
// ends.
func Run(ctx context.Context, o Options) ([]Result, error) {
	o.fill()
	for _, c := range o.Clients {
		if c <= 0 {
			return nil, fmt.Errorf("bench: clients must be > 0, got %d", c)
		}
	}
	for _, m := range o.Modes {
		if m != ModeDisk && m != ModeDual {
			return nil, fmt.Errorf("bench: unknown mode %q", m)
		}
		if m == ModeDual && !hasDispatch(o.Roles) {
			return nil, fmt.Errorf("bench: roles %s apply to disk only: wal.type dual requires ingest and dispatch; measure them in separate runs", strings.Join(o.Roles, ","))
		}
	}
	for _, m := range o.Refs {
		if m != ModeNullSHA && m != ModeNullSync {
			return nil, fmt.Errorf("bench: unknown reference %q", m)
		}
	}
	if o.ConfirmMs < 0 {
		return nil, fmt.Errorf("bench: confirm latency must be >= 0, got %d ms", o.ConfirmMs)
	}
	root := o.DataDir
	if root == "" {
		d, err := os.MkdirTemp("", "ankusa-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: data dir: %w", err)
		}
		defer os.RemoveAll(d)
		root = d
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("bench: data dir: %w", err)
	}
	printHeader(o.Out, &o, root)

	if o.Client != ClientProcess && o.Client != ClientInProcess {
		return nil, fmt.Errorf("bench: unknown client %q (%s|%s)", o.Client, ClientProcess, ClientInProcess)
	}
	body := makeBody(o.BodyBytes)
	// With nullsync, each nullsync and disk run is followed by pricing
	// its mean group's fdatasync on this host (Result.FsyncCPU).
	var calib *fsyncCalibrator
	if slices.Contains(o.Refs, ModeNullSync) {
		path := filepath.Join(root, "fsync-calibration")
		c, err := newFsyncCalibrator(path, calibrationFileSize, calibrationBytes)
		if err != nil {
			return nil, err
		}
		defer os.Remove(path)
		defer c.close()
		calib = c
	}
	var out []Result
	// Interleaved: rep 1 runs every level (null, then each mode), then rep
	// 2 does the same, so a disturbance on the host lands on a run of each
	// mode rather than on all of one mode's runs.
	for rep := 1; rep <= o.Reps; rep++ {
		for _, c := range o.Clients {
			type run struct {
				mode      Mode
				retention string
			}
			runs := []run{{mode: ModeNull}}
			for _, m := range o.Refs {
				runs = append(runs, run{mode: m})
			}
			for _, m := range o.Modes {
				if len(o.Retentions) == 0 {
					runs = append(runs, run{mode: m})
				}
				for _, ret := range o.Retentions {
					runs = append(runs, run{m, ret})
				}
			}
			for _, rn := range runs {
				mode := rn.mode
				if err := ctx.Err(); err != nil {
					return out, err
				}
				var r Result
				var err error
				// The labels are inherited by every goroutine the run starts
				// (clients, servers, queue, dispatch), so a CPU profile of the
				// whole command splits by run: go tool pprof -tagfocus
				// mode=disk. Pebble relabels its own background goroutines
				// (pebble=compact|flush|wal-sync).
				labels := pprof.Labels("mode", string(mode), "clients", strconv.Itoa(c))
				pprof.Do(ctx, labels, func(ctx context.Context) {
					if isReference(mode) {
						r, err = runReference(ctx, &o, root, mode, c, body)
					} else {
						r, err = runInstance(ctx, &o, root, mode, rn.retention, c, body)
					}
				})
				if err != nil {
					return out, fmt.Errorf("bench: %s C=%d rep %d: %w", mode, c, rep, err)
				}
				if calib != nil && (mode == ModeNullSync || mode == ModeDisk) && r.GroupBytes > 0 {
					pprof.Do(ctx, pprof.Labels("mode", "calibrate", "clients", strconv.Itoa(c)), func(ctx context.Context) {
						r.FsyncCPU, _, err = calib.cpuPerSync(ctx, int(r.GroupBytes))
					})
					if err != nil {
						return out, fmt.Errorf("bench: %s C=%d rep %d: %w", mode, c, rep, err)
					}
				}
				r.Rep = rep
				out = append(out, r)
				fmt.Fprintln(o.Out, FormatResult(r))
			}
		}
	}
	return out, nil
}

func runInstance(ctx context.Context, o *Options, root string, mode Mode, retention string, clients int, body []byte) (Result, error) {
	dir, err := os.MkdirTemp(root, fmt.Sprintf("%s-c%d-", mode, clients))
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)

	roles := o.Roles
	if mode == ModeDual {
		roles = DefaultRoles
	}
	intakeDir, removeIntake, err := runIntakeDir(mode, o.IntakeDir, fmt.Sprintf("c%d-", clients))
	if err != nil {
		return Result{}, err
	}
	defer removeIntake()
	spec := instanceSpec(dir, mode, o.ConfirmMs, roles, intakeDir)
	spec.Retention = retention
	in, stop, err := startInstance(spec, o.Logger)
	if err != nil {
		return Result{}, err
	}
	defer stop()
	url := in.CatchURL("demo")
	primed, warm, err := prime(ctx, o, clients, url, body, in.Store().Warm)
	if err != nil {
		return Result{}, err
	}
	metricsURL := "http://" + in.AdminAddr() + "/metrics"
	q := in.Queue()
	// Hooks made durable are counted by durable_seq: seqs are dense, one per
	// hook written, and durable_seq rises only with a successful fsync.
	// (Stats().Hooks is a gauge of stored hooks: dispatch lowers it.)
	var s0, s1 struct {
		syncs, durable, wal, gen uint64
		walOK                    bool
	}
	var m0, m1 metricSnap
	var merr error
	scrape := func(dst *metricSnap) {
		if merr != nil {
			return
		}
		*dst, merr = scrapeMetrics(ctx, metricsURL)
	}
	probe := &windowProbe{
		atStart: func() {
			st := q.Stats()
			s0.syncs, s0.durable = st.Syncs, st.DurableSeq
			s0.wal, s0.gen, s0.walOK = in.Store().WALBytesIn()
			scrape(&m0)
		},
		atEnd: func() {
			st := q.Stats()
			s1.syncs, s1.durable = st.Syncs, st.DurableSeq
			s1.wal, s1.gen, s1.walOK = in.Store().WALBytesIn()
		},
		afterEnd: func() { scrape(&m1) },
	}
	r, err := drive(ctx, o, mode, clients, url, body, probe)
	if err != nil {
		return r, err
	}
	r.Roles = roles
	r.Retention = retention
	r.Primed, r.Warm = primed, warm
	r.Fsyncs = s1.syncs - s0.syncs
	r.Hooks = s1.durable - s0.durable
	secs := r.Window.Seconds()
	if secs > 0 {
		r.FsyncsPerSec = float64(r.Fsyncs) / secs
	}
	if r.Fsyncs > 0 {
		r.MeanGroup = float64(r.Hooks) / float64(r.Fsyncs)
		// Both ends read, in one generation: a Reopen starts a new count.
		if s0.walOK && s1.walOK && s0.gen == s1.gen && s1.wal >= s0.wal {
			r.GroupBytes = float64(s1.wal-s0.wal) / float64(r.Fsyncs)
		}
	}
	if mode == ModeDual {
		r.Confirm = time.Duration(o.ConfirmMs) * time.Millisecond
	}
	if merr != nil {
		r.MetricsError = merr.Error()
		return r, nil
	}
	if p, ok := histQuantile(0.5, histDelta(m0, m1, metricSync, nil)); ok {
		r.FsyncP50 = p
	}
	if secs > 0 {
		ok := map[string]string{"result": "delivered"}
		r.DeliveredPerSec = max(0, m1.sum(metricDelivery, ok)-m0.sum(metricDelivery, ok)) / secs
	}
	if mode == ModeDual {
		all := histCount(histDelta(m0, m1, metricPublish, nil))
		okb := histDelta(m0, m1, metricPublish, map[string]string{"outcome": "ok"})
		r.Publishes = uint64(all)
		r.PublishFailures = uint64(max(0, all-histCount(okb)))
		if all > 0 {
			r.RecsPerPublish = float64(r.Hooks) / all
		}
		if p, ok := histQuantile(0.5, okb); ok {
			r.PublishP50 = p
		}
	}
	return r, nil
}

// prime runs the load on a fresh instance in one-second slices, outside
// every figure, until warm says its store is warm or o.Prime has passed
// (Options.Prime; the last slice may run past it by up to a second and the
// load generator's start). It returns how long it ran and whether the
// store got warm, or an error if a slice got no 201 at all.
func prime(ctx context.Context, o *Options, clients int, url string, body []byte, warm func() bool) (time.Duration, bool, error) {
	start := time.Now()
	if o.Prime < 0 {
		return 0, warm(), nil
	}
	slice := *o
	slice.Warmup, slice.Duration = 0, time.Second
	for !warm() {
		if time.Since(start) >= o.Prime {
			return time.Since(start), false, nil
		}
		r, err := drive(ctx, &slice, ModeNull, clients, url, body, nil)
		if err != nil {
			return time.Since(start), false, fmt.Errorf("priming the store: %w", err)
		}
		// A slice with no 201 primes nothing: the instance refuses or
		// fails, which the measured run would only report after the cap.
		if r.OK == 0 {
			return time.Since(start), false, fmt.Errorf("priming the store: no 201 in a %s slice (%d errors, statuses %v, first transport error %q)",
				slice.Duration, r.Errors, r.Statuses, r.FirstError)
		}
	}
	return time.Since(start), true, nil
}

// windowProbe is called when the measured window opens (atStart) and
// closes (atEnd, then afterEnd once the window's CPU is read, so slow work
// such as a /metrics scrape stays out of the CPU figures; atStart's runs
// before the window's CPU is first read for the same reason).
type windowProbe struct {
	atStart, atEnd, afterEnd func()
}

// worker is one closed-loop client's tallies; only its goroutine writes it.
type worker struct {
	lat []time.Duration // OK requests completed inside the window
	Failures
}

// Failures tallies the requests that did not get a 201: one client's (a
// worker's), or a whole run's once the workers are added up.
type Failures struct {
	// Errors counts every answer other than 201 plus every transport error.
	Errors uint64
	// Statuses breaks the non-201 answers down by status code.
	Statuses map[int]uint64
	// TransportErrors counts requests that got no answer at all.
	TransportErrors uint64
	// FirstError is the first transport error seen, if any.
	FirstError string
}

// fail counts one request without a 201: a status, or a transport error.
func (f *Failures) fail(status int, err error) {
	f.Errors++
	if err != nil {
		f.TransportErrors++
		if f.FirstError == "" {
			f.FirstError = err.Error()
		}
		return
	}
	if f.Statuses == nil {
		f.Statuses = make(map[int]uint64)
	}
	f.Statuses[status]++
}

// add folds o into f.
func (f *Failures) add(o *Failures) {
	f.Errors += o.Errors
	f.TransportErrors += o.TransportErrors
	if f.FirstError == "" {
		f.FirstError = o.FirstError
	}
	for code, k := range o.Statuses {
		if f.Statuses == nil {
			f.Statuses = make(map[int]uint64)
		}
		f.Statuses[code] += k
	}
}

// drive puts `clients` closed-loop clients on url for Warmup + Duration,
// in this process or a child as o.Client says, and measures this process
// (the server) over the same window.
func drive(ctx context.Context, o *Options, mode Mode, clients int, url string, body []byte, probe *windowProbe) (Result, error) {
	m := &serverMeter{probe: probe}
	var l load
	var err error
	if o.Client == ClientInProcess {
		l, err = generate(ctx, clients, url, body, o.Warmup, o.Duration, func() { m.start(0) }, func() { m.end(0) })
	} else {
		l, err = generateChild(ctx, o, clients, url, m.start, m.end)
	}
	r := Result{Mode: mode, Clients: clients, BodyBytes: len(body), Client: o.Client, Window: l.Window,
		CPU: -1, ClientCPU: -1, OtherCPU: -1, GCCPU: -1, FaultsPerReq: -1, Warm: true, OK: l.OK, P50: l.P50, P99: l.P99, Max: l.Max, Failures: l.Failures}
	if err != nil {
		return r, err
	}
	if secs := r.Window.Seconds(); secs > 0 {
		r.ReqPerSec = float64(r.OK) / secs
	}
	m.fill(&r)
	return r, nil
}

// loop is one client: post, wait for the whole answer, repeat, until the
// window closes. Only requests that complete inside [winStart, winEnd) count
// toward throughput and latency; requests still in flight at winEnd are
// finished but not counted.
func (w *worker) loop(ctx context.Context, client *http.Client, url string, body []byte, winStart, winEnd time.Time) {
	for ctx.Err() == nil {
		t0 := time.Now()
		if !t0.Before(winEnd) {
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			w.fail(0, err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.fail(0, err)
			continue
		}
		// Read the answer to EOF so the connection goes back to the pool.
		_, rerr := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		t1 := time.Now()
		switch {
		case rerr != nil:
			if ctx.Err() != nil {
				return
			}
			w.fail(0, rerr)
		case resp.StatusCode != http.StatusCreated:
			w.fail(resp.StatusCode, nil)
		case !t1.Before(winStart) && t1.Before(winEnd):
			w.lat = append(w.lat, t1.Sub(t0))
		}
	}
}

// sleepUntil waits for t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Percentile is the nearest-rank p-th percentile of sorted (ascending);
// zero for an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// rank = ceil(p/100 * n), 1-based.
	rank := int(p / 100 * float64(n))
	if float64(rank) < p/100*float64(n) {
		rank++
	}
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// makeBody builds a JSON object of exactly n bytes (n >= 10), or n 'x'
// bytes when n is too small to hold one.
func makeBody(n int) []byte {
	const head, tail = `{"pad":"`, `"}`
	if n < len(head)+len(tail) {
		return bytes.Repeat([]byte("x"), n)
	}
	b := make([]byte, 0, n)
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte("x"), n-len(head)-len(tail))...)
	b = append(b, tail...)
	return b
}

// sortedCodes lists a status map's keys in order, for stable printing.
func sortedCodes(m map[int]uint64) []int {
	codes := make([]int, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	return codes
}

// dataDirFS names the file system under dir, for the header.
func dataDirFS(dir string) string {
	name := fsType(dir)
	if name == "" {
		return "unknown"
	}
	return name
}

// absOr returns the absolute form of p, or p itself.
func absOr(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
