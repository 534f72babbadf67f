package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"time"
)

// Client names where the load generator runs.
const (
	// ClientProcess runs the load generator in a child process (the same
	// binary as `ankusa bench client`), so its CPU and allocations are not
	// billed to the server: the default.
	ClientProcess = "process"
	// ClientInProcess runs the load generator in the bench process, on the
	// same runtime as the server: CPU and allocations then include the
	// client side (the harness before issue 14).
	ClientInProcess = "inproc"
)

// The child's stdout protocol: one line when its measured window opens,
// one when it closes (the parent takes its server-side snapshots on them),
// then one line "result <json clientReport>".
const (
	lineStart  = "window-start"
	lineEnd    = "window-end"
	lineResult = "result "
)

// load is what one closed-loop load generator measured.
type load struct {
	// Window is the measured window as it actually elapsed.
	Window time.Duration
	// OK counts the 201s completed inside the window; P50, P99 and Max
	// are their latencies (send to body fully read), nearest rank.
	OK            uint64
	P50, P99, Max time.Duration
	Failures
}

// generate runs `clients` closed-loop goroutines against url for warmup +
// dur. atStart and atEnd run when the measured window opens and closes
// (nil: nothing), so whoever measures the server brackets the same window
// the clients count in. It is the one client core of both the in-process
// mode and the child process.
func generate(ctx context.Context, clients int, url string, body []byte, warmup, dur time.Duration, atStart, atEnd func()) (load, error) {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // no overall limit
		MaxIdleConnsPerHost: clients,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}

	// A clean heap for every run, so one run's garbage is not collected on
	// the next run's clock.
	runtime.GC()

	begin := time.Now()
	winStart := begin.Add(warmup)
	winEnd := winStart.Add(dur)

	// Room for a generous guess of each worker's share, so the hot loop
	// rarely grows its slice.
	perWorker := int(200_000*dur.Seconds())/clients + 64
	workers := make([]worker, clients)
	var wg sync.WaitGroup
	for i := range workers {
		w := &workers[i]
		w.lat = make([]time.Duration, 0, perWorker)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, client, url, body, winStart, winEnd)
		}()
	}
	var actualStart, actualEnd time.Time
	if sleepUntil(ctx, winStart) {
		actualStart = time.Now()
		if atStart != nil {
			atStart()
		}
		if sleepUntil(ctx, winEnd) {
			actualEnd = time.Now()
			if atEnd != nil {
				atEnd()
			}
		}
	}
	wg.Wait()

	l := load{Window: dur}
	if !actualStart.IsZero() && !actualEnd.IsZero() {
		l.Window = actualEnd.Sub(actualStart)
	}
	n := 0
	for i := range workers {
		n += len(workers[i].lat)
	}
	all := make([]time.Duration, 0, n)
	for i := range workers {
		w := &workers[i]
		all = append(all, w.lat...)
		l.add(&w.Failures)
		w.lat = nil
	}
	slices.Sort(all)
	l.OK = uint64(len(all))
	l.P50, l.P99 = Percentile(all, 50), Percentile(all, 99)
	if len(all) > 0 {
		l.Max = all[len(all)-1]
	}
	return l, ctx.Err()
}

// clientReport is the child's result line.
type clientReport struct {
	OK       uint64 `json:"ok"`
	WindowNs int64  `json:"window_ns"`
	P50Ns    int64  `json:"p50_ns"`
	P99Ns    int64  `json:"p99_ns"`
	MaxNs    int64  `json:"max_ns"`
	Failures
}

