package kafka_test

// Every test here runs against franz-go's pkg/kfake: an in-process
// Kafka-protocol cluster with fault injection (Fault, ControlKey). No Kafka
// broker can run on the machines these tests run on. kfake does not
// replicate: acks=all is acknowledged at once and min.insync.replicas is
// reported but not enforced, so quorum loss is injected as the broker's
// answer (NOT_ENOUGH_REPLICAS) rather than produced by stopping brokers.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/kafka"
	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	topic      = "ankusa-intake"
	partitions = 3
	// bound fails a test instead of letting it hang; no assertion is
	// about how fast anything is.
	bound = 15 * time.Second
)

// newCluster starts a three-broker kfake cluster with topic seeded on
// three partitions (kfake gives a seeded topic three replicas).
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(partitions, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func options(c *kfake.Cluster, node string, partition int32) kafka.Options {
	return kafka.Options{
		Brokers:     c.ListenAddrs(),
		Topic:       topic,
		Partition:   partition,
		Node:        node,
		Fleet:       "test",
		VerifyTopic: true,
	}
}

// openWith opens an adapter with o and closes it when the test ends.
func openWith(t testing.TB, o kafka.Options) *kafka.Intake {
	t.Helper()
	o.Logger = testutil.Logger(t)
	in, err := kafka.Open(o)
	if err != nil {
		t.Fatalf("open %+v: %v", o, err)
	}
	t.Cleanup(func() { _ = in.Close() })
	return in
}

// open opens node's adapter on partition.
func open(t testing.TB, c *kfake.Cluster, node string, partition int32) *kafka.Intake {
	t.Helper()
	return openWith(t, options(c, node, partition))
}

// openAssigned opens node's adapter unstamped, then stamps the partition
// AssignPartition chooses: the first-boot sequence.
func openAssigned(t testing.TB, c *kfake.Cluster, node string) *kafka.Intake {
	t.Helper()
	in := open(t, c, node, -1)
	p, err := in.AssignPartition(ctxT(t), node)
	if err != nil {
		t.Fatalf("assign partition to %s: %v", node, err)
	}
	if err := in.SetPartition(p); err != nil {
		t.Fatal(err)
	}
	return in
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

func rec(node string, seq uint64) intake.Record { return intaketest.NewRecord(node, seq) }

func mustPublish(t testing.TB, in intake.Intake, recs ...intake.Record) intake.Position {
	t.Helper()
	p, err := in.PublishBatch(ctxT(t), recs)
	if err != nil {
		t.Fatalf("publish %d records: %v", len(recs), err)
	}
	return p
}

// wantClass fails the test unless err is an *intake.Error of class c.
func wantClass(t testing.TB, err error, c intake.Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want class %s", c)
	}
	var ie *intake.Error
	if !errors.As(err, &ie) {
		t.Fatalf("error %v is not an *intake.Error", err)
	}
	if got, _ := intake.ClassOf(err); got != c {
		t.Fatalf("error %v has class %s, want %s", err, got, c)
	}
}

func newAdmin(t testing.TB, c *kfake.Cluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// endOffset is partition p's high watermark, read with a plain admin client.
func endOffset(t testing.TB, c *kfake.Cluster, name string, p int32) int64 {
	t.Helper()
	offs, err := newAdmin(t, c).ListEndOffsets(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup(name, p)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s/%d: %v (listed: %t)", name, p, o.Err, ok)
	}
	return o.Offset
}

// consumePartition reads partition p of topic from the start with a plain
// kgo consumer (not the adapter) until it has n records.
func consumePartition(t testing.TB, c *kfake.Cluster, p int32, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxT(t)
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before %v", len(recs), n, ctx.Err())
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// rawProducer is a plain kgo client that writes to an explicit partition,
// for records the adapter would never write.
func rawProducer(t testing.TB, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// replayAll collects what in replays after from.
func replayAll(t testing.TB, in intake.Intake, from intake.Position) []intaketest.Replayed {
	t.Helper()
	return intaketest.ReplayAll(t, in, from)
}

func expectRecords(t testing.TB, got []intaketest.Replayed, want []intake.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if !intaketest.RecordsEqual(got[i].Rec, want[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i].Rec, want[i])
		}
		if i > 0 && got[i].Pos <= got[i-1].Pos {
			t.Errorf("position of record %d is %d, not after %d", i, got[i].Pos, got[i-1].Pos)
		}
	}
}
