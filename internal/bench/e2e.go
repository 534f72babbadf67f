package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
)

// E2E defaults.
const (
	e2eSource = "e2e"
	e2eSink   = "worker"
	// The parked backlog's source and its sink, which refuses every attempt.
	parkedSource = "parked"
	parkedSink   = "dead"
)

// E2EOptions configure RunE2E. Zero values take the defaults in brackets.
type E2EOptions struct {
	// Hooks is how many hooks are posted in all [20000].
	Hooks int
	// Clients post them, closed loop, sharing the count [256].
	Clients int
	// Latency is how long the receiver waits before answering 200 [5ms;
	// negative means no wait].
	Latency time.Duration
	// BodyBytes is the size of every body [1024].
	BodyBytes int
	// DispatchConcurrency is dispatch.concurrency [the config's default, so
	// the run measures what a user runs].
	DispatchConcurrency int
	// Mode is disk or dual [disk].
	Mode Mode
	// ConfirmMs is the memory intake's confirm latency under dual [0].
	ConfirmMs int
	// IntakeDir places dual's memory intake log (Options.IntakeDir).
	IntakeDir string
	// Timeout bounds the wait for the last delivery after the last answer
	// to a post [2m].
	Timeout time.Duration
	// Parked, when > 0, first posts that many hooks (same clients and
	// bodies) to a second source whose one http sink refuses every
	// attempt, so that its breaker parks them, and waits ParkedSettle
	// [20s] before the measured run: the other source's delivery with a
	// dead sink's backlog in the store (issue 14). 0: none.
	Parked       int
	ParkedSettle time.Duration
	// DataDir is the parent of the run's data dir; empty means a temporary
	// dir. The run's own dir is removed afterwards.
	DataDir string
	// Out receives a header and progress lines; nil is silent.
	Out io.Writer
	// Logger is given to the instance; nil discards.
	Logger *slog.Logger
	// ClientArgv starts the child load generator (the harness appends its
	// flags); empty means this executable with `bench client`.
	ClientArgv []string
}