// ClientMain is `ankusa bench client`: the out-of-process load generator
// the bench starts as its child. It is not meant to be run by hand (it has
// no server of its own); it prints the protocol lines above to stdout and
// exits 0, or 1 on a failure (written to stderr), 64 on a usage error.
func ClientMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "URL to POST to")
	clients := fs.Int("c", 64, "closed-loop clients")
	bodyBytes := fs.Int("b", 1024, "body bytes")
	warmup := fs.Duration("warmup", time.Second, "warmup, excluded")
	dur := fs.Duration("d", 10*time.Second, "measured window")
	count := fs.Int("n", 0, "post this many hooks in all instead of a timed window, and print every 201's id (the e2e load generator)")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	if *count > 0 && *url != "" && *clients > 0 && *bodyBytes > 0 {
		return clientCountMain(ctx, *url, *clients, *count, *bodyBytes, stdout, stderr)
	}
	if *url == "" || *clients <= 0 || *bodyBytes <= 0 || *dur <= 0 || *warmup < 0 {
		fmt.Fprintln(stderr, "ankusa bench client: -url is required; -c, -b, -d > 0; -warmup >= 0")
		return 64
	}
	out := bufio.NewWriter(stdout)
	// Each line is flushed at once: the parent's snapshots must happen
	// when the window opens and closes, not when a buffer fills.
	say := func(s string) { _, _ = out.WriteString(s + "\n"); _ = out.Flush() }
	l, err := generate(ctx, *clients, *url, makeBody(*bodyBytes), *warmup, *dur,
		func() { say(lineStart) }, func() { say(lineEnd) })
	if err != nil {
		fmt.Fprintf(stderr, "ankusa bench client: %v\n", err)
		return 1
	}
	rep := clientReport{OK: l.OK, WindowNs: int64(l.Window), Failures: l.Failures,
		P50Ns: int64(l.P50), P99Ns: int64(l.P99), MaxNs: int64(l.Max)}
	b, err := json.Marshal(rep)
	if err != nil {
		fmt.Fprintf(stderr, "ankusa bench client: %v\n", err)
		return 1
	}
	say(lineResult + string(b))
	return 0
}

// clientArgv is the command that starts the child load generator:
// o.ClientArgv, or this executable with `bench client`.
func clientArgv(o *Options) ([]string, error) {
	if len(o.ClientArgv) > 0 {
		return o.ClientArgv, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("load generator: %w", err)
	}
	return []string{exe, "bench", "client"}, nil
}

// startChild starts the load generator's child process (name, args) with
// its stdout piped to the caller and its stderr kept for the error of a
// failed run; ankusa bench and bench e2e both run theirs this way.
func startChild(ctx context.Context, name string, args []string) (*exec.Cmd, io.Reader, *strings.Builder, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load generator: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("load generator: %w", err)
	}
	return cmd, stdout, stderr, nil
}

// generateChild runs the load generator as a child process and calls
// atStart/atEnd (with the child's pid) when it says its window opened and
// closed.
func generateChild(ctx context.Context, o *Options, clients int, url string, atStart, atEnd func(pid int)) (load, error) {
	argv, err := clientArgv(o)
	if err != nil {
		return load{}, err
	}
	args := append(slices.Clone(argv[1:]), "-url", url, "-c", fmt.Sprint(clients), "-b", fmt.Sprint(o.BodyBytes),
		"-warmup", o.Warmup.String(), "-d", o.Duration.String())
	cmd, stdout, stderr, err := startChild(ctx, argv[0], args)
	if err != nil {
		return load{}, err
	}
	pid := cmd.Process.Pid
	var rep *clientReport
	var perr error
	started, ended := false, false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == lineStart && !started:
			started = true
			if atStart != nil {
				atStart(pid)
			}
		case line == lineEnd && started && !ended:
			ended = true
			if atEnd != nil {
				atEnd(pid)
			}
		case strings.HasPrefix(line, lineResult):
			var r clientReport
			if err := json.Unmarshal([]byte(line[len(lineResult):]), &r); err != nil && perr == nil {
				perr = fmt.Errorf("load generator: bad result line: %w", err)
			}
			rep = &r
		default:
			if perr == nil {
				perr = fmt.Errorf("load generator: unexpected line %q", line)
			}
		}
	}
	werr := cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return load{}, ctx.Err()
	case werr != nil:
		return load{}, fmt.Errorf("load generator: %w: %s", werr, strings.TrimSpace(stderr.String()))
	case perr != nil:
		return load{}, perr
	case rep == nil || !ended:
		return load{}, errors.New("load generator: exited without a window and a result")
	}
	return load{Window: time.Duration(rep.WindowNs), OK: rep.OK, Failures: rep.Failures,
		P50: time.Duration(rep.P50Ns), P99: time.Duration(rep.P99Ns), Max: time.Duration(rep.MaxNs)}, nil
}

