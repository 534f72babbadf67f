package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for `ankusa bench client`: Run's
// default load generator re-executes this executable with those two
// arguments, as the real binary is re-executed.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "bench" && os.Args[2] == "client" {
		os.Exit(ClientMain(context.Background(), os.Args[3:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestRunSanity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two HTTP servers and a real-disk store under load")
	}
	var out bytes.Buffer
	rs, err := Run(context.Background(), Options{
		Clients:  []int{4},
		Duration: 300 * time.Millisecond,
		Warmup:   50 * time.Millisecond,
		Prime:    -1, // cold on purpose: a warm 64 MiB-memtable store takes ~200 MiB of rows
		DataDir:  t.TempDir(),
		Out:      &out,
		Reps:     2,
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	// Interleaved: null, disk of rep 1, then null, disk of rep 2.
	if len(rs) != 4 || rs[0].Mode != ModeNull || rs[1].Mode != ModeDisk || rs[2].Mode != ModeNull || rs[3].Mode != ModeDisk ||
		rs[0].Rep != 1 || rs[1].Rep != 1 || rs[2].Rep != 2 || rs[3].Rep != 2 {
		t.Fatalf("want [null disk null disk] over reps 1, 1, 2, 2, got %+v", rs)
	}
	for _, r := range rs {
		if r.Clients != 4 || r.BodyBytes != 1024 {
			t.Errorf("%s: clients=%d body=%d", r.Mode, r.Clients, r.BodyBytes)
		}
		if r.Client != ClientProcess {
			t.Errorf("%s: client = %q, want the default %q", r.Mode, r.Client, ClientProcess)
		}
		// The server's own figures, with the client in a child process:
		// any answered request allocates, and the server and the child
		// both burn CPU (Linux; elsewhere CPU is unknown, -1).
		if r.AllocsPerReq < 1 || r.AllocBytesPerReq < float64(r.BodyBytes) {
			t.Errorf("%s: allocations per 201 implausible (a 1 KiB body is read into memory at least once): %.1f allocs, %.0f bytes", r.Mode, r.AllocsPerReq, r.AllocBytesPerReq)
		}
		if runtime.GOOS == "linux" && (r.CPU <= 0 || r.ClientCPU < 0 || r.OtherCPU < 0) {
			t.Errorf("%s: cpu=%.2f client_cpu=%.2f other_cpu=%.2f, want server > 0 and both known", r.Mode, r.CPU, r.ClientCPU, r.OtherCPU)
		}
		if r.OK == 0 || r.ReqPerSec <= 0 {
			t.Errorf("%s: no throughput: %+v", r.Mode, r)
		}
		if r.Errors != 0 {
			t.Errorf("%s: errors: %s", r.Mode, FormatResult(r))
		}
		if r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 {
			t.Errorf("%s: latencies out of order: p50=%s p99=%s max=%s", r.Mode, r.P50, r.P99, r.Max)
		}
		if runtime.GOOS == "linux" && r.FaultsPerReq < 0 {
			t.Errorf("%s: faults/req unknown on Linux", r.Mode)
		}
		if wantWarm := r.Mode == ModeNull; r.Warm != wantWarm || r.Primed != 0 {
			t.Errorf("%s: warm=%v primed=%s, want warm=%v (no priming: only the null handler, which has no store, counts as warm)", r.Mode, r.Warm, r.Primed, wantWarm)
		}
	}
	d := rs[3]
	if d.Fsyncs == 0 || d.Hooks == 0 || d.FsyncsPerSec <= 0 {
		t.Errorf("disk: no fsyncs/hooks counted: %+v", d)
	}
	if d.MeanGroup < 1 {
		t.Errorf("disk: mean group %.2f < 1 (hooks=%d fsyncs=%d)", d.MeanGroup, d.Hooks, d.Fsyncs)
	}
	if !strings.Contains(out.String(), "disk  C=4 B=1024") {
		t.Errorf("output lacks the disk line:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "cold (primed 0s, not warm)") || !strings.Contains(out.String(), "no priming (-prime 0)") {
		t.Errorf("output does not say the store was cold:\n%s", out.String())
	}
	var sum bytes.Buffer
	v := PrintSummary(&sum, rs)
	if !strings.Contains(sum.String(), "WARNING: the store was not warm when disk C=4 rep 1, disk C=4 rep 2 began") {
		t.Errorf("summary lacks the cold-store warning:\n%s", sum.String())
	}
	if v.Pass() {
		t.Errorf("targets at C=512/C=64 were not run, the verdict must not pass:\n%s", sum.String())
	}
	for _, want := range []string{"C=4 B=1024 (2 reps)", "disk/null req/s", "disk/null cpu", "allocs/201", "bytes/201", "server cpu/201"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}

func TestRunInProcessClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an HTTP server under load")
	}
	var out bytes.Buffer
	rs, err := Run(context.Background(), Options{
		Clients: []int{2}, Duration: 200 * time.Millisecond, Warmup: -1, Prime: -1,
		DataDir: t.TempDir(), Out: &out, Client: ClientInProcess,
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Client != ClientInProcess || rs[0].OK == 0 || rs[0].ClientCPU != -1 {
		t.Fatalf("want in-process runs with throughput and no child CPU, got %+v", rs)
	}
	if !strings.Contains(out.String(), "IN-PROCESS") {
		t.Errorf("header does not say the load generator is in process:\n%s", out.String())
	}
}

// TestPrimeRunsTheLoadUntilWarm: priming drives the load in one-second
// slices until the store says it is warm, and gives up, saying so, at its
// cap.
func TestPrimeRunsTheLoadUntilWarm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for seconds")
	}
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		served.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name      string
		prime     time.Duration
		warmAfter int64 // requests served; 0: never warm
		wantWarm  bool
	}{
		{"until warm", time.Minute, 1, true},
		{"cold at the cap", 1500 * time.Millisecond, 0, false},
		{"none", -1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served.Store(0)
			o := Options{Clients: []int{2}, Prime: tc.prime}
			o.fill()
			warm := func() bool { return tc.warmAfter > 0 && served.Load() >= tc.warmAfter }
			primed, isWarm, err := prime(context.Background(), &o, 2, srv.URL, makeBody(64), warm)
			if err != nil {
				t.Fatal(err)
			}
			if isWarm != tc.wantWarm {
				t.Fatalf("warm = %v, want %v", isWarm, tc.wantWarm)
			}
			switch {
			case tc.prime < 0 && (primed != 0 || served.Load() != 0):
				t.Errorf("no priming asked, yet it ran %s (%d requests)", primed, served.Load())
			case tc.prime > 0 && served.Load() == 0:
				t.Errorf("primed %s without a request", primed)
			case tc.prime > 0 && !tc.wantWarm && primed < tc.prime:
				t.Errorf("gave up after %s, before its cap %s", primed, tc.prime)
			}
		})
	}
}

// TestPrimeFailsOnAnInstanceThatAnswersNo201: a slice without a single 201
// primes nothing, so priming says so at once rather than spend its cap.
func TestPrimeFailsOnAnInstanceThatAnswersNo201(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the load generator for a second")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	o := Options{Clients: []int{2}, Prime: time.Minute}
	o.fill()
	primed, warm, err := prime(context.Background(), &o, 2, srv.URL, makeBody(64), func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "no 201") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("err = %v, want a refusal naming the 503s", err)
	}
	if warm || primed >= 30*time.Second {
		t.Fatalf("warm %v after %s: want cold, well before the cap", warm, primed)
	}
}

