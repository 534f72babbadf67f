package metrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/metrics"
	"github.com/ankusa/ankusa/internal/queue"
	ankutil "github.com/ankusa/ankusa/internal/testutil"
)

// contractSeries are the names CONTRACTS.md and the wiring promise.
var contractSeries = []string{
	"ankusa_ingest_requests_total",
	"ankusa_ingest_duration_seconds",
	"ankusa_ingest_refused_total",
	"ankusa_ingest_handshakes_total",
	"ankusa_load_shed_total",
	"ankusa_wal_commit_duration_seconds",
	"ankusa_wal_commit_batch_size",
	"ankusa_wal_sync_duration_seconds",
	"ankusa_wal_sync_failures_total",
	"ankusa_store_hooks",
	"ankusa_store_deliveries",
	"ankusa_store_disk_bytes",
	"ankusa_wal_next_seq",
	"ankusa_wal_durable_seq",
	"ankusa_queue_depth",
}

func newMetrics(t *testing.T) (*prometheus.Registry, *metrics.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return reg, metrics.New(reg)
}

func TestMetrics_Series(t *testing.T) {
	reg, m := newMetrics(t)
	stats := queue.Stats{NextSeq: 8, DurableSeq: 7, Hooks: 6, Deliveries: 12, Queued: 3}
	m.WatchQueue(func() queue.Stats { return stats }, func() uint64 { return 4096 })
	m.Ingest("demo", metrics.OutcomeAccepted, 3*time.Millisecond)
	m.IngestRefused(metrics.ReasonOverload)
	m.Handshake("demo", "slack")
	m.Group(4, 3, time.Millisecond)
	m.Sync(2*time.Millisecond, nil)
	m.Sync(time.Millisecond, errors.New("injected"))

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range contractSeries {
		if !got[name] {
			t.Errorf("series %s not gathered", name)
		}
	}
	if probs, err := testutil.GatherAndLint(reg); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %+v", err, probs)
	}

	gauges := map[string]float64{
		"ankusa_store_hooks":      6,
		"ankusa_store_deliveries": 12,
		"ankusa_store_disk_bytes": 4096,
		"ankusa_wal_next_seq":     8,
		"ankusa_wal_durable_seq":  7,
		"ankusa_queue_depth":      3,
	}
	for _, mf := range mfs {
		want, ok := gauges[mf.GetName()]
		if !ok {
			continue
		}
		if v := mf.GetMetric()[0].GetGauge().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", mf.GetName(), v, want)
		}
	}
}

