package ratelimit_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ankusa/ankusa/internal/ratelimit"
)

// BenchmarkGCRA_Allow measures the ingest hot path with the real clock,
// from many goroutines (-cpu to vary them).
func BenchmarkGCRA_Allow(b *testing.B) {
	for _, bc := range []struct {
		name  string
		keys  int
		limit ratelimit.Limit
	}{
		{"1024keys", 1024, ratelimit.Limit{Rate: 1e6, Burst: 1000}},
		{"1key", 1, ratelimit.Limit{Rate: 1e6, Burst: 1000}},
		{"unlimited", 1024, ratelimit.Limit{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := ratelimit.NewGCRA(ratelimit.Options{Default: bc.limit})
			keys := make([]string, bc.keys)
			for i := range keys {
				keys[i] = "tenant-" + strconv.Itoa(i)
			}
			var worker atomic.Uint32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919
				for pb.Next() {
					g.Allow(keys[i%len(keys)])
					i++
				}
			})
		})
	}
}

func BenchmarkBuckets_Take(b *testing.B) {
	bk := ratelimit.NewBuckets(20, 100, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bk.Take("source")
		}
	})
}
