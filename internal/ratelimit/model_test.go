package ratelimit_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/ratelimit"
)

// refBucket is the textbook token bucket, kept in exact integer
// nanoseconds of credit: capacity burst*T, starting full, refilled one
// nanosecond per nanosecond, a request costing T. GCRA must make the same
// decision and give the same retryAfter at every step.
type refBucket struct {
	interval, capacity, credit, last int64
}

func (b *refBucket) take(now int64, n int64, burst int64) (bool, time.Duration) {
	b.credit = min(b.capacity, b.credit+(now-b.last))
	b.last = now
	if n > burst {
		return false, ratelimit.Never
	}
	cost := n * b.interval
	if b.credit >= cost {
		b.credit -= cost
		return true, 0
	}
	return false, time.Duration(cost - b.credit)
}

// FuzzGCRA_MatchesTokenBucket drives GCRA and refBucket with the same
// clock moves and requests. Invariants: same ok, same retryAfter, and
// admissions never exceed burst + elapsed/T.
func FuzzGCRA_MatchesTokenBucket(f *testing.F) {
	f.Add(uint64(1), uint16(500), uint8(3))
	f.Add(uint64(2), uint16(1), uint8(1))
	f.Add(uint64(3), uint16(20), uint8(100))
	f.Add(uint64(4), uint16(7), uint8(0))
	for s := range uint64(20) {
		f.Add(s+100, uint16(s*37+1), uint8(s*13))
	}
	f.Fuzz(func(t *testing.T, seed uint64, intervalMs uint16, burst8 uint8) {
		if intervalMs == 0 {
			intervalMs = 1
		}
		burst := int64(burst8)%50 + 1
		iv := int64(intervalMs) * int64(time.Millisecond)
		rate := float64(time.Second) / float64(iv) // round-trips to iv exactly
		clk := newFakeClock()
		g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: rate, Burst: int(burst)}, Now: clk.Now})
		ref := &refBucket{interval: iv, capacity: burst * iv, credit: burst * iv}
		rng := rand.New(rand.NewPCG(seed, 0))
		var now, admitted int64
		for i := range 500 {
			if rng.IntN(3) == 0 {
				d := rng.Int64N(2*iv + 1)
				if rng.IntN(10) == 0 {
					d = rng.Int64N(burst*iv*2 + 1)
				}
				clk.Advance(time.Duration(d))
				now += d
			}
			n := int64(1)
			if rng.IntN(4) == 0 {
				n = rng.Int64N(burst+1) + 1 // sometimes burst+1: Never
			}
			gotOK, gotRetry := g.AllowN("k", int(n))
			wantOK, wantRetry := ref.take(now, n, burst)
			if gotOK != wantOK || gotRetry != wantRetry {
				t.Fatalf("step %d (t=%v, n=%d, T=%v, burst=%d): GCRA (%v, %v), token bucket (%v, %v)",
					i, time.Duration(now), n, time.Duration(iv), burst, gotOK, gotRetry, wantOK, wantRetry)
			}
			if gotOK {
				admitted += n
			}
			if bound := burst + now/iv; admitted > bound {
				t.Fatalf("step %d: %d admitted by t=%v, above burst+rate*elapsed = %d", i, admitted, time.Duration(now), bound)
			}
		}
	})
}