func TestMetrics_Counters(t *testing.T) {
	t.Run("ingest", func(t *testing.T) {
		reg, m := newMetrics(t)
		m.Ingest("demo", metrics.OutcomeAccepted, time.Millisecond)
		m.Ingest("demo", metrics.OutcomeAccepted, time.Millisecond)
		m.Ingest("demo", metrics.OutcomeDuplicate, time.Millisecond)
		m.Ingest("other", metrics.OutcomeRejected, time.Millisecond)
		m.Ingest("demo", "made-up", time.Millisecond)

		c := counterVec(t, reg, "ankusa_ingest_requests_total")
		for _, tc := range []struct {
			source, outcome string
			want            float64
		}{
			{"demo", "accepted", 2},
			{"demo", "duplicate", 1},
			{"other", "rejected", 1},
			{"demo", "other", 1},
		} {
			if got := c[tc.outcome+"/"+tc.source]; got != tc.want {
				t.Errorf("requests{%s,%s} = %v, want %v", tc.source, tc.outcome, got, tc.want)
			}
		}
		if _, ok := c["made-up/demo"]; ok {
			t.Error("an unknown outcome minted its own series")
		}
		if n := testutil.CollectAndCount(reg, "ankusa_ingest_duration_seconds"); n != 1 {
			t.Errorf("duration series = %d, want 1 (no labels)", n)
		}
		if got := histogramCount(t, reg, "ankusa_ingest_duration_seconds"); got != 5 {
			t.Errorf("duration observations = %d, want 5", got)
		}
	})

	t.Run("refused and load shed", func(t *testing.T) {
		reg, m := newMetrics(t)
		// Every reason exists before the first refusal.
		if n := testutil.CollectAndCount(reg, "ankusa_ingest_refused_total"); n != 18 {
			t.Errorf("refused series before use = %d, want 18", n)
		}
		m.IngestRefused(metrics.ReasonOverload)
		m.IngestRefused(metrics.ReasonPayloadTooLarge)
		m.IngestRefused(metrics.ReasonOverload)
		m.IngestRefused(metrics.ReasonOverload)
		m.IngestRefused(metrics.ReasonStoreUnavailable)
		m.IngestRefused("<script>")

		c := counterVec(t, reg, "ankusa_ingest_refused_total")
		want := map[string]float64{
			"overload": 3, "payload_too_large": 1, "store_unavailable": 1, "other": 1,
			"invalid_header": 0, "body_read_failed": 0, "unknown_source": 0, "closed": 0,
			"intake_unavailable": 0, "intake_pending": 0, "verification_failed": 0, "rate_limited": 0,
			"quarantine_rate_limited": 0, "quarantine_full": 0, "max_conns": 0, "max_conns_per_ip": 0,
			"dedupe_pending": 0, "dedupe_unavailable": 0, "sink_unavailable": 0,
		}
		for reason, w := range want {
			if c[reason] != w {
				t.Errorf("refused{%s} = %v, want %v", reason, c[reason], w)
			}
		}
		if len(c) != len(want) {
			t.Errorf("refused series = %v, want exactly %d", c, len(want))
		}
		const want3 = `
# HELP ankusa_load_shed_total Ingest requests shed because the batcher was full or a record waited past its deadline.
# TYPE ankusa_load_shed_total counter
ankusa_load_shed_total 3
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want3), "ankusa_load_shed_total"); err != nil {
			t.Error(err)
		}
	})

	t.Run("observer", func(t *testing.T) {
		reg, m := newMetrics(t)
		var o queue.Observer = m
		o.Group(1, 1, time.Millisecond)
		o.Group(300, 280, 2*time.Millisecond)
		o.Sync(time.Millisecond, nil)
		o.Sync(time.Millisecond, errors.New("injected"))
		o.Sync(time.Millisecond, errors.New("injected"))

		if got := histogramCount(t, reg, "ankusa_wal_commit_batch_size"); got != 2 {
			t.Errorf("batch size observations = %d, want 2", got)
		}
		if got := histogramSum(t, reg, "ankusa_wal_commit_batch_size"); got != 301 {
			t.Errorf("batch size sum = %v, want 301 (records, not written)", got)
		}
		if got := histogramCount(t, reg, "ankusa_wal_commit_duration_seconds"); got != 2 {
			t.Errorf("commit duration observations = %d, want 2", got)
		}
		if got := histogramCount(t, reg, "ankusa_wal_sync_duration_seconds"); got != 3 {
			t.Errorf("sync observations = %d, want 3", got)
		}
		if got := counterValue(t, reg, "ankusa_wal_sync_failures_total"); got != 2 {
			t.Errorf("sync failures = %v, want 2", got)
		}
	})

	t.Run("batch size buckets", func(t *testing.T) {
		reg, m := newMetrics(t)
		m.Group(1, 1, 0)
		mf := gather(t, reg, "ankusa_wal_commit_batch_size")
		b := mf.GetMetric()[0].GetHistogram().GetBucket()
		if len(b) != 13 || b[0].GetUpperBound() != 1 || b[len(b)-1].GetUpperBound() != 4096 {
			t.Fatalf("buckets = %v, want 1..4096 doubling", b)
		}
	})
}

func TestMetrics_WatchQueueTwicePanics(t *testing.T) {
	_, m := newMetrics(t)
	f := func() queue.Stats { return queue.Stats{} }
	d := func() uint64 { return 0 }
	m.WatchQueue(f, d)
	defer func() {
		if recover() == nil {
			t.Fatal("second WatchQueue did not panic")
		}
	}()
	m.WatchQueue(f, d)
}

// A scrape that comes before the dispatch gauges' first reading finished
// (the store is slow or stalled) reports none of them, not zeros: issue 14
// found ankusa_queue_pending at 0 with a million rows due, because the
// reading of the first scrape took longer than the scrape waits and the
// zero value of a reading never made was answered instead. Once a reading
// exists it is answered.
func TestMetrics_DispatchGaugesAbsentUntilTheirFirstReading(t *testing.T) {
	reg, m := newMetrics(t)
	release := make(chan struct{})
	m.WatchDispatch(func() dispatch.Gauges {
		<-release
		return dispatch.Gauges{Pending: 1_000_000, Dead: 3}
	})
	has := func(name string) (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	if v, ok := has("ankusa_queue_pending"); ok {
		t.Fatalf("ankusa_queue_pending = %v before any reading was made, want the series absent", v)
	}
	close(release)
	var pending float64
	if !ankutil.Poll(5*time.Second, func() bool {
		v, ok := has("ankusa_queue_pending")
		pending = v
		return ok
	}) {
		t.Fatal("ankusa_queue_pending never reported after the reading finished")
	}
	if pending != 1_000_000 {
		t.Fatalf("ankusa_queue_pending = %v, want 1e6", pending)
	}
}