func (o *E2EOptions) fill() {
	if o.Hooks <= 0 {
		o.Hooks = 20_000
	}
	if o.Clients <= 0 {
		o.Clients = 256
	}
	if o.Latency < 0 {
		o.Latency = 0
	} else if o.Latency == 0 {
		o.Latency = 5 * time.Millisecond
	}
	if o.BodyBytes <= 0 {
		o.BodyBytes = 1024
	}
	if o.DispatchConcurrency <= 0 {
		o.DispatchConcurrency = config.Default().Dispatch.Concurrency
	}
	if o.Mode == "" {
		o.Mode = ModeDisk
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.ParkedSettle < 0 {
		o.ParkedSettle = 0
	} else if o.ParkedSettle == 0 {
		o.ParkedSettle = 20 * time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// E2EResult is one end-to-end run.
type E2EResult struct {
	Mode                Mode
	Hooks, Clients      int
	BodyBytes           int
	Latency             time.Duration
	DispatchConcurrency int
	Confirm             time.Duration // dual only
	// Parked counts the parked source's hooks acked before the measured
	// run (E2EOptions.Parked), ParkedTime how long posting them took.
	Parked     uint64
	ParkedTime time.Duration

	// Acked counts 201 answers: the hooks that must be delivered.
	Acked uint64
	// Failures counts posts that got no 201 (not acked, so not owed a
	// delivery), broken down as in Result.
	Failures

	// IngestTime runs from the first post sent to the last answer read;
	// IngestPerSec is Acked / IngestTime.
	IngestTime   time.Duration
	IngestPerSec float64
	// BacklogAtIngestEnd is how many acked hooks the receiver had not yet
	// seen when the last post was answered.
	BacklogAtIngestEnd uint64

	// Delivered counts acked hooks the receiver saw at least once.
	Delivered uint64
	// Calls counts every request the receiver answered 200.
	Calls uint64
	// Connections counts the connections the receiver accepted: with
	// keep-alive reuse at most DispatchConcurrency (more means the sink
	// redialled).
	Connections uint64
	// Duplicates is Calls minus the distinct hooks they carried: deliveries
	// of a hook already delivered (at-least-once allows them; they are
	// reported, not failed).
	Duplicates uint64
	// Unknown counts distinct hooks delivered that no 201 named (a 201 lost
	// in transport after the commit would do that).
	Unknown uint64
	// Missing counts acked hooks never delivered before the timeout: must
	// be 0.
	Missing uint64
	// MissingSample names a few missing ids.
	MissingSample []string

	// Drain runs from the first post sent to the first delivery of the last
	// acked hook to be delivered; DeliveredPerSec is Delivered / Drain.
	Drain           time.Duration
	DeliveredPerSec float64
	// AfterIngest runs from the last answer to a post to that last first
	// delivery; AfterIngestPerSec is BacklogAtIngestEnd / AfterIngest: the
	// delivery rate once dispatch has the CPU to itself.
	AfterIngest       time.Duration
	AfterIngestPerSec float64
	// Ceiling is what the receiver allows: DispatchConcurrency / Latency
	// deliveries per second (0 without latency).
	Ceiling float64
	// AckToDeliveryP50/P99 are, per acked hook, from reading its 201 to the
	// receiver's answer to its first delivery (nearest rank; a delivery
	// before the 201 counts as 0).
	AckToDeliveryP50, AckToDeliveryP99 time.Duration
	// DeliveredBeforeAck counts hooks first delivered before their 201 was
	// read. Delivery waits for the local fsync only, so under disk a
	// delivery may beat the 201 by the time the answer takes to reach the
	// client; under dual it may also beat the log's confirm (by design:
	// the local half makes a hook deliverable). MaxLeadBeforeAck is the
	// largest such lead.
	DeliveredBeforeAck uint64
	MaxLeadBeforeAck   time.Duration
	// Reclaimed is true when the store held no hook at the end: every
	// delivered hook was reclaimed, so no retry could still be pending.
	Reclaimed bool
	// TimedOut is true when Timeout passed before every acked hook was
	// delivered and reclaimed.
	TimedOut bool

	// CPU, ClientCPU and OtherCPU cover the first post to the end of the
	// drain, in cores, as in Result; -1 when unknown. CPU is this process:
	// the instance and the receiver; ClientCPU the child load generator.
	CPU, ClientCPU, OtherCPU float64
	// CPUPerHook is this process's CPU from the first post to the end of
	// the drain per acked hook (its ingest and its delivery, and the
	// receiver's side); AllocsPerHook and AllocBytesPerHook its heap
	// allocations over the same span. 0 when unknown.
	CPUPerHook                       time.Duration
	AllocsPerHook, AllocBytesPerHook float64
}

// OK reports whether every acked hook was delivered.
func (r E2EResult) OK() bool { return r.Missing == 0 && !r.TimedOut && r.Acked > 0 }

// receiver is the in-process HTTP sink target: it answers 200 after the
// latency and notes every call by X-Ankusa-Id.
type receiver struct {
	latency time.Duration

	mu    sync.Mutex
	first map[string]time.Time // id -> answer time of its first delivery
	calls uint64
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.Header.Get("X-Ankusa-Id")
	if rc.latency > 0 {
		time.Sleep(rc.latency)
	}
	now := time.Now()
	rc.mu.Lock()
	rc.calls++
	if _, ok := rc.first[id]; !ok {
		rc.first[id] = now
	}
	rc.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// distinct is how many distinct ids were delivered.
func (rc *receiver) distinct() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.first)
}

// ack is one 201: the hook's id and when its answer was read.
type ack struct {
	id string
	at time.Time
}

// RunE2E posts o.Hooks hooks with o.Clients closed-loop clients to a fresh
// instance whose only source delivers over HTTP to an in-process receiver on
// 127.0.0.1 that answers 200 after o.Latency, waits until every acked hook
// was delivered and reclaimed (or o.Timeout after the last post), and
// compares what was acked with what was delivered.
func RunE2E(ctx context.Context, o E2EOptions) (E2EResult, error) {
	o.fill()
	if o.Mode != ModeDisk && o.Mode != ModeDual {
		return E2EResult{}, fmt.Errorf("bench e2e: unknown mode %q", o.Mode)
	}
	if o.ConfirmMs < 0 {
		return E2EResult{}, fmt.Errorf("bench e2e: confirm latency must be >= 0")
	}
	root := o.DataDir
	if root == "" {
		root = os.TempDir()
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		return E2EResult{}, fmt.Errorf("bench e2e: data dir: %w", err)
	}
	dir, err := os.MkdirTemp(root, "ankusa-bench-e2e-")
	if err != nil {
		return E2EResult{}, fmt.Errorf("bench e2e: data dir: %w", err)
	}
	defer os.RemoveAll(dir)

	res := E2EResult{
		Mode: o.Mode, Hooks: o.Hooks, Clients: o.Clients, BodyBytes: o.BodyBytes, Latency: o.Latency,
		DispatchConcurrency: o.DispatchConcurrency, CPU: -1, ClientCPU: -1, OtherCPU: -1,
	}
	if o.Mode == ModeDual {
		res.Confirm = time.Duration(o.ConfirmMs) * time.Millisecond
	}
	if o.Latency > 0 {
		res.Ceiling = float64(o.DispatchConcurrency) / o.Latency.Seconds()
	}

	// The receiver.
	rc := &receiver{latency: o.Latency, first: make(map[string]time.Time, o.Hooks)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	var conns atomic.Uint64
	rsrv := &http.Server{Handler: rc, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}}
	// The receiver stands in for a remote service, but runs in this
	// process: its goroutines (each connection's inherits the label) are
	// labelled role=receiver, so a CPU profile tells its samples apart.
	go pprof.Do(context.Background(), pprof.Labels("role", "receiver"), func(context.Context) { _ = rsrv.Serve(ln) })
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rsrv.Shutdown(sctx)
	}()

	// The instance: one source, one HTTP sink (and the parked source).
	intakeDir, removeIntake, err := runIntakeDir(o.Mode, o.IntakeDir, "e2e-")
	if err != nil {
		return res, err
	}
	defer removeIntake()
	spec := instanceSpec(dir, o.Mode, o.ConfirmMs, DefaultRoles, intakeDir)
	spec.HTTPSink = &app.LocalHTTPSink{Source: e2eSource, Sink: e2eSink, URL: "http://" + ln.Addr().String() + "/hook", TimeoutMs: 5000}
	spec.DispatchConcurrency = o.DispatchConcurrency
	if o.Parked > 0 {
		refused, err := refusingAddr()
		if err != nil {
			return res, fmt.Errorf("bench e2e: %w", err)
		}
		spec.MoreHTTPSinks = []app.LocalHTTPSink{{Source: parkedSource, Sink: parkedSink, URL: "http://" + refused + "/hook", TimeoutMs: 5000}}
	}
	in, stop, err := startInstance(spec, o.Logger)
	if err != nil {
		return res, fmt.Errorf("bench e2e: %w", err)
	}
	defer stop()
	url := in.CatchURL(e2eSource)
	q := in.Queue()

	fmt.Fprintf(o.Out, "ankusa bench e2e: %d hooks of %d B by %d closed-loop clients; source %q -> http sink %q at %s answering 200 after %s; dispatch.concurrency=%d (receiver ceiling %.0f/s)\n",
		o.Hooks, o.BodyBytes, o.Clients, e2eSource, e2eSink, ln.Addr(), o.Latency, o.DispatchConcurrency, res.Ceiling)
	fmt.Fprintf(o.Out, "%s %s/%s  NumCPU=%d GOMAXPROCS=%d; data dir %s (%s); wal.type=%s", runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.NumCPU(), runtime.GOMAXPROCS(0), absOr(dir), dataDirFS(dir), o.Mode)
	if o.Mode == ModeDual {
		fmt.Fprintf(o.Out, " (intake.type=memory TEST ONLY: %s; confirm %d ms)", intakeWhere(intakeRoot(o.IntakeDir)), o.ConfirmMs)
	}
	fmt.Fprintln(o.Out)

	argv, err := e2eClientArgv(o.ClientArgv)
	if err != nil {
		return res, fmt.Errorf("bench e2e: %w", err)
	}
	if o.Parked > 0 {
		if err := postParked(ctx, o, &res, argv, in.CatchURL(parkedSource)); err != nil {
			return res, err
		}
	}

	// The load generator is a child process (as in `ankusa bench`), so its
	// CPU and garbage are not the server's; the snapshots bracket its posts.
	runtime.GC()
	var cpu0, cpu1 time.Duration
	var busy0, busy1 time.Duration
	var okc0, okb0, okc1, okb1 bool
	var ingestEnd time.Time
	var receivedAtEnd int
	var a0 allocSnap
	var ccpu0, ccpu1 time.Duration
	var okcc0, okcc1 bool
	l, err := postChild(ctx, argv, url, o.Clients, o.Hooks, o.BodyBytes, func(pid int) {
		a0 = readAllocs()
		cpu0, okc0 = processCPU()
		busy0, okb0 = hostBusy()
		ccpu0, okcc0 = childCPU(pid)
	}, func(pid int) {
		receivedAtEnd = rc.distinct()
		ingestEnd = time.Now()
		// The child only prints after this: its CPU here is its whole run.
		ccpu1, okcc1 = childCPU(pid)
	})
	if err != nil {
		return res, fmt.Errorf("bench e2e: %w", err)
	}
	// The child's clock is this host's: its times compare with the
	// receiver's (wall clock; neither carries this process's monotonic
	// reading).
	begin := l.begin
	acks := l.acks
	res.add(&l.Failures)
	res.Acked = uint64(len(acks))
	res.IngestTime = l.end.Sub(begin)
	if s := res.IngestTime.Seconds(); s > 0 {
		res.IngestPerSec = float64(res.Acked) / s
	}
	res.BacklogAtIngestEnd = uint64(max(0, len(acks)-receivedAtEnd))
	fmt.Fprintf(o.Out, "ingest done: %d acked, %d errors in %s; receiver has %d, waiting for the rest\n",
		res.Acked, res.Errors, res.IngestTime.Round(time.Millisecond), receivedAtEnd)

	// Wait until every acked hook was delivered and the store is empty
	// (every hook reclaimed: no attempt can still be pending, so the
	// duplicate count is final), or the timeout.
	deadline := ingestEnd.Add(o.Timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		delivered := rc.distinct() >= len(acks)
		if delivered && q.Stats().Hooks <= res.Parked { // the parked hooks stay
			res.Reclaimed = true
			break
		}
		if time.Now().After(deadline) {
			res.TimedOut = true
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	cpu1, okc1 = processCPU()
	a1 := readAllocs()
	if res.Acked > 0 {
		res.AllocsPerHook = float64(a1.objects-a0.objects) / float64(res.Acked)
		res.AllocBytesPerHook = float64(a1.bytes-a0.bytes) / float64(res.Acked)
		if okc0 && okc1 {
			res.CPUPerHook = (cpu1 - cpu0) / time.Duration(res.Acked)
		}
	}
	busy1, okb1 = hostBusy()
	end := time.Now()
	if secs := end.Sub(begin).Seconds(); okc0 && okb0 && okc1 && okb1 && secs > 0 {
		res.CPU = (cpu1 - cpu0).Seconds() / secs
		other := (busy1 - busy0) - (cpu1 - cpu0)
		if okcc0 && okcc1 {
			res.ClientCPU = (ccpu1 - ccpu0).Seconds() / secs
			other -= ccpu1 - ccpu0
		}
		res.OtherCPU = max(0, other.Seconds()/secs)
	}

	// Compare acked with delivered.
	rc.mu.Lock()
	res.Calls = rc.calls
	res.Connections = conns.Load()
	res.Duplicates = rc.calls - uint64(len(rc.first))
	ackedSet := make(map[string]struct{}, len(acks))
	lat := make([]time.Duration, 0, len(acks))
	var last time.Time
	for _, a := range acks {
		ackedSet[a.id] = struct{}{}
		t, ok := rc.first[a.id]
		if !ok {
			res.Missing++
			if len(res.MissingSample) < 5 {
				res.MissingSample = append(res.MissingSample, a.id)
			}
			continue
		}
		res.Delivered++
		if t.After(last) {
			last = t
		}
		if d := t.Sub(a.at); d < 0 {
			res.DeliveredBeforeAck++
			res.MaxLeadBeforeAck = max(res.MaxLeadBeforeAck, -d)
		}
		lat = append(lat, max(0, t.Sub(a.at)))
	}
	for id := range rc.first {
		if _, ok := ackedSet[id]; !ok {
			res.Unknown++
		}
	}
	rc.mu.Unlock()
	if !last.IsZero() {
		res.Drain = last.Sub(begin)
		if s := res.Drain.Seconds(); s > 0 {
			res.DeliveredPerSec = float64(res.Delivered) / s
		}
		res.AfterIngest = max(0, last.Sub(l.end))
		if s := res.AfterIngest.Seconds(); s > 0 {
			res.AfterIngestPerSec = float64(res.BacklogAtIngestEnd) / s
		}
	}
	slices.Sort(lat)
	res.AckToDeliveryP50 = Percentile(lat, 50)
	res.AckToDeliveryP99 = Percentile(lat, 99)
	return res, nil
}

// refusingAddr is a loopback address nothing listens on: a port just bound
// and closed, so a connection to it is refused.
func refusingAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// postParked posts o.Parked hooks to the parked source with o.Clients
// closed-loop clients, then waits o.ParkedSettle: the sink's breaker opens
// after its first failures and parks the rest, and Pebble settles the
// load before the measured run. Every post must be acked.
func postParked(ctx context.Context, o E2EOptions, res *E2EResult, argv []string, url string) error {
	fmt.Fprintf(o.Out, "parking %d hooks on source %q (its sink %q refuses every attempt)\n", o.Parked, parkedSource, parkedSink)
	begin := time.Now()
	l, err := postChild(ctx, argv, url, o.Clients, o.Parked, o.BodyBytes, func(int) {}, func(int) {})
	if err != nil {
		return fmt.Errorf("bench e2e: parking: %w", err)
	}
	res.Parked = uint64(len(l.acks))
	res.ParkedTime = time.Since(begin)
	if l.Errors > 0 {
		return fmt.Errorf("bench e2e: %d of %d parked posts failed (first: %s)", l.Errors, o.Parked, l.FirstError)
	}
	fmt.Fprintf(o.Out, "parked %d hooks in %s; settling %s\n", res.Parked, fmtSecs(res.ParkedTime), o.ParkedSettle)
	select {
	case <-time.After(o.ParkedSettle): // the backlog settles: a bench's wait, not a test's synchronisation
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// e2eWorker is one client's tallies; only its goroutine writes it.
type e2eWorker struct {
	acks []ack
	Failures
}

func (w *e2eWorker) post(ctx context.Context, client *http.Client, url string, body []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		w.fail(0, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			w.fail(0, err)
		}
		return
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	at := time.Now()
	switch {
	case rerr != nil:
		w.fail(0, rerr)
	case resp.StatusCode != http.StatusCreated:
		w.fail(resp.StatusCode, nil)
	default:
		var a struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(b, &a); err != nil || a.ID == "" {
			w.fail(0, fmt.Errorf("201 without an id: %q", b))
			return
		}
		w.acks = append(w.acks, ack{id: a.ID, at: at})
	}
}

// PrintE2E writes the figures of an end-to-end run and its verdict.
func PrintE2E(w io.Writer, r E2EResult) {
	fmt.Fprintf(w, "e2e  mode=%s N=%d C=%d B=%d L=%s dispatch.concurrency=%d", r.Mode, r.Hooks, r.Clients, r.BodyBytes, fmtDur(r.Latency), r.DispatchConcurrency)
	if r.Mode == ModeDual {
		fmt.Fprintf(w, " confirm=%s", fmtDur(r.Confirm))
	}
	fmt.Fprintln(w)
	if r.Parked > 0 {
		fmt.Fprintf(w, "  parked:    %d hooks of source %q due at a sink that refuses every attempt (posted in %s), in the store throughout\n", r.Parked, parkedSource, fmtSecs(r.ParkedTime))
	}
	fmt.Fprintf(w, "  ingest:    %d acked in %s = %.0f req/s; errors=%d", r.Acked, fmtSecs(r.IngestTime), r.IngestPerSec, r.Errors)
	if r.Errors > 0 {
		var parts []string
		for _, code := range sortedCodes(r.Statuses) {
			parts = append(parts, fmt.Sprintf("%d=%d", code, r.Statuses[code]))
		}
		if r.TransportErrors > 0 {
			parts = append(parts, fmt.Sprintf("transport=%d", r.TransportErrors))
		}
		fmt.Fprintf(w, " (%s)", strings.Join(parts, " "))
		if r.FirstError != "" {
			fmt.Fprintf(w, " first: %s", r.FirstError)
		}
	}
	fmt.Fprintf(w, "; backlog when ingest ended: %d\n", r.BacklogAtIngestEnd)
	if r.Acked > 0 {
		// Delivered while ingest ran, per second of ingest, over ingest/s.
		during := r.Acked - min(r.Acked, r.BacklogAtIngestEnd)
		ratio := float64(during) / float64(r.Acked)
		verdict := "MISS"
		if ratio >= 0.9 {
			verdict = "met"
		}
		fmt.Fprintf(w, "  during ingest: %d of %d acked hooks delivered = %.2fx of ingest/s [target >= 0.9x: %s]\n", during, r.Acked, ratio, verdict)
	}
	fmt.Fprintf(w, "  delivery:  %d delivered, drain %s (first post to last first-delivery) = %.0f delivered/s", r.Delivered, fmtSecs(r.Drain), r.DeliveredPerSec)
	if r.Ceiling > 0 {
		fmt.Fprintf(w, " (receiver ceiling %.0f/s = %.2fx of it)", r.Ceiling, r.DeliveredPerSec/r.Ceiling)
	}
	fmt.Fprintln(w)
	if r.BacklogAtIngestEnd > 0 {
		fmt.Fprintf(w, "  after ingest: the backlog of %d delivered in %s = %.0f/s", r.BacklogAtIngestEnd, fmtSecs(r.AfterIngest), r.AfterIngestPerSec)
		if r.Ceiling > 0 {
			fmt.Fprintf(w, " (%.2fx of the ceiling)", r.AfterIngestPerSec/r.Ceiling)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "  after ingest: no backlog (delivery kept up with ingest)")
	}
	fmt.Fprintf(w, "  201 -> delivered: p50=%s p99=%s; delivered before their 201 was read: %d (by up to %s)\n",
		fmtDur(r.AckToDeliveryP50), fmtDur(r.AckToDeliveryP99), r.DeliveredBeforeAck, fmtDur(r.MaxLeadBeforeAck))
	fmt.Fprintf(w, "  missing=%d  duplicates=%d  unknown=%d  receiver_calls=%d  receiver_connections=%d  reclaimed=%t", r.Missing, r.Duplicates, r.Unknown, r.Calls, r.Connections, r.Reclaimed)
	if r.CPU >= 0 {
		fmt.Fprintf(w, "  cpu=%.2f client_cpu=%.2f other_cpu=%.2f", r.CPU, r.ClientCPU, r.OtherCPU)
	}
	fmt.Fprintln(w)
	if r.AllocsPerHook > 0 {
		fmt.Fprintf(w, "  per acked hook, this process (ingest + delivery + the receiver): cpu=%.1fus allocs=%.1f bytes=%.0f\n", float64(r.CPUPerHook)/1e3, r.AllocsPerHook, r.AllocBytesPerHook)
	}
	if r.OtherCPU > NoisyOtherCPU {
		fmt.Fprintf(w, "WARNING: other work on the host took %.2f cores during the run; the rates are disturbed\n", r.OtherCPU)
	}
	switch {
	case r.Acked == 0:
		fmt.Fprintln(w, "e2e: FAIL (nothing was acked)")
	case r.Missing > 0:
		fmt.Fprintf(w, "e2e: FAIL: %d acked hooks were never delivered (e.g. %s)", r.Missing, strings.Join(r.MissingSample, ", "))
		if r.TimedOut {
			fmt.Fprint(w, " before the timeout")
		}
		fmt.Fprintln(w)
	case r.TimedOut:
		fmt.Fprintln(w, "e2e: FAIL: every acked hook was delivered, but the store did not empty before the timeout (a delivery is stuck or dead)")
	default:
		fmt.Fprintln(w, "e2e: PASS (missing = 0: every acked hook was delivered)")
	}
}

// fmtSecs prints a duration in seconds with ms precision.
func fmtSecs(d time.Duration) string {
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// postAll runs one closed-loop client per worker until n posts were made
// in all (or ctx ends), each post by post(i, &workers[i]), and waits.
func postAll(ctx context.Context, workers []e2eWorker, n int, post func(i int, w *e2eWorker)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && next.Add(1) <= int64(n) {
				post(i, &workers[i])
			}
		}()
	}
	wg.Wait()
}