func TestRunRejectsUnknownClient(t *testing.T) {
	_, err := Run(context.Background(), Options{Clients: []int{1}, DataDir: t.TempDir(), Client: "wrk2"})
	if err == nil || !strings.Contains(err.Error(), "unknown client") {
		t.Fatalf("err = %v, want a refusal naming the client", err)
	}
}

func TestChildCPUReadsProcStat(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc")
	}
	// Burn some CPU so this process's utime+stime is past one clock tick.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	c, ok := childCPU(os.Getpid())
	if !ok || c <= 0 {
		t.Fatalf("childCPU(self) = %s, %t", c, ok)
	}
	self, _ := processCPU()
	// /proc counts in 10 ms ticks; getrusage is finer. They agree to a tick or so.
	if d := self - c; d < -20*time.Millisecond || d > 20*time.Millisecond+self/10 {
		t.Errorf("/proc/self/stat says %s, getrusage %s", c, self)
	}
	if _, ok := childCPU(0); ok {
		t.Error("pid 0 must be unknown")
	}
}

func TestPrintRangesPairsRunsOfOneRep(t *testing.T) {
	mk := func(m Mode, rep int, rps, cpu, allocs, bytes float64) Result {
		return Result{Mode: m, Clients: 512, BodyBytes: 1024, Rep: rep, Client: ClientProcess, Window: time.Second,
			OK: uint64(rps), ReqPerSec: rps, CPU: rps * cpu / 1e6, AllocsPerReq: allocs, AllocBytesPerReq: bytes}
	}
	rs := []Result{
		mk(ModeNull, 1, 40000, 15, 24, 2400), mk(ModeDisk, 1, 20000, 28, 39, 5000),
		mk(ModeNull, 2, 20000, 15, 24, 2400), mk(ModeDisk, 2, 8000, 75, 129, 17800),
	}
	var b bytes.Buffer
	PrintRanges(&b, rs)
	got := b.String()
	t.Log("\n" + got)
	for _, want := range []string{
		"C=512 B=1024 (2 reps)",
		"req/s            null 20000–40000  disk 8000–20000",
		// rep 1: 20000/40000 = 0.5, rep 2: 8000/20000 = 0.4 (not 8000/40000).
		"disk/null req/s  0.40x–0.50x   [target >= 0.6x at C=512: met in 0/2]",
		// rep 1: 28/15 = 1.87 (met), rep 2: 75/15 = 5.
		"disk/null cpu    1.87x–5.00x   [target <= 2x: met in 1/2]",
		"[target <= 40: disk met in 1/2]",
		"[target <= body+4KiB = 5120: disk met in 1/2]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ranges lack %q", want)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, ms(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, ms(50)}, {99, ms(99)}, {100, ms(100)}, {0, ms(1)}, {1, ms(1)}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%.0f = %s, want %s", c.p, got, c.want)
		}
	}
	if got := Percentile([]time.Duration{ms(7)}, 99); got != ms(7) {
		t.Errorf("single: %s", got)
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("empty: %s", got)
	}
}

