// Package ratelimit holds the in-memory, per-node limiters of the ingest
// path: a GCRA limiter keyed by tenant (429 rate_limited) and per-source
// token buckets for the quarantine pen (429 quarantine_rate_limited), both
// from CONTRACTS "Ingest" and "Verification".
//
// Nothing here is shared between nodes: a fleet of N nodes admits up to N
// times a tenant's limit. Time is injected (Options.Now); there is no
// package-level mutable state.
package ratelimit

import (
	"math"
	"time"
)

// Limit is a rate with a burst. The zero Limit is unlimited.
type Limit struct {
	// Rate is the sustained rate in requests per second. Rate <= 0 (or NaN,
	// or +Inf, or so high that one request costs under a nanosecond) means
	// unlimited. Config validation (config.RateLimit) keeps it in range;
	// the limiter does not refuse odd values, it gives them a meaning.
	Rate float64
	// Burst is how many requests a key that has been idle long enough may
	// send at once. Burst < 1 means one second's worth, max(1, ceil(Rate)),
	// the same default as config.RateLimit.
	Burst int
}

// Unlimited reports whether l admits everything.
func (l Limit) Unlimited() bool { return compile(l).unlimited() }

// Never is the retryAfter of a request that can never be admitted: AllowN
// with n above the burst. It is not a time to wait; callers that might ask
// for more than the burst should test for it.
const Never = time.Duration(math.MaxInt64)

// RetryAfterSeconds turns a retryAfter into the whole seconds of a
// Retry-After header: rounded up, at least 1 (a refused request must not be
// told to retry "now").
func RetryAfterSeconds(d time.Duration) int {
	if d <= 0 {
		return 1
	}
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return int(s)
}

// maxSpan caps every duration the limiter computes (an emission interval, a
// burst's worth of them) at about 36 years, so that sums of a clock reading
// and two spans cannot overflow int64 nanoseconds. Only absurd limits
// (Rate under one request per 36 years) reach it.
const maxSpan = int64(1) << 60

// rule is a Limit compiled to integer nanoseconds, the form GCRA needs.
// interval == 0 means unlimited.
type rule struct {
	limit     Limit // as given, for Limit/Overrides
	interval  int64 // T: nanoseconds one request costs, 1e9/Rate, rounded
	burst     int64 // requests admitted at once, >= 1
	tolerance int64 // burst * interval, saturated at maxSpan
}

func (r rule) unlimited() bool { return r.interval == 0 }

func compile(l Limit) rule {
	r := rule{limit: l}
	if !(l.Rate > 0) || math.IsInf(l.Rate, 1) {
		return r
	}
	iv := math.Round(float64(time.Second) / l.Rate)
	if iv < 1 {
		return r // faster than one request per nanosecond: unlimited
	}
	r.interval = maxSpan
	if iv < float64(maxSpan) {
		r.interval = int64(iv)
	}
	r.burst = int64(l.Burst)
	if r.burst < 1 {
		r.burst = int64(max(1, math.Ceil(l.Rate)))
	}
	r.tolerance = satMul(r.burst, r.interval)
	return r
}

// satMul returns a*b for a, b >= 0, saturated at maxSpan.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > maxSpan/b {
		return maxSpan
	}
	return min(a*b, maxSpan)
}
