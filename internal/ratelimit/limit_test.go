package ratelimit_test

import (
	"math"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/ratelimit"
)

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 1},
		{0, 1},
		{time.Nanosecond, 1},
		{500 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{1200 * time.Millisecond, 2},
		{2 * time.Second, 2},
		{59*time.Second + 1, 60},
		{ratelimit.Never, int(math.MaxInt64/int64(time.Second)) + 1},
	} {
		if got := ratelimit.RetryAfterSeconds(tc.d); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestLimit_Unlimited(t *testing.T) {
	for _, tc := range []struct {
		l    ratelimit.Limit
		want bool
	}{
		{ratelimit.Limit{}, true},
		{ratelimit.Limit{Burst: 10}, true},
		{ratelimit.Limit{Rate: -1, Burst: 10}, true},
		{ratelimit.Limit{Rate: math.NaN()}, true},
		{ratelimit.Limit{Rate: math.Inf(1)}, true},
		{ratelimit.Limit{Rate: 1e10}, true}, // under 1ns a request
		{ratelimit.Limit{Rate: 1e9}, false},
		{ratelimit.Limit{Rate: 0.001}, false},
		{ratelimit.Limit{Rate: 20, Burst: 100}, false},
	} {
		if got := tc.l.Unlimited(); got != tc.want {
			t.Errorf("%+v.Unlimited() = %v, want %v", tc.l, got, tc.want)
		}
	}
}
