package queue_test

// The dual commit on the Kafka adapter, on franz-go's kfake (no Kafka
// broker runs where these tests run): the cases that depend on how Kafka
// assigns offsets.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/kafka"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

const kafkaTopic = "ankusa-intake"

// kafkaNode opens node's adapter on partition 0 of c's one-partition topic.
func kafkaNode(t *testing.T, c *kfake.Cluster, node string, maxRecord int64) *kafka.Intake {
	t.Helper()
	in, err := kafka.Open(kafka.Options{
		Brokers: c.ListenAddrs(), Topic: kafkaTopic, Partition: 0, Node: node,
		MaxRecordBytes: maxRecord, Logger: testutil.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close() })
	// The adapter learns it is ready in the background (a metadata answer
	// for the partition); a submit before that meets a closed log, as the
	// binary never does (app waits for Ready before serving).
	testutil.Eventually(t, 10*time.Second, "kafka intake ready", in.Ready)
	return in
}

// TestDual_KafkaSharedPartitionOffsetNeverPassesALogOnlyRecord is the ADR's
// shared-partition case (defect F of issue 10): two node ids that hash to
// one partition interleave their records, so one node's batch does not sit
// at contiguous offsets. The offset must never pass a record that is only
// in the log: every position the queue keeps is the record's own offset.
//
// The batch is forced apart: each record fills a producer batch of its own
// (max_record_bytes 1000, bodies of 450 bytes), so node-a's three records
// go out in three produce requests, and node-b's record is written while
// node-a's second request is held.
func TestDual_KafkaSharedPartitionOffsetNeverPassesALogOnlyRecord(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, kafkaTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	a, b := kafkaNode(t, c, "node-a", 1000), kafkaNode(t, c, "node-b", 1000)

	var mu sync.Mutex
	produces, interleaved := 0, false
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		if interleaved {
			mu.Unlock()
			return nil, nil, false // node-b's own request, or anything after it
		}
		produces++
		if produces != 2 {
			mu.Unlock()
			return nil, nil, false
		}
		interleaved = true
		mu.Unlock()
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := b.PublishBatch(ctx, []intake.Record{intaketest.NewRecord("node-b", 1)})
			done <- err
		}()
		var berr error
		c.SleepControl(func() { berr = <-done })
		if berr != nil {
			t.Errorf("node-b publish: %v", berr)
		}
		return nil, nil, false
	})

	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	// One batcher partition, groups of three: the three hooks, submitted at
	// once, are one group. The delay bounds the wait for the third; it is
	// short because a writer waiting for a group notices the failed fsync
	// only when the wait ends.
	q := testutil.StartQueue(t, st, queue.Options{Partitions: 1, MaxBatch: 3, MaxDelay: time.Second, Dual: &queue.DualOptions{
		Intake: a, Node: "node-a", PublishTimeout: 10 * time.Second, ReconcileEvery: -1,
		BreakerFailures: 100, Probe: time.Hour,
	}})
	t.Cleanup(gate.ReleaseAll)

	// The group's fsync fails: its three records are confirmed by the log
	// only (half_log), and carried.
	gate.FailNext(1)
	var chs []chan submitted
	for _, body := range []string{"one", "two", "three"} {
		chs = append(chs, submitAsync(q, rec(body+strings.Repeat("x", 450), "")))
	}
	for _, ch := range chs {
		if s := answer(t, ch); !errors.Is(s.err, queue.ErrStoreUnavailable) {
			t.Fatalf("a hook of the failed group: %+v %v, want store unavailable", s.res, s.err)
		}
	}
	waitFences(t, q, 1)
	// A group confirmed in both places after them: the offset may now
	// rise, but not past the carried records.
	chs = chs[:0]
	for _, body := range []string{"four", "five", "six"} {
		chs = append(chs, submitAsync(q, rec(body, "")))
	}
	for _, ch := range chs {
		if s := answer(t, ch); s.err != nil {
			t.Fatalf("a hook of the next group: %v", s.err)
		}
	}
	mu.Lock()
	if !interleaved {
		mu.Unlock()
		t.Fatal("node-b's record was never interleaved: the case did not happen")
	}
	mu.Unlock()

	var positions []intake.Position
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Replay(ctx, -1, func(_ intake.Record, p intake.Position) error {
		positions = append(positions, p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(positions) != 6 || positions[2]-positions[0] == 2 {
		t.Fatalf("node-a's records at %v: want six, the first three not contiguous", positions)
	}
	s, _ := q.Dual()
	t.Logf("node-a's records at %v, offset %d, produce requests %d", positions, s.Offset, produces)
	if intake.Position(s.Offset) >= positions[0] {
		t.Fatalf("offset %d passes node-a's record at %d, which is only in the log (node-a's records at %v)",
			s.Offset, positions[0], positions)
	}
}

// TestDual_KafkaEveryProduceRequestCarriesAcksAll is the ADR's adapter case
// "acks=-1": a confirm means every in-sync replica has the record, so every
// produce request the dual commit sends (commit path and reconciler alike)
// must ask for acks=-1. kfake does not replicate, so the request itself is
// what is checked, on every produce request of twenty commits and of one
// reconciler republish.
func TestDual_KafkaEveryProduceRequestCarriesAcksAll(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, kafkaTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var mu sync.Mutex
	acks := map[int16]int{}
	failNext := false
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		mu.Lock()
		defer mu.Unlock()
		acks[req.Acks]++
		if !failNext {
			return nil, nil, false
		}
		failNext = false
		// The broker cannot reach min.insync.replicas (kfake does not
		// replicate, so the answer is injected).
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotEnoughReplicas.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	a := kafkaNode(t, c, "node-a", 0)
	q := testutil.StartQueue(t, testutil.OpenStore(t, testutil.TempStoreDir(t), nil), queue.Options{Dual: &queue.DualOptions{
		Intake: a, Node: "node-a", PublishTimeout: 10 * time.Second, ReconcileEvery: -1, BreakerFailures: 100, Probe: time.Hour,
	}})
	for i := range 20 {
		if s := answer(t, submitAsync(q, rec("hook-"+strings.Repeat("x", i), ""))); s.err != nil {
			t.Fatal(s.err)
		}
	}
	// One record through the reconciler: its publish is refused, it is
	// carried, and the reconciler's republish is a produce request too.
	mu.Lock()
	failNext = true
	mu.Unlock()
	if s := answer(t, submitAsync(q, rec("carried", ""))); !errors.Is(s.err, queue.ErrIntakeUnavailable) {
		t.Fatalf("carried: %v, want intake unavailable", s.err)
	}
	q.Reconcile(context.Background())
	if s, _ := q.Dual(); s.Pending.Records != 0 {
		t.Fatalf("pending after the reconciler's pass: %+v, want the carried record confirmed", s.Pending)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range acks {
		total += n
	}
	if total == 0 || acks[-1] != total {
		t.Fatalf("produce requests by acks: %v; want every one of them at acks=-1", acks)
	}
}

// TestRecovery_KafkaTwoNodesSharingAPartitionReplayTheirOwn (issue 18
// section 4): two node ids that hash to the same partition both ack hooks
// under dual; node-a's host is lost, and its replacement replays exactly
// its own hooks from the shared partition (filtered by the node header),
// none of the other node's.
func TestRecovery_KafkaTwoNodesSharingAPartitionReplayTheirOwn(t *testing.T) {
	const parts = 3
	// Two node ids with the same FNV-1a partition.
	na, nb := "node-0", ""
	for i := 1; nb == ""; i++ {
		if n := "node-" + strings.Repeat("b", i%7) + string(rune('a'+i%26)); kafka.PartitionFor(n, parts) == kafka.PartitionFor(na, parts) {
			nb = n
		}
	}
	p := kafka.PartitionFor(na, parts)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, kafkaTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	open := func(node string) *kafka.Intake {
		in, err := kafka.Open(kafka.Options{Brokers: c.ListenAddrs(), Topic: kafkaTopic, Partition: p, Node: node, Logger: testutil.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = in.Close() })
		// The adapter learns it is ready in the background (a metadata
		// answer for the partition); a submit before that meets a closed
		// log. The binary waits the same way before serving
		// (queue.RecoverNode).
		testutil.Eventually(t, 10*time.Second, "kafka intake ready", in.Ready)
		return in
	}
	qa := testutil.StartQueue(t, testutil.OpenStore(t, testutil.TempStoreDir(t), nil), queue.Options{Dual: &queue.DualOptions{Intake: open(na), Node: na}})
	qb := testutil.StartQueue(t, testutil.OpenStore(t, testutil.TempStoreDir(t), nil), queue.Options{Dual: &queue.DualOptions{Intake: open(nb), Node: nb}})
	var acked []queue.Result
	for i := range 10 {
		// Interleaved in the partition: a, b, a, b …
		r, err := qa.Submit(context.Background(), rec("a-"+strings.Repeat("x", i), ""))
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, r)
		if _, err := qb.Submit(context.Background(), rec("b-"+strings.Repeat("x", i), "")); err != nil {
			t.Fatal(err)
		}
	}
	qa.Close()

	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil) // the replacement's empty disk
	sum, err := queue.Recover(context.Background(), st, queue.RecoverOptions{
		Intake: open(na), Node: na, Origin: queue.OriginFresh, Resolve: route, Logger: testutil.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != 10 || sum.Applied != 10 || sum.Collided != 0 || sum.Gap {
		t.Fatalf("summary %s gap=%v; want node-a's 10 records applied, no collision with %s's seqs", sum, sum.Gap, nb)
	}
	assertHooks(t, st, acked)
	if n, _ := st.Count([]byte{store.PrefixHook}); n != 10 {
		t.Fatalf("hooks after replay = %d, want 10 (node-a's only)", n)
	}
}
