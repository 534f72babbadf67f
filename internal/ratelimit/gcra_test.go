package ratelimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/ratelimit"
)

// step is one request (or a clock move) of a scripted sequence.
type step struct {
	advance time.Duration // moved before the request
	key     string        // "" means "t"
	n       int           // 0 means 1
	ok      bool
	retry   time.Duration // exact retryAfter expected when !ok
}

// run plays steps against g, failing on the first divergence.
func run(t *testing.T, g *ratelimit.GCRA, clk *fakeClock, steps []step) {
	t.Helper()
	for i, s := range steps {
		clk.Advance(s.advance)
		key, n := s.key, s.n
		if key == "" {
			key = "t"
		}
		if n == 0 {
			n = 1
		}
		ok, retry := g.AllowN(key, n)
		if ok != s.ok || (!ok && retry != s.retry) || (ok && retry != 0) {
			t.Fatalf("step %d (+%v AllowN(%q, %d)): got (%v, %v), want (%v, %v)",
				i, s.advance, key, n, ok, retry, s.ok, s.retry)
		}
	}
}

// times repeats s n times.
func times(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func seq(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestGCRA_Allow(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		limit ratelimit.Limit
		steps []step
	}{
		{
			name:  "burst admitted then refused",
			limit: ratelimit.Limit{Rate: 2, Burst: 3},
			steps: seq(times(3, step{ok: true}), []step{{retry: 500 * ms}, {retry: 500 * ms}}),
		},
		{
			name:  "refill at the rate",
			limit: ratelimit.Limit{Rate: 2, Burst: 3},
			steps: seq(
				times(3, step{ok: true}),
				[]step{
					{retry: 500 * ms},
					{advance: 200 * ms, retry: 300 * ms}, // a refusal costs nothing
					{advance: 300 * ms, ok: true},
					{retry: 500 * ms},
					{advance: 1000 * ms, ok: true}, // two refilled
					{ok: true},
					{retry: 500 * ms},
				}),
		},
		{
			name:  "refill never exceeds burst",
			limit: ratelimit.Limit{Rate: 2, Burst: 3},
			steps: seq(
				[]step{{advance: time.Hour, ok: true}},
				times(2, step{ok: true}),
				[]step{{retry: 500 * ms}},
			),
		},
		{
			name:  "sustained rate is exact",
			limit: ratelimit.Limit{Rate: 4, Burst: 1},
			steps: seq(
				[]step{{ok: true}, {retry: 250 * ms}},
				times(10, step{advance: 250 * ms, ok: true}),
				[]step{{advance: 249 * ms, retry: 1 * ms}},
			),
		},
		{
			name:  "fractional rate",
			limit: ratelimit.Limit{Rate: 1.0 / 3, Burst: 1},
			steps: []step{{ok: true}, {retry: 3 * time.Second}, {advance: 2 * time.Second, retry: time.Second}, {advance: time.Second, ok: true}},
		},
		{
			name:  "burst 0 is one second's worth",
			limit: ratelimit.Limit{Rate: 2.5},
			steps: seq(times(3, step{ok: true}), []step{{retry: 400 * ms}}),
		},
		{
			name:  "AllowN spends n",
			limit: ratelimit.Limit{Rate: 10, Burst: 5},
			steps: []step{
				{n: 3, ok: true},
				{n: 3, retry: 100 * ms}, // until 3 fit, not 1
				{n: 2, ok: true},
				{retry: 100 * ms},
				{advance: 300 * ms, n: 3, ok: true},
			},
		},
		{
			name:  "AllowN above burst never fits",
			limit: ratelimit.Limit{Rate: 10, Burst: 5},
			steps: []step{{n: 6, retry: ratelimit.Never}, {advance: time.Hour, n: 6, retry: ratelimit.Never}, {n: 5, ok: true}},
		},
		{
			name:  "n <= 0 admitted and free",
			limit: ratelimit.Limit{Rate: 1, Burst: 1},
			steps: []step{{ok: true}, {n: -1, ok: true}, {retry: time.Second}},
		},
		{
			name:  "absurdly slow rate saturates without overflow",
			limit: ratelimit.Limit{Rate: 1e-30, Burst: 2},
			steps: []step{{ok: true}, {retry: 1 << 60}, {advance: time.Hour, retry: 1<<60 - time.Hour}},
		},
		{
			name:  "unlimited admits everything",
			limit: ratelimit.Limit{},
			steps: times(10_000, step{n: 1000, ok: true}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			g := ratelimit.NewGCRA(ratelimit.Options{Default: tc.limit, Now: clk.Now})
			run(t, g, clk, tc.steps)
		})
	}
}

func TestGCRA_KeysIsolated(t *testing.T) {
	clk := newFakeClock()
	g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: 1, Burst: 2}, Now: clk.Now})
	run(t, g, clk, []step{
		{key: "a", ok: true}, {key: "a", ok: true}, {key: "a", retry: time.Second},
		{key: "b", ok: true}, {key: "b", ok: true}, {key: "b", retry: time.Second},
		{key: "a", retry: time.Second},
		{advance: 500 * time.Millisecond, key: "c", ok: true},
		{key: "a", retry: 500 * time.Millisecond},
	})
}

func TestGCRA_UnlimitedHoldsNoState(t *testing.T) {
	g := ratelimit.NewGCRA(ratelimit.Options{Now: newFakeClock().Now})
	for i := range 1000 {
		if ok, _ := g.Allow(fmt.Sprint("tenant-", i)); !ok {
			t.Fatalf("unlimited refused request %d", i)
		}
	}
	if n := g.Len(); n != 0 {
		t.Fatalf("Len = %d, want 0", n)
	}
}

