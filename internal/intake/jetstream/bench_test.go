package jetstream_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/jetstream"
	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/testutil/natscluster"
)

// BenchmarkPublish measures PublishBatch, one synchronous batch at a time,
// on an R3 file-storage stream of three nats-server instances clustered on
// loopback (the cluster of cluster_test.go), for records of 1 KiB and
// 10 KiB in batches of 10 and 256. It reports records/s and the confirm
// latency of one batch (p50_ms, p99_ms); ns/op is one batch.
//
// Every PubAck is a real quorum commit (the leader and one follower have
// the message), over loopback routes; the three servers, the client and
// the benchmark share the machine's cores. nats-server's file store does
// not fsync each message (sync_interval, 2 min by default), so neither do
// these figures.
//
// go test -run '^$' -bench BenchmarkPublish -benchtime=2s ./internal/intake/jetstream/
func BenchmarkPublish(b *testing.B) {
	c := startCluster(b)
	fleet := newFleet()
	cfg := c.CreateStream(b, streamConfig(fleet))

	for _, size := range []int{1 << 10, 10 << 10} {
		for _, batch := range []int{10, 256} {
			node := fmt.Sprintf("bench-%dk-%d", size>>10, batch)
			in, err := jetstream.Open(jetstream.Options{
				URL: c.URL(), Stream: cfg.Name, Fleet: fleet, Node: node,
				MaxRecordBytes: 1 << 20, VerifyTopic: true, Logger: testutil.Logger(b),
			})
			if err != nil {
				b.Fatalf("open: %v", err)
			}
			b.Cleanup(func() { _ = in.Close() })
			value := bytes.Repeat([]byte{'x'}, size)
			var seq uint64 // across the runs of one sub-benchmark: every Nats-Msg-Id is new
			next := func() []intake.Record {
				recs := make([]intake.Record, batch)
				for i := range recs {
					seq++
					recs[i] = intaketest.NewRecord(node, seq)
					recs[i].Value = value
				}
				return recs
			}
			warm(b, in, next)
			b.Run(fmt.Sprintf("size=%dKiB/batch=%d", size>>10, batch), func(b *testing.B) {
				benchPublish(b, in, batch, size, next)
			})
		}
	}
}

// warm publishes one batch, retrying until the stream has a leader and the
// adapter is connected: each attempt waits for its PubAck or its deadline.
func warm(b *testing.B, in intake.Intake, next func() []intake.Record) {
	b.Helper()
	deadline := time.Now().Add(natscluster.Timeout)
	recs := next()
	for {
		_, err := publish(in, 5*time.Second, recs...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("warm-up publish: %v", err)
		}
		if !in.Ready() {
			// Not connected yet: the attempt failed at once; wait for
			// the connection rather than spin.
			waitReady(b, in, deadline)
		}
	}
}

// waitReady polls the adapter's local Ready flag until deadline.
func waitReady(b *testing.B, in intake.Intake, deadline time.Time) {
	for !in.Ready() {
		if time.Now().After(deadline) {
			b.Fatal("the adapter never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// benchPublish publishes b.N batches from next, one at a time, and reports
// records/s and the per-batch confirm latency percentiles.
func benchPublish(b *testing.B, in intake.Intake, batch, size int, next func() []intake.Record) {
	b.SetBytes(int64(batch * size))
	lat := make([]time.Duration, 0, b.N)
	var busy time.Duration
	for range b.N {
		b.StopTimer()
		recs := next()
		b.StartTimer()
		start := time.Now()
		_, err := publish(in, callTimeout, recs...)
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