func TestMakeBody(t *testing.T) {
	for _, n := range []int{1, 9, 10, 11, 1024, 4096} {
		if got := len(makeBody(n)); got != n {
			t.Errorf("makeBody(%d) has %d bytes", n, got)
		}
	}
}

func TestEvaluate(t *testing.T) {
	rs := []Result{
		{Mode: ModeNull, Clients: 64, BodyBytes: 1024, ReqPerSec: 1000, OK: 1, P99: time.Millisecond},
		{Mode: ModeDisk, Clients: 64, BodyBytes: 1024, ReqPerSec: 500, OK: 1, P99: 49 * time.Millisecond},
		{Mode: ModeNull, Clients: 512, BodyBytes: 1024, ReqPerSec: 1000, OK: 1},
		{Mode: ModeDisk, Clients: 512, BodyBytes: 1024, ReqPerSec: 600, OK: 1},
	}
	if v := Evaluate(rs); !v.Pass() {
		t.Errorf("want pass: %+v", v)
	}
	rs[3].ReqPerSec = 599
	if v := Evaluate(rs); v.Pass() {
		t.Errorf("ratio 0.599 must miss: %+v", v)
	}
	rs[3].ReqPerSec = 600
	rs[1].P99 = 50 * time.Millisecond
	if v := Evaluate(rs); v.Pass() {
		t.Errorf("p99 = 50ms must miss: %+v", v)
	}
	if v := Evaluate(rs[:2]); v.Pass() || v.Checks[0].Measured {
		t.Errorf("C=512 not run must not pass: %+v", v)
	}
}

