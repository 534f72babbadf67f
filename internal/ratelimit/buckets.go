package ratelimit

import "time"

// Buckets is a token bucket per key (a source id) for the quarantine pen
// (CONTRACTS "Verification": burst 100, 20/s per source, beyond it 429
// quarantine_rate_limited): each key's bucket holds burst tokens, starts
// full, refills at rate per second, and each Take spends one.
//
// It is a GCRA with one fixed limit, not a second implementation: GCRA is
// the same limiter with its state kept as one timestamp (see GCRA), and
// one algorithm is tested once. Key state is bounded by DefaultMaxKeys,
// evicting only full (idle) buckets, as GCRA does.
type Buckets struct {
	g *GCRA
}

// NewBuckets returns buckets of burst tokens refilled at rate per second.
// rate <= 0 means unlimited; burst < 1 means max(1, ceil(rate)). now nil
// means time.Now.
func NewBuckets(rate float64, burst int, now func() time.Time) *Buckets {
	return &Buckets{g: NewGCRA(Options{Default: Limit{Rate: rate, Burst: burst}, Now: now})}
}

// Take spends one token of key's bucket. When the bucket is empty nothing
// is spent and retryAfter is how long until it holds one token.
func (b *Buckets) Take(key string) (ok bool, retryAfter time.Duration) {
	return b.g.Allow(key)
}

// Len returns how many keys hold state (at most DefaultMaxKeys).
func (b *Buckets) Len() int { return b.g.Len() }
