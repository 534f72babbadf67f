package memory_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
)

// BenchmarkPublishBatch measures what one publish of a group of 1 KiB
// records costs the caller with several publishes in flight, as the dual
// commit's publisher keeps them: the figure to compare with the confirm
// latency (p50-ms against confirm-ms). Run with -benchtime=500x or so.
func BenchmarkPublishBatch(b *testing.B) {
	for _, lat := range []time.Duration{0, 5 * time.Millisecond} {
		for _, inflight := range []int{1, 4} {
			b.Run(fmt.Sprintf("confirm=%s/inflight=%d", lat, inflight), func(b *testing.B) {
				l, err := memory.Open(memory.Options{Dir: b.TempDir(), Node: "n1", ConfirmLatency: lat})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				batch := make([]intake.Record, 12)
				for i := range batch {
					batch[i] = rec("n1", uint64(i+1))
					batch[i].Value = make([]byte, 1024)
				}
				var mu sync.Mutex
				var durs []time.Duration
				jobs := make(chan struct{})
				var wg sync.WaitGroup
				for range inflight {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range jobs {
							start := time.Now()
							if _, err := l.PublishBatch(b.Context(), batch); err != nil {
								b.Error(err)
							}
							d := time.Since(start)
							mu.Lock()
							durs = append(durs, d)
							mu.Unlock()
						}
					}()
				}
				for b.Loop() {
					jobs <- struct{}{}
				}
				close(jobs)
				wg.Wait()
				sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
				if len(durs) > 0 {
					b.ReportMetric(float64(durs[len(durs)/2])/1e6, "p50-ms")
					b.ReportMetric(float64(durs[len(durs)*99/100])/1e6, "p99-ms")
				}
			})
		}
	}
}
