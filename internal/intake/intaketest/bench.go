package intaketest

import (
	"slices"
	"testing"
	"time"
)

// ReportPublishLatency reports an adapter benchmark's records/s over the
// time spent publishing, and the p50 and p99 of one batch's confirm, in
// milliseconds (nearest rank). Every adapter's BenchmarkPublish reports
// the same metrics, so their figures compare.
func ReportPublishLatency(b *testing.B, lat []time.Duration, batch int, busy time.Duration) {
	if len(lat) == 0 || busy <= 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(float64(len(lat))*p+0.5) - 1
		return float64(lat[min(max(i, 0), len(lat)-1)]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(len(lat)*batch)/busy.Seconds(), "records/s")
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
}