func TestRunDualSanity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a dual-mode instance with a file-backed intake log under load")
	}
	var out bytes.Buffer
	rs, err := Run(context.Background(), Options{
		Clients:   []int{4},
		Duration:  300 * time.Millisecond,
		Warmup:    50 * time.Millisecond,
		Prime:     -1,
		DataDir:   t.TempDir(),
		Out:       &out,
		Modes:     []Mode{ModeDual},
		ConfirmMs: 1,
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Mode != ModeNull || rs[1].Mode != ModeDual {
		t.Fatalf("want [null dual], got %+v", rs)
	}
	d := rs[1]
	if d.OK == 0 || d.Errors != 0 {
		t.Fatalf("dual: %s", FormatResult(d))
	}
	if d.MetricsError != "" || d.Publishes == 0 || d.RecsPerPublish <= 0 || d.FsyncP50 <= 0 || d.PublishP50 < time.Millisecond {
		t.Errorf("dual: /metrics figures missing or implausible (publish p50 must include the 1 ms confirm): %+v", d)
	}
	if d.Confirm != time.Millisecond {
		t.Errorf("dual: confirm = %s, want 1ms", d.Confirm)
	}
	if !strings.Contains(out.String(), "dual  C=4 B=1024") || !strings.Contains(out.String(), "recs/publish=") {
		t.Errorf("output lacks the dual line:\n%s", out.String())
	}
	var sum bytes.Buffer
	v := PrintSummary(&sum, rs)
	if v.Failed() {
		t.Errorf("C=64 was not run: the enforced dual check must be N/A, not failed:\n%s", sum.String())
	}
	if !strings.Contains(sum.String(), "dual latency C=64") {
		t.Errorf("summary lacks the dual check:\n%s", sum.String())
	}
}

func TestRunRejectsDualWithoutDispatch(t *testing.T) {
	_, err := Run(context.Background(), Options{Clients: []int{1}, Modes: []Mode{ModeDual}, Roles: []string{"ingest"}, DataDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "dual requires") {
		t.Fatalf("err = %v, want a refusal naming dual's roles", err)
	}
}

func TestRunE2ESanity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an instance delivering to an HTTP receiver")
	}
	var out bytes.Buffer
	r, err := RunE2E(context.Background(), E2EOptions{
		Hooks:   200,
		Clients: 8,
		Latency: time.Millisecond,
		DataDir: t.TempDir(),
		Timeout: 30 * time.Second,
		Out:     &out,
	})
	PrintE2E(&out, r)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if r.Acked != 200 || r.Errors != 0 {
		t.Errorf("acked %d, errors %d; want 200, 0", r.Acked, r.Errors)
	}
	if r.Missing != 0 || !r.OK() {
		t.Errorf("missing = %d (timed out %t), want 0", r.Missing, r.TimedOut)
	}
	if r.Delivered != 200 || r.Unknown != 0 || !r.Reclaimed {
		t.Errorf("delivered %d, unknown %d, reclaimed %t", r.Delivered, r.Unknown, r.Reclaimed)
	}
	if r.Calls != r.Delivered+r.Duplicates {
		t.Errorf("calls %d != delivered %d + duplicates %d", r.Calls, r.Delivered, r.Duplicates)
	}
	if r.IngestPerSec <= 0 || r.DeliveredPerSec <= 0 || r.Drain < r.IngestTime/2 || r.AckToDeliveryP99 < r.AckToDeliveryP50 {
		t.Errorf("implausible figures: %+v", r)
	}
	if !strings.Contains(out.String(), "missing=0") || !strings.Contains(out.String(), "e2e: PASS") {
		t.Errorf("output lacks the verdict:\n%s", out.String())
	}
}

