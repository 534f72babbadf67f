package ratelimit_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/ratelimit"
)

func TestBuckets_Take(t *testing.T) {
	type take struct {
		advance time.Duration
		key     string
		ok      bool
		retry   time.Duration
	}
	repeat := func(n int, tk take) []take {
		out := make([]take, n)
		for i := range out {
			out[i] = tk
		}
		return out
	}
	cat := func(parts ...[]take) []take {
		var out []take
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
		takes []take
	}{
		{
			name: "quarantine default: burst 100, 20/s", rate: 20, burst: 100,
			takes: cat(
				repeat(100, take{key: "src", ok: true}),
				[]take{
					{key: "src", retry: 50 * time.Millisecond},
					{advance: 30 * time.Millisecond, key: "src", retry: 20 * time.Millisecond},
					{advance: 20 * time.Millisecond, key: "src", ok: true},
					{key: "src", retry: 50 * time.Millisecond},
					{key: "other", ok: true}, // per source
					{advance: time.Second, key: "src", ok: true},
				},
				repeat(19, take{key: "src", ok: true}),
				[]take{{key: "src", retry: 50 * time.Millisecond}},
			),
		},
		{
			name: "rate 0 is unlimited", rate: 0, burst: 100,
			takes: repeat(10_000, take{key: "src", ok: true}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			b := ratelimit.NewBuckets(tc.rate, tc.burst, clk.Now)
			for i, tk := range tc.takes {
				clk.Advance(tk.advance)
				ok, retry := b.Take(tk.key)
				if ok != tk.ok || (!ok && retry != tk.retry) {
					t.Fatalf("take %d (+%v %q): got (%v, %v), want (%v, %v)", i, tk.advance, tk.key, ok, retry, tk.ok, tk.retry)
				}
			}
		})
	}
}

func TestBuckets_BoundedKeys(t *testing.T) {
	clk := newFakeClock()
	b := ratelimit.NewBuckets(20, 100, clk.Now)
	for i := range 2 * ratelimit.DefaultMaxKeys {
		b.Take(strconv.Itoa(i))
	}
	if n := b.Len(); n > ratelimit.DefaultMaxKeys {
		t.Fatalf("Len = %d > %d", n, ratelimit.DefaultMaxKeys)
	}
}
