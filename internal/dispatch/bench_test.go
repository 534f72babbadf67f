package dispatch_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// Benchmarks of the dispatcher alone (issue 14's delivery levers). They
// report the process's CPU (getrusage: user+system, so the figures hold on
// a host shared with other work, where wall-clock rates do not), not
// assertions. docs/benchmarks.md says how they are run and what they gave.

// countSink counts deliveries; fail makes every attempt fail (a dead sink).
type countSink struct {
	n    atomic.Int64
	fail bool
}

func (s *countSink) Deliver(context.Context, *sink.Message) error {
	s.n.Add(1)
	if s.fail {
		return errors.New("connection refused")
	}
	return nil
}
func (s *countSink) Close() error { return nil }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// load writes n hooks of source src, due now at sink num, straight into the
// store (as an archive replay writes them back), seqs from first.
func load(tb testing.TB, st *store.Store, first uint64, n int, src string, num uint16) {
	tb.Helper()
	body := make([]byte, 1024)
	nowMs := time.Now().UnixMilli()
	for i := 0; i < n; {
		b := st.NewBatch()
		for j := 0; j < 10_000 && i < n; j, i = j+1, i+1 {
			env := &store.Envelope{Seq: first + uint64(i), Tenant: "t", Source: src, ContentType: "application/json", Body: body}
			env.ID[0], env.ID[1] = byte(num), 1
			for k := 0; k < 8; k++ {
				env.ID[8+k] = byte(env.Seq >> (8 * k))
			}
			b.PutRestoredHook(env, store.EncodeEnvelope(env), []store.DueSink{{Num: num, ID: src}}, nowMs, "")
		}
		if err := st.Apply(b); err != nil {
			tb.Fatal(err)
		}
		_ = b.Close()
	}
}

// openBenchStore opens a store on the real disk as ankusa serve opens it:
// with its 64 MiB memtable (internal/app), not Pebble's 4 MiB default,
// which flushes and compacts sixteen times as often and made a large
// store's cost look like the dispatcher's.
func openBenchStore(tb testing.TB) *store.Store {
	tb.Helper()
	st, err := store.Open(store.Options{Dir: testutil.TempStoreDir(tb), Logger: quiet(), MemTableSize: 64 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// BenchmarkDeliverAndReclaim: b.N hooks due at one sink that takes them at
// once; the dispatcher's CPU per hook from start to the last reclaim.
func BenchmarkDeliverAndReclaim(b *testing.B) {
	st := openBenchStore(b)
	load(b, st, 1, b.N, "src", 0)
	s := &countSink{}
	var reclaimed atomic.Int64
	d := dispatch.New(st, dispatch.Options{
		Targets:   map[uint16]dispatch.Target{0: {ID: "src", Sink: s}},
		Durable:   func() uint64 { return math.MaxUint64 },
		OnReclaim: func(h, _ int) { reclaimed.Add(int64(h)) },
		Logger:    quiet(), Poll: 10 * time.Millisecond,
	})
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuNow()
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	for reclaimed.Load() < int64(b.N) {
		time.Sleep(time.Millisecond) // a benchmark's poll, not a test's synchronisation
	}
	cpu := cpuNow() - cpu0
	b.StopTimer()
	d.Stop()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/hook")
}

// BenchmarkParkedBacklog: parked hooks (200 000, or ANKUSA_TEST_BENCH_PARKED)
// due at a dead sink (its breaker
// opens after 5 failures, 1 s cooldown, so a probe every second), then
// b.N hooks of another source delivered. Reports the cores the idle
// process uses over 5 s with the backlog parked (after 20 s for Pebble to
// settle the load), and the CPU per hook
// of the other source's deliveries.
func BenchmarkParkedBacklog(b *testing.B) {
	parked := 200_000
	if v, err := strconv.Atoi(os.Getenv("ANKUSA_TEST_BENCH_PARKED")); err == nil {
		parked = v // the backlog's size; 0 for the same run without one
	}
	st := openBenchStore(b)
	load(b, st, 1, parked, "dead", 1)
	dead, live := &countSink{fail: true}, &countSink{}
	var reclaimed atomic.Int64
	d := dispatch.New(st, dispatch.Options{
		Targets: map[uint16]dispatch.Target{
			0: {ID: "live", Sink: live},
			1: {ID: "dead", Sink: dead},
		},
		Durable:         func() uint64 { return math.MaxUint64 },
		OnReclaim:       func(h, _ int) { reclaimed.Add(int64(h)) },
		Logger:          quiet(),
		BreakerCooldown: time.Second,
		Retry:           dispatch.RetryPolicy{Base: time.Hour, Max: time.Hour},
	})
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	defer d.Stop()
	for parked > 0 && dead.n.Load() < 5 {
		time.Sleep(time.Millisecond)
	}
	// The breaker is open and the backlog parked; Pebble's flushes and
	// compactions of the load settle before the idle window.
	time.Sleep(20 * time.Second)
	cpu0, t0 := cpuNow(), time.Now()
	time.Sleep(5 * time.Second)
	idle := float64(cpuNow()-cpu0) / float64(time.Since(t0))

	// ANKUSA_TEST_BENCH_CPUPROFILE: a CPU profile of the other source's
	// load and delivery alone (go test's -cpuprofile covers the setup too).
	if f := os.Getenv("ANKUSA_TEST_BENCH_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = out.Close() }()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, t0 = cpuNow(), time.Now()
	load(b, st, uint64(parked)+1, b.N, "live", 0)
	d.Wake()
	for reclaimed.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	cpu, wall := cpuNow()-cpu0, time.Since(t0)
	b.StopTimer()
	b.ReportMetric(idle, "idle-cores")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/hook")
	b.ReportMetric(float64(b.N)/wall.Seconds(), "hooks/s")
}