// With a parked backlog (E2EOptions.Parked) the run first parks its hooks
// on a source whose sink refuses them, then measures the e2e source as
// before: every e2e hook delivered, the parked ones left in the store.
func TestRunE2EWithAParkedBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an instance delivering to an HTTP receiver")
	}
	var out bytes.Buffer
	r, err := RunE2E(context.Background(), E2EOptions{
		Hooks: 200, Clients: 8, Latency: time.Millisecond, DataDir: t.TempDir(), Timeout: 30 * time.Second, Out: &out,
		Parked: 100, ParkedSettle: -1,
	})
	PrintE2E(&out, r)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if r.Parked != 100 || r.Acked != 200 || r.Delivered != 200 || r.Unknown != 0 || !r.OK() || !r.Reclaimed {
		t.Errorf("parked %d, acked %d, delivered %d, unknown %d, ok %t, reclaimed %t; want 100, 200, 200, 0, true, true",
			r.Parked, r.Acked, r.Delivered, r.Unknown, r.OK(), r.Reclaimed)
	}
	if !strings.Contains(out.String(), "parked:    100 hooks") {
		t.Errorf("output lacks the parked line:\n%s", out.String())
	}
}

func TestParseMetricsAndQuantile(t *testing.T) {
	text := `# HELP x_seconds help
# TYPE x_seconds histogram
x_seconds_bucket{le="0.001"} 10
x_seconds_bucket{le="0.002"} 30
x_seconds_bucket{le="+Inf"} 40
x_seconds_sum 0.05
x_seconds_count 40
p_seconds_bucket{outcome="ok",le="0.005"} 4
p_seconds_bucket{outcome="ok",le="+Inf"} 4
p_seconds_bucket{outcome="unavailable",le="0.005"} 0
p_seconds_bucket{outcome="unavailable",le="+Inf"} 2
d_total{result="delivered",sink="a\"b"} 7
d_total{result="retry",sink="log"} 1
`
	end, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := end.sum("d_total", map[string]string{"result": "delivered"}); got != 7 {
		t.Errorf("sum delivered = %v", got)
	}
	if got := end.sum("d_total", map[string]string{"sink": `a"b`}); got != 7 {
		t.Errorf("escaped label: %v", got)
	}
	start, _ := parseMetrics(strings.NewReader(`x_seconds_bucket{le="0.001"} 10
x_seconds_bucket{le="0.002"} 10
x_seconds_bucket{le="+Inf"} 10
`))
	d := histDelta(start, end, "x_seconds", nil)
	if histCount(d) != 30 {
		t.Fatalf("delta count = %v, want 30: %+v", histCount(d), d)
	}
	// 30 new observations: 0 in (0, 1ms], 20 in (1, 2ms], 10 above. The
	// median (rank 15) is 3/4 into (1, 2ms].
	if p, ok := histQuantile(0.5, d); !ok || p != 1750*time.Microsecond {
		t.Errorf("p50 = %s %t, want 1.75ms", p, ok)
	}
	if p, ok := histQuantile(0.99, d); !ok || p != 2*time.Millisecond {
		t.Errorf("p99 in +Inf = %s %t, want the highest finite bound 2ms", p, ok)
	}
	if _, ok := histQuantile(0.5, histDelta(end, end, "x_seconds", nil)); ok {
		t.Error("an empty histogram has no quantile")
	}
	if got := histCount(end.buckets("p_seconds", nil)); got != 6 {
		t.Errorf("all outcomes = %v, want 6", got)
	}
	if got := histCount(end.buckets("p_seconds", map[string]string{"outcome": "ok"})); got != 4 {
		t.Errorf("ok = %v, want 4", got)
	}
}

