package ratelimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/ratelimit"
)

// A MaxKeys under 128 is one exact LRU, so these tests can name what is
// evicted.
func TestGCRA_MaxKeys(t *testing.T) {
	lim := ratelimit.Limit{Rate: 1, Burst: 2}
	for _, tc := range []struct {
		name     string
		steps    []step
		wantFull int // refusals for want of room
	}{
		{
			name:     "full of unpaid keys refuses a new key",
			wantFull: 1,
			steps: []step{
				{key: "a", ok: true}, {key: "b", ok: true}, {key: "c", ok: true},
				{advance: 200 * time.Millisecond, key: "d", retry: 800 * time.Millisecond},
				{advance: 800 * time.Millisecond, key: "d", ok: true}, // a idle: evicted
				{key: "d", ok: true},
				{key: "d", retry: time.Second},
			},
		},
		{
			name:     "only idle keys are evicted, LRU first",
			wantFull: 1,
			steps: []step{
				{key: "a", ok: true}, {key: "a", ok: true}, // a paid up at +2s
				{key: "b", ok: true}, {key: "c", ok: true}, // paid up at +1s
				{advance: time.Second, key: "d", ok: true}, // evicts b (a is colder but unpaid)
				{key: "a", ok: true},                       // a kept its debt: one left, not two
				{key: "a", retry: time.Second},
				{key: "e", ok: true}, // evicts c, the only idle one
				{key: "f", retry: time.Second},
			},
		},
		{
			name: "an evicted idle key is a fresh key",
			steps: []step{
				{key: "a", ok: true}, {key: "b", ok: true}, {key: "c", ok: true},
				{advance: 5 * time.Second, key: "d", ok: true}, // evicts a
				{key: "a", ok: true},                           // evicts b
				{key: "a", ok: true},
				{key: "a", retry: time.Second},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			full := 0
			g := ratelimit.NewGCRA(ratelimit.Options{Default: lim, Now: clk.Now, MaxKeys: 3, OnFull: func() { full++ }})
			run(t, g, clk, tc.steps)
			if n := g.Len(); n > 3 {
				t.Fatalf("Len = %d, want <= 3", n)
			}
			if full != tc.wantFull {
				t.Fatalf("OnFull called %d times, want %d", full, tc.wantFull)
			}
		})
	}
}

func TestGCRA_OnFull(t *testing.T) {
	clk := newFakeClock()
	full := 0
	g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: 1, Burst: 1}, Now: clk.Now, MaxKeys: 1, OnFull: func() { full++ }})
	g.Allow("a")
	g.Allow("a") // refused by its limit: not OnFull
	if ok, retry := g.Allow("b"); ok || retry != time.Second {
		t.Fatalf("Allow(b) = (%v, %v), want refused for 1s", ok, retry)
	}
	if full != 1 {
		t.Fatalf("OnFull called %d times, want 1", full)
	}
}

// Many distinct keys at one instant: memory stays at MaxKeys, and no
// admitted key gets a second burst from being evicted and coming back.
func TestGCRA_MaxKeysBoundsMemoryWithoutExtraBursts(t *testing.T) {
	for _, maxKeys := range []int{1, 100, 1000, 5000} {
		t.Run(fmt.Sprint(maxKeys), func(t *testing.T) {
			clk := newFakeClock()
			g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: 1, Burst: 1}, Now: clk.Now, MaxKeys: maxKeys})
			var admitted []string
			for i := range 4 * maxKeys {
				k := fmt.Sprint("tenant-", i)
				if ok, _ := g.Allow(k); ok {
					admitted = append(admitted, k)
				}
				if n := g.Len(); n > maxKeys {
					t.Fatalf("after %d keys, Len = %d > MaxKeys %d", i+1, n, maxKeys)
				}
			}
			if len(admitted) > maxKeys {
				t.Fatalf("%d keys admitted with MaxKeys %d and none idle", len(admitted), maxKeys)
			}
			for _, k := range admitted {
				if ok, _ := g.Allow(k); ok {
					t.Fatalf("%s admitted twice within its burst of 1", k)
				}
			}
			// Once they are all idle, new keys take their place.
			clk.Advance(time.Second)
			for i := range 4 * maxKeys {
				if ok, _ := g.Allow(fmt.Sprint("next-", i)); !ok && i < maxKeys/2 {
					// Shards fill unevenly (by a random hash seed), so only
					// the first half of MaxKeys is sure to fit; none would
					// if idle keys were not evicted.
					t.Fatalf("new key %d refused though every old key is idle", i)
				}
				if n := g.Len(); n > maxKeys {
					t.Fatalf("Len = %d > MaxKeys %d", n, maxKeys)
				}
			}
		})
	}
}

// Keys that go idle as the clock moves are recycled: a long stream of
// distinct keys, each idle by the time the table is full, is all admitted.
func TestGCRA_MaxKeysRecyclesIdle(t *testing.T) {
	clk := newFakeClock()
	g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: 1000, Burst: 1}, Now: clk.Now, MaxKeys: 64})
	for i := range 10_000 {
		clk.Advance(time.Millisecond) // each key idle 1ms after its request
		if ok, _ := g.Allow(fmt.Sprint("k", i)); !ok {
			t.Fatalf("key %d refused", i)
		}
	}
	if n := g.Len(); n != 64 {
		t.Fatalf("Len = %d, want 64", n)
	}
}
