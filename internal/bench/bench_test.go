package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunSanity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two HTTP servers and a real-disk store under load")
	}
	var out bytes.Buffer
	rs, err := Run(context.Background(), Options{
		Clients:  []int{4},
		Duration: 300 * time.Millisecond,
		Warmup:   50 * time.Millisecond,
		DataDir:  t.TempDir(),
		Out:      &out,
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Mode != ModeNull || rs[1].Mode != ModeDisk {
		t.Fatalf("want [null disk], got %+v", rs)
	}
	for _, r := range rs {
		if r.Clients != 4 || r.BodyBytes != 1024 {
			t.Errorf("%s: clients=%d body=%d", r.Mode, r.Clients, r.BodyBytes)
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
	}
	d := rs[1]
	if d.Fsyncs == 0 || d.Hooks == 0 || d.FsyncsPerSec <= 0 {
		t.Errorf("disk: no fsyncs/hooks counted: %+v", d)
	}
	if d.MeanGroup < 1 {
		t.Errorf("disk: mean group %.2f < 1 (hooks=%d fsyncs=%d)", d.MeanGroup, d.Hooks, d.Fsyncs)
	}
	if !strings.Contains(out.String(), "disk  C=4 B=1024") {
		t.Errorf("output lacks the disk line:\n%s", out.String())
	}
	var sum bytes.Buffer
	v := PrintSummary(&sum, rs)
	if v.Pass() {
		t.Errorf("targets at C=512/C=64 were not run, the verdict must not pass:\n%s", sum.String())
	}
	if !strings.Contains(sum.String(), "ratio disk/null C=4:") {
		t.Errorf("summary lacks the ratio:\n%s", sum.String())
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