func TestEvaluateDual(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	rs := []Result{
		{Mode: ModeNull, Clients: 64, BodyBytes: 1024, ReqPerSec: 1000, OK: 1, P99: time.Millisecond},
		{Mode: ModeDisk, Clients: 64, BodyBytes: 1024, ReqPerSec: 500, OK: 1, P99: 10 * time.Millisecond},
		{Mode: ModeDual, Clients: 64, BodyBytes: 1024, ReqPerSec: 400, OK: 1, P50: ms(10), FsyncP50: ms(1), Confirm: ms(5)},
	}
	find := func(v Verdict, name string) Check {
		for _, c := range v.Checks {
			if strings.HasPrefix(c.Name, name) {
				return c
			}
		}
		t.Fatalf("no check %q in %+v", name, v)
		return Check{}
	}
	v := Evaluate(rs)
	if c := find(v, "dual latency"); !c.Measured || !c.Pass || c.Kind != KindEnforced || v.Failed() {
		t.Errorf("p50 10ms = max(1, 5) + 5 must pass: %+v", c)
	}
	if c := find(v, "dual p50"); !c.Measured || c.Pass || c.Kind != KindGoal {
		t.Errorf("p50 10ms > 7ms goal must miss: %+v", c)
	}
	rs[2].P50 = ms(10.1)
	if v := Evaluate(rs); !v.Failed() || v.Pass() {
		t.Errorf("p50 10.1ms must fail the enforced check: %+v", v)
	}
	rs[2].FsyncP50 = ms(6) // the fsync, not the confirm, sets the bound
	if v := Evaluate(rs); v.Failed() {
		t.Errorf("bound max(6, 5) + 5 = 11ms must pass 10.1ms: %+v", v)
	}
	rs[2].Clients = 32 // C=64 not run: never a failure, N/A under -gate
	if v := Evaluate(rs); v.Failed() || find(v, "dual latency").Measured {
		t.Errorf("dual at C=32 only must leave the enforced check unmeasured: %+v", v)
	}
	// No dual result: no dual check at all.
	if v := Evaluate(rs[:2]); len(v.Checks) != 2 {
		t.Errorf("disk-only results must carry the two disk targets only: %+v", v)
	}
}

func TestPrintRangesAgainstTheHashingReference(t *testing.T) {
	mk := func(m Mode, rep int, rps, cpu float64) Result {
		return Result{Mode: m, Clients: 64, BodyBytes: T14LargeBody, Rep: rep, Client: ClientProcess, Window: time.Second,
			OK: uint64(rps), ReqPerSec: rps, CPU: rps * cpu / 1e6, AllocsPerReq: 30, AllocBytesPerReq: 5000}
	}
	rs := []Result{
		mk(ModeNull, 1, 12000, 60), mk(ModeNullSHA, 1, 8000, 170), mk(ModeNullSync, 1, 5000, 200), mk(ModeDisk, 1, 4000, 340),
		mk(ModeNull, 2, 13000, 60), mk(ModeNullSHA, 2, 7000, 175), mk(ModeNullSync, 2, 6000, 250), mk(ModeDisk, 2, 3000, 350),
	}
	// Calibrated fsyncs: (fsyncs, hooks, CPU per fsync) for rep 1's and
	// rep 2's nullsync and disk.
	for i, f := range []struct {
		fsyncs, hooks uint64
		cpu           time.Duration
	}{{1000, 5000, 50 * time.Microsecond}, {200, 4000, 60 * time.Microsecond}, {600, 6000, 40 * time.Microsecond}, {300, 3000, 80 * time.Microsecond}} {
		r := &rs[[]int{2, 3, 6, 7}[i]]
		r.Fsyncs, r.Hooks, r.FsyncCPU = f.fsyncs, f.hooks, f.cpu
		r.GroupBytes = float64(r.Hooks) / float64(r.Fsyncs) * float64(r.BodyBytes)
	}
	if _, ok := fsyncMatchedCPU(&Result{Mode: ModeNullSync, OK: 1, CPU: 1, Window: time.Second, Fsyncs: 1, Hooks: 1}, &rs[3]); ok {
		t.Error("an uncalibrated nullsync run has no fsync-matched CPU")
	}
	if got, want := FormatResult(rs[2]), "group_bytes=1310720 fsync_cpu~50.0us"; !strings.Contains(got, want) {
		t.Errorf("nullsync's line %q lacks %q", got, want)
	}
	var b bytes.Buffer
	PrintRanges(&b, rs)
	got := b.String()
	t.Log("\n" + got)
	for _, want := range []string{
		"req/s            null 12000–13000  nullsha 7000–8000  nullsync 5000–6000  disk 3000–4000",
		// 4000/5000, 3000/6000; 340/200, 350/250.
		"disk/nullsync req/s 0.50x–0.80x   [reference: a minimal durable handler; no target]",
		"disk/nullsync cpu 1.40x–1.70x   [reference: a minimal durable handler; no target]",
		// Rep 1: nullsync 200us less 50us*1000/5000 plus disk's
		// 60us*200/4000 is 193us, 340/193; rep 2: 250-4+8 = 254us, 350/254.
		"disk/nullsync cpu, fsync-matched 1.38x–1.76x   [nullsync paying disk's fsyncs per hook at their calibrated CPU; no target]",
		// Against null, as the target is written: 4000/12000, 3000/13000.
		"disk/null req/s  0.23x–0.33x   [target MB/s >= 0.5x null: met in 0/2]",
		// Against nullsha, pairing each rep's runs: 4000/8000, 3000/7000.
		"disk/nullsha req/s 0.43x–0.50x   [reference: the contract's floor; no target]",
		// 340/170, 350/175.
		"disk/nullsha cpu 2.00x   [reference: the contract's floor; no target]",
		// nullsha is a reference: no target is counted for it.
		"[target <= 40: disk met in 2/2]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ranges lack %q", want)
		}
	}
}