// allocSnap is this process's cumulative heap allocations.
type allocSnap struct {
	bytes, objects uint64
	gcCPU          float64 // seconds of CPU spent in the GC (estimate)
}

var allocMetrics = []string{
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	// Tiny allocations (under 16 bytes, packed into shared blocks) are
	// counted apart; MemStats.Mallocs includes them, and so does our count.
	"/gc/heap/tiny/allocs:objects",
	"/cpu/classes/gc/total:cpu-seconds",
}

// readAllocs reads allocSnap without stopping the world (runtime/metrics,
// unlike ReadMemStats).
func readAllocs() allocSnap {
	s := make([]metrics.Sample, len(allocMetrics))
	for i, name := range allocMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	var a allocSnap
	get := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	a.bytes = get(0)
	a.objects = get(1) + get(2)
	if s[3].Value.Kind() == metrics.KindFloat64 {
		a.gcCPU = s[3].Value.Float64()
	}
	return a
}

// serverMeter measures the bench process (the server under test) over one
// measured window: its CPU, its allocations, the host's busy time and, when
// the load generator is a child, the child's CPU.
type serverMeter struct {
	probe          *windowProbe
	t0, t1         time.Time
	cpu0, cpu1     time.Duration
	busy0, busy1   time.Duration
	ccpu0, ccpu1   time.Duration
	a0, a1         allocSnap
	f0, f1         uint64
	ok, childOK    bool
	faultsOK       bool
	started, ended bool
}

func (m *serverMeter) start(pid int) {
	if m.probe != nil && m.probe.atStart != nil {
		m.probe.atStart()
	}
	m.a0 = readAllocs()
	c0, f0, ok0 := processUsage()
	b0, ok1 := hostBusy()
	m.ccpu0, m.childOK = childCPU(pid)
	m.cpu0, m.f0, m.busy0, m.t0 = c0, f0, b0, time.Now()
	m.ok, m.faultsOK = ok0 && ok1, ok0
	m.started = true
}

func (m *serverMeter) end(pid int) {
	if !m.started {
		return
	}
	if m.probe != nil && m.probe.atEnd != nil {
		m.probe.atEnd()
	}
	c1, f1, ok0 := processUsage()
	b1, ok1 := hostBusy()
	cc, okc := childCPU(pid)
	m.cpu1, m.busy1, m.ccpu1, m.f1, m.t1 = c1, b1, cc, f1, time.Now()
	m.faultsOK = m.faultsOK && ok0
	m.a1 = readAllocs()
	m.ok = m.ok && ok0 && ok1
	m.childOK = m.childOK && okc
	m.ended = true
	// Slow work (a /metrics scrape) after every figure of the window is read.
	if m.probe != nil && m.probe.afterEnd != nil {
		m.probe.afterEnd()
	}
}

// fill writes the window's figures into r (r.OK must be set).
func (m *serverMeter) fill(r *Result) {
	if !m.ended {
		return
	}
	secs := m.t1.Sub(m.t0).Seconds()
	if m.ok && secs > 0 {
		r.CPU = (m.cpu1 - m.cpu0).Seconds() / secs
		other := (m.busy1 - m.busy0) - (m.cpu1 - m.cpu0)
		if m.childOK {
			r.ClientCPU = (m.ccpu1 - m.ccpu0).Seconds() / secs
			other -= m.ccpu1 - m.ccpu0
		}
		r.OtherCPU = max(0, other.Seconds()/secs)
		r.GCCPU = (m.a1.gcCPU - m.a0.gcCPU) / secs
	}
	if r.OK > 0 {
		r.AllocBytesPerReq = float64(m.a1.bytes-m.a0.bytes) / float64(r.OK)
		r.AllocsPerReq = float64(m.a1.objects-m.a0.objects) / float64(r.OK)
		if m.faultsOK {
			r.FaultsPerReq = float64(m.f1-m.f0) / float64(r.OK)
		}
	}
}
