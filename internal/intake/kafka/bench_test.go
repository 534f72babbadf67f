package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/kafka"
)

// BenchmarkPublish measures PublishBatch, one synchronous batch at a time
// (acks=all, the node's own partition), for records of 1 KiB and 10 KiB in
// batches of 10 and 256. It reports records/s and the confirm latency of
// one batch (p50_ms, p99_ms); ns/op is one batch.
//
// The cluster is kfake, in process: no network, no disk, no replication
// (acks=all is answered at once). The figures are the adapter's and the
// client's cost plus loopback, an upper bound for throughput and a lower
// bound for latency against real brokers, whose replication round trip and
// disk are added on top.
//
// go test -run '^$' -bench BenchmarkPublish -benchtime=2s ./internal/intake/kafka/
func BenchmarkPublish(b *testing.B) {
	// The production default intake.max_record_bytes: a batch of 256 × 10
	// KiB is one produce request, which kfake must accept.
	const maxRecordBytes = 10_000_000
	c := newCluster(b, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "10485760"}))
	for _, size := range []int{1 << 10, 10 << 10} {
		for _, batch := range []int{10, 256} {
			node := fmt.Sprintf("bench-%dk-%d", size>>10, batch)
			o := options(c, node, kafka.PartitionFor(node, partitions))
			o.MaxRecordBytes = maxRecordBytes
			in := openWith(b, o)
			value := bytes.Repeat([]byte{'x'}, size)
			var seq uint64 // across the runs of one sub-benchmark
			next := func() []intake.Record {
				recs := make([]intake.Record, batch)
				for i := range recs {
					seq++
					recs[i] = intaketest.NewRecord(node, seq)
					recs[i].Value = value
				}
				return recs
			}
			mustPublish(b, in, next()...) // warm: metadata, producer id, connections
			b.Run(fmt.Sprintf("size=%dKiB/batch=%d", size>>10, batch), func(b *testing.B) {
				benchPublish(b, in, batch, size, next)
			})
		}
	}
}

// benchPublish publishes b.N batches from next, one at a time, and reports
// records/s and the per-batch confirm latency percentiles.
func benchPublish(b *testing.B, in intake.Intake, batch, size int, next func() []intake.Record) {
	b.SetBytes(int64(batch * size))
	lat := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	var busy time.Duration
	for range b.N {
		b.StopTimer()
		recs := next()
		b.StartTimer()
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, bound)
		_, err := in.PublishBatch(pctx, recs)
		cancel()
		d := time.Since(start)
		if err != nil {
			b.Fatalf("publish %d records: %v", batch, err)
		}
		lat = append(lat, d)
		busy += d
	}
	b.StopTimer()
	intaketest.ReportPublishLatency(b, lat, batch, busy)
}