func TestRunRefsRunAfterNull(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four HTTP servers, a log and a real-disk store under load")
	}
	var out bytes.Buffer
	dir := t.TempDir()
	rs, err := Run(context.Background(), Options{
		Clients: []int{4}, Duration: 200 * time.Millisecond, Warmup: -1, Prime: -1,
		DataDir: dir, Out: &out, Reps: 1, Refs: []Mode{ModeNullSHA, ModeNullSync},
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 || rs[0].Mode != ModeNull || rs[1].Mode != ModeNullSHA || rs[2].Mode != ModeNullSync || rs[3].Mode != ModeDisk {
		t.Fatalf("want [null nullsha nullsync disk], got %d results: %+v", len(rs), rs)
	}
	for _, r := range rs[1:3] {
		if r.OK == 0 || r.Errors != 0 || !r.Warm || r.Primed != 0 {
			t.Errorf("%s: %s (want 201s, no errors, and no store to prime)", r.Mode, FormatResult(r))
		}
	}
	if rs[1].Fsyncs != 0 || strings.Contains(FormatResult(rs[1]), "fsyncs/s") {
		t.Errorf("nullsha syncs nothing: %s", FormatResult(rs[1]))
	}
	// nullsync answers a 201 only for a synced body, and bodies share
	// fsyncs. The server counts bodies between its own marks of the window
	// and the child counts 201s between its own, so the two differ by what
	// straddles a mark; half is far outside that.
	if s := rs[2]; s.Fsyncs == 0 || s.Hooks*2 < s.OK || s.MeanGroup < 1 || !strings.Contains(FormatResult(s), "fsyncs/s=") {
		t.Errorf("nullsync: fsyncs=%d bodies=%d ok=%d mean group %.2f: %s", s.Fsyncs, s.Hooks, s.OK, s.MeanGroup, FormatResult(s))
	}
	if !strings.Contains(out.String(), "order per C: null, nullsha, nullsync, disk") {
		t.Errorf("header lacks the run order:\n%s", out.String())
	}
	// With nullsync, its run and disk's are priced: each one's mean group
	// fdatasync'd beside it, and the ranges read disk against nullsync
	// paying disk's fsyncs.
	for _, r := range rs[2:4] {
		if runtime.GOOS != "linux" { // no process CPU to price with
			break
		}
		if r.GroupBytes <= 0 || r.FsyncCPU <= 0 || !strings.Contains(FormatResult(r), "fsync_cpu~") {
			t.Errorf("%s not calibrated: group bytes %.0f, fsync CPU %v: %s", r.Mode, r.GroupBytes, r.FsyncCPU, FormatResult(r))
		}
	}
	var ranges bytes.Buffer
	PrintRanges(&ranges, rs)
	if runtime.GOOS == "linux" && !strings.Contains(ranges.String(), "disk/nullsync cpu, fsync-matched") {
		t.Errorf("ranges lack the fsync-matched ratio:\n%s", ranges.String())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("left behind in the data dir: %v", left)
	}
}

func TestParseRefs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Mode
		wantErr string
	}{
		{"", nil, ""},
		{"nullsha", []Mode{ModeNullSHA}, ""},
		{" nullsync , nullsha", []Mode{ModeNullSync, ModeNullSHA}, ""},
		{"null", nil, `unknown reference "null"`},
		{"nullsha,nullsha", nil, "given twice"},
	} {
		got, err := ParseRefs(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRefs(%q): err %v, want one saying %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseRefs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// The reference log answers an append only after the fsync covering it,
// and one fsync covers every body queued while the last one ran. The
// stand-in sync holds the writer inside its fsync until the test lets go.
func TestGroupLog_AnswersAfterTheSyncAndGroups(t *testing.T) {
	const n = 8
	entered := make(chan int, n+2) // room for a broken log's extra fsyncs
	release := make(chan struct{}, 1)
	var calls int
	hold := func(f *os.File) error {
		calls++
		entered <- calls
		<-release
		return syncData(f)
	}
	lg, err := openGroupLog(filepath.Join(t.TempDir(), "log"), hold)
	if err != nil {
		t.Fatal(err)
	}
	appendAsync := func() chan error {
		ch := make(chan error, 1)
		go func() { ch <- lg.append(make([]byte, 1024)) }()
		return ch
	}
	answered := func(chs []chan error) int {
		n := 0
		for _, ch := range chs {
			select {
			case err := <-ch:
				if err != nil {
					t.Error(err)
				}
				n++
			default:
			}
		}
		return n
	}

	first := appendAsync()
	if c := <-entered; c != 1 {
		t.Fatalf("sync call %d, want 1", c)
	}
	var rest []chan error
	for range n {
		rest = append(rest, appendAsync())
	}
	// Wait until all n are queued behind the held fsync (no timing: the
	// queue is the log's own state).
	deadline := time.Now().Add(10 * time.Second) // a bound for a broken log, not a wait
	for {
		lg.mu.Lock()
		q := len(lg.queue)
		lg.mu.Unlock()
		if q == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d appends queued behind the held fsync", q, n)
		}
		runtime.Gosched()
	}
	if got := answered(append([]chan error{first}, rest...)); got != 0 {
		t.Fatalf("%d appends answered while the fsync covering them was held", got)
	}
	release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if c := <-entered; c != 2 {
		t.Fatalf("sync call %d, want 2", c)
	}
	if got := answered(rest); got != 0 {
		t.Fatalf("%d of the queued appends answered before their fsync", got)
	}
	close(release) // and any fsync after
	for _, ch := range rest {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if c := lg.counts(); c != [2]uint64{2, n + 1} {
		t.Fatalf("fsyncs, bodies = %v; want [2 %d]: the %d queued bodies share one fsync", c, n+1, n)
	}
	lg.close()
	if err := lg.append([]byte("x")); !errors.Is(err, errLogClosed) {
		t.Fatalf("append after close: %v, want errLogClosed", err)
	}
}

// The calibrator prices an fdatasync in process CPU, wraps around its
// file for a group that fits, grows the file for one that does not, and
// stops with its context.
func TestFsyncCalibrator(t *testing.T) {
	const size = 1 << 20
	path := filepath.Join(t.TempDir(), "cal")
	c, err := newFsyncCalibrator(path, size, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for _, tc := range []struct{ group, wantSize int }{
		{1024, size},
		{600 << 10, size},  // wraps: two never fit
		{3 << 20, 3 << 20}, // grows to fit
	} {
		cpu, ok, err := c.cpuPerSync(context.Background(), tc.group)
		if err != nil || (ok && cpu <= 0) || (runtime.GOOS == "linux" && !ok) {
			t.Fatalf("group %d: %v, %v, %v: want a positive CPU per fsync", tc.group, cpu, ok, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != int64(tc.wantSize) {
			t.Fatalf("group %d: file %v (%v), want %d bytes", tc.group, fi.Size(), err, tc.wantSize)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.cpuPerSync(ctx, 1024); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}
}