func TestGCRA_Overrides(t *testing.T) {
	ms := time.Millisecond
	def := ratelimit.Limit{Rate: 1, Burst: 2}
	for _, tc := range []struct {
		name  string
		steps func(t *testing.T, g *ratelimit.GCRA, clk *fakeClock)
	}{
		{"raise applies at once, spent requests carried over", func(t *testing.T, g *ratelimit.GCRA, clk *fakeClock) {
			run(t, g, clk, []step{{ok: true}, {ok: true}, {retry: time.Second}})
			g.SetLimit("t", ratelimit.Limit{Rate: 10, Burst: 10})
			// 2 of 10 already spent: 8 more, then one per 100ms.
			run(t, g, clk, seq(times(8, step{ok: true}), []step{{retry: 100 * ms}}))
		}},
		{"lower applies at once, debt capped at the new burst", func(t *testing.T, g *ratelimit.GCRA, clk *fakeClock) {
			g.SetLimit("t", ratelimit.Limit{Rate: 100, Burst: 100})
			run(t, g, clk, times(50, step{ok: true}))
			g.SetLimit("t", ratelimit.Limit{Rate: 1, Burst: 5})
			run(t, g, clk, []step{{retry: time.Second}, {advance: time.Second, ok: true}, {retry: time.Second}})
		}},
		{"override on a fresh key", func(t *testing.T, g *ratelimit.GCRA, clk *fakeClock) {
			g.SetLimit("t", ratelimit.Limit{Rate: 4, Burst: 1})
			run(t, g, clk, []step{{ok: true}, {retry: 250 * ms}, {key: "other", ok: true}, {key: "other", ok: true}, {key: "other", retry: time.Second}})
		}},
		{"zero override is unlimited", func(t *testing.T, g *ratelimit.GCRA, clk *fakeClock) {
			run(t, g, clk, []step{{ok: true}, {ok: true}, {retry: time.Second}})
			g.SetLimit("t", ratelimit.Limit{})
			run(t, g, clk, times(1000, step{ok: true}))
		}},
		{"DeleteLimit falls back to the default", func(t *testing.T, g *ratelimit.GCRA, clk *fakeClock) {
			g.SetLimit("t", ratelimit.Limit{Rate: 10, Burst: 10})
			run(t, g, clk, times(10, step{ok: true}))
			g.DeleteLimit("t")
			// 10 spent, capped at the default burst of 2: exhausted.
			run(t, g, clk, []step{{retry: time.Second}, {advance: 2 * time.Second, ok: true}, {ok: true}, {retry: time.Second}})
			g.DeleteLimit("t") // no-op
			g.DeleteLimit("never-set")
		}},
		{"SetDefault applies to keys without overrides", func(t *testing.T, g *ratelimit.GCRA, clk *fakeClock) {
			g.SetLimit("vip", ratelimit.Limit{Rate: 1, Burst: 1})
			g.SetDefault(ratelimit.Limit{Rate: 2, Burst: 4})
			run(t, g, clk, seq(times(4, step{ok: true}), []step{{retry: 500 * ms}, {key: "vip", ok: true}, {key: "vip", retry: time.Second}}))
			g.SetDefault(ratelimit.Limit{})
			run(t, g, clk, seq(times(100, step{ok: true}), []step{{key: "vip", retry: time.Second}}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			g := ratelimit.NewGCRA(ratelimit.Options{Default: def, Now: clk.Now})
			tc.steps(t, g, clk)
		})
	}
}

func TestGCRA_LimitAndOverrides(t *testing.T) {
	def := ratelimit.Limit{Rate: 1, Burst: 2}
	g := ratelimit.NewGCRA(ratelimit.Options{Default: def})
	if l, own := g.Limit("a"); own || l != def {
		t.Fatalf("Limit(a) = %+v, %v; want default", l, own)
	}
	a := ratelimit.Limit{Rate: 5, Burst: 7}
	b := ratelimit.Limit{} // unlimited override
	g.SetLimit("a", a)
	g.SetLimit("b", b)
	if l, own := g.Limit("a"); !own || l != a {
		t.Fatalf("Limit(a) = %+v, %v; want %+v, true", l, own, a)
	}
	if l, own := g.Limit("b"); !own || l != b {
		t.Fatalf("Limit(b) = %+v, %v; want %+v, true", l, own, b)
	}
	got := g.Overrides()
	if len(got) != 2 || got["a"] != a || got["b"] != b {
		t.Fatalf("Overrides = %v", got)
	}
	got["a"] = ratelimit.Limit{} // a copy: no effect
	g.DeleteLimit("a")
	if l, own := g.Limit("a"); own || l != def {
		t.Fatalf("after DeleteLimit, Limit(a) = %+v, %v; want default", l, own)
	}
	if got := g.Overrides(); len(got) != 1 {
		t.Fatalf("Overrides = %v, want only b", got)
	}
	if g.Default() != def {
		t.Fatalf("Default = %+v", g.Default())
	}
}

func TestGCRA_RealClock(t *testing.T) {
	g := ratelimit.NewGCRA(ratelimit.Options{Default: ratelimit.Limit{Rate: 0.001, Burst: 1}})
	if ok, _ := g.Allow("t"); !ok {
		t.Fatal("first request refused")
	}
	ok, retry := g.Allow("t")
	if ok || retry <= 999*time.Second || retry > 1000*time.Second {
		t.Fatalf("second request: (%v, %v), want refused with ~1000s", ok, retry)
	}
}
