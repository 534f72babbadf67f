package ratelimit_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/ratelimit"
)

// With a clock that does not move, goroutines hammering the same keys get
// exactly burst admissions per key: no more (a lost update would admit
// extra), no fewer.
func TestGCRA_ConcurrentExactBurst(t *testing.T) {
	const (
		goroutines = 32
		keys       = 8
		burst      = 50
		attempts   = 200 // per goroutine per key, far above burst
	)
	clk := newFakeClock()
	g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: 10, Burst: burst}, Now: clk.Now})
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range goroutines {
		wg.Go(func() {
			for i := range attempts * keys {
				k := (i + w) % keys
				if ok, _ := g.Allow(fmt.Sprint("tenant-", k)); ok {
					admitted[k].Add(1)
				}
			}
		})
	}
	// Overrides of other keys, read and written meanwhile, for -race.
	wg.Go(func() {
		for i := range 1000 {
			k := fmt.Sprint("other-", i%10)
			g.SetLimit(k, ratelimit.Limit{Rate: float64(i), Burst: i})
			g.Limit(k)
			g.Overrides()
			g.Len()
			g.DeleteLimit(k)
		}
	})
	wg.Wait()
	for k := range keys {
		if n := admitted[k].Load(); n != burst {
			t.Errorf("tenant-%d: %d admitted, want exactly %d", k, n, burst)
		}
	}
}

// The clock moves between rounds of hammering: each key gets exactly
// burst + rate*elapsed, the bound of the limiter, reached because demand
// always exceeds it.
func TestGCRA_ConcurrentRefill(t *testing.T) {
	const (
		goroutines = 16
		keys       = 4
		rate       = 100
		burst      = 20
		rounds     = 20
		step       = 100 * time.Millisecond // rate*step = 10 a round
	)
	clk := newFakeClock()
	g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: rate, Burst: burst}, Now: clk.Now})
	var admitted [keys]atomic.Int64
	for r := range rounds + 1 {
		if r > 0 {
			clk.Advance(step)
		}
		var wg sync.WaitGroup
		for w := range goroutines {
			wg.Go(func() {
				for i := range 10 * keys {
					k := (i + w) % keys
					if ok, _ := g.Allow(fmt.Sprint("tenant-", k)); ok {
						admitted[k].Add(1)
					}
				}
			})
		}
		wg.Wait()
	}
	elapsed := rounds * step
	want := int64(burst + rate*elapsed.Seconds())
	for k := range keys {
		if n := admitted[k].Load(); n != want {
			t.Errorf("tenant-%d: %d admitted over %v, want burst+rate*elapsed = %d", k, n, elapsed, want)
		}
	}
}

// Buckets under the same hammering: exactly burst per source.
func TestBuckets_ConcurrentExactBurst(t *testing.T) {
	clk := newFakeClock()
	b := ratelimit.NewBuckets(20, 100, clk.Now)
	var admitted [3]atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 300 {
				k := (i + w) % 3
				if ok, _ := b.Take(fmt.Sprint("src-", k)); ok {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n != 100 {
			t.Errorf("src-%d: %d admitted, want 100", k, n)
		}
	}
}
