package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/kafka"
)

// TestPublish_ConfirmedAtBrokerOffset reads the partition back with a plain
// kgo consumer: the confirm is the broker's offset of the batch's last
// record, a batch's offsets are contiguous, and each record carries the key,
// the eight headers and the value.
func TestPublish_ConfirmedAtBrokerOffset(t *testing.T) {
	c := newCluster(t)
	const node, p = "node-a", 1
	in := open(t, c, node, p)

	b1 := []intake.Record{rec(node, 1), rec(node, 2), rec(node, 3), rec(node, 4), rec(node, 5)}
	b1[2].Value = nil
	b2 := []intake.Record{rec(node, 6), rec(node, 7)}
	pos1 := mustPublish(t, in, b1...)
	pos2 := mustPublish(t, in, b2...)

	got := consumePartition(t, c, p, len(b1)+len(b2))
	if len(got) != len(b1)+len(b2) {
		t.Fatalf("partition %d holds %d records, want %d", p, len(got), len(b1)+len(b2))
	}
	if got[len(b1)-1].Offset != int64(pos1) || got[len(got)-1].Offset != int64(pos2) {
		t.Fatalf("confirmed %d and %d; the broker holds the batches' last records at %d and %d",
			pos1, pos2, got[len(b1)-1].Offset, got[len(got)-1].Offset)
	}
	for i, b := range [][]intake.Record{b1, b2} {
		last := []intake.Position{pos1, pos2}[i]
		first := int64(last) - int64(len(b)) + 1
		for j := range b {
			k := j
			if i == 1 {
				k += len(b1)
			}
			if got[k].Offset != first+int64(j) {
				t.Errorf("batch %d record %d at offset %d, want %d (contiguous, ending at the confirm %d)", i, j, got[k].Offset, first+int64(j), last)
			}
		}
	}
	for i, want := range append(b1, b2...) {
		r := got[i]
		if r.Partition != p {
			t.Errorf("record %d on partition %d, want %d", i, r.Partition, p)
		}
		if string(r.Key) != node {
			t.Errorf("record %d key %q, want the node id %q", i, r.Key, node)
		}
		if !bytes.Equal(r.Value, want.Value) {
			t.Errorf("record %d value %q, want %q", i, r.Value, want.Value)
		}
		h := map[string]string{}
		for _, rh := range r.Headers {
			h[rh.Key] = string(rh.Value)
		}
		wantH := map[string]string{
			intake.HeaderVersion:     "1",
			intake.HeaderKind:        "hook",
			intake.HeaderNode:        node,
			intake.HeaderSeq:         strconv.FormatUint(want.Seq, 10),
			intake.HeaderID:          uuid.UUID(want.ID).String(),
			intake.HeaderIncarnation: want.Incarnation,
			intake.HeaderTenant:      want.Tenant,
			intake.HeaderSource:      want.Source,
		}
		if len(h) != len(wantH) || len(r.Headers) != len(wantH) {
			t.Errorf("record %d headers %v, want exactly %v", i, h, wantH)
		}
		for k, v := range wantH {
			if h[k] != v {
				t.Errorf("record %d header %s = %q, want %q", i, k, h[k], v)
			}
		}
	}
	// Nothing went to another partition.
	for q := range int32(partitions) {
		if q != p {
			if n := endOffset(t, c, topic, q); n != 0 {
				t.Errorf("partition %d holds %d records, want 0", q, n)
			}
		}
	}
}

// TestPublish_ConcurrentBatchesAreContiguous: batches published at once
// from many goroutines of one node never interleave in the partition.
func TestPublish_ConcurrentBatchesAreContiguous(t *testing.T) {
	c := newCluster(t)
	const node = "node-a"
	in := open(t, c, node, 0)
	const publishers, batches, size = 8, 6, 5
	type batch struct {
		seqs []uint64
		pos  intake.Position
	}
	results := make([][]batch, publishers)
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			for b := range batches {
				var recs []intake.Record
				var seqs []uint64
				for i := range size {
					s := uint64(g*1000 + b*size + i + 1)
					recs = append(recs, rec(node, s))
					seqs = append(seqs, s)
				}
				p, err := in.PublishBatch(ctxT(t), recs)
				if err != nil {
					t.Errorf("publisher %d batch %d: %v", g, b, err)
					return
				}
				results[g] = append(results[g], batch{seqs, p})
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	at := map[uint64]intake.Position{}
	for _, r := range replayAll(t, in, -1) {
		at[r.Rec.Seq] = r.Pos
	}
	if len(at) != publishers*batches*size {
		t.Fatalf("replayed %d distinct seqs, want %d", len(at), publishers*batches*size)
	}
	for g, bs := range results {
		for b, bt := range bs {
			for i, s := range bt.seqs {
				if want := bt.pos - intake.Position(size-1-i); at[s] != want {
					t.Errorf("publisher %d batch %d: seq %d at %d, want %d (contiguous, ending at the confirm %d)", g, b, s, at[s], want, bt.pos)
				}
			}
		}
	}
}

// refuseProduce makes every produce request, on any broker, fail every
// partition it carries with code until the returned stop is called. Every
// request, not only the next: the client may send one PublishBatch in
// several requests (a record produced while the first is in flight goes
// in the next), and a refusal must cover the whole attempt for the test to
// know what the partition holds.
func refuseProduce(c *kfake.Cluster, code int16) (stop func()) {
	var on atomic.Bool
	on.Store(true)
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if !on.Load() {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return func() { on.Store(false) }
}

// TestPublish_NotEnoughReplicasThenSuccess: a broker that cannot reach
// min.insync.replicas (injected: kfake does not replicate) fails the one
// attempt Unavailable with nothing stored; the republish is confirmed.
func TestPublish_NotEnoughReplicasThenSuccess(t *testing.T) {
	c := newCluster(t)
	const node, p = "node-a", 2
	in := open(t, c, node, p)
	mustPublish(t, in, rec(node, 1)) // warm: metadata and producer id loaded

	stop := refuseProduce(c, kerr.NotEnoughReplicas.Code)
	r := rec(node, 2)
	_, err := in.PublishBatch(ctxT(t), []intake.Record{r, rec(node, 3)})
	stop()
	wantClass(t, err, intake.Unavailable)
	if !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Errorf("err = %v, want it to wrap NOT_ENOUGH_REPLICAS", err)
	}
	if n := endOffset(t, c, topic, p); n != 1 {
		t.Fatalf("partition holds %d records after the refused attempt, want 1", n)
	}

	pos := mustPublish(t, in, r)
	if pos != 1 {
		t.Errorf("republish confirmed at %d, want 1", pos)
	}
	expectRecords(t, replayAll(t, in, 0), []intake.Record{r})
}

// TestPublish_BrokerErrorClasses injects each produce error the broker may
// answer (kfake's Fault) and checks its class, that the client reports it
// on the one attempt, and that the adapter publishes again after.
func TestPublish_BrokerErrorClasses(t *testing.T) {
	c := newCluster(t)
	const node, p = "node-a", 0
	in := open(t, c, node, p)
	mustPublish(t, in, rec(node, 1))
	for _, tc := range []struct {
		inject *kerr.Error
		class  intake.Class
		wraps  bool // the error wraps the broker's code (kgo reports a few as ErrRecordRetries)
	}{
		{kerr.NotEnoughReplicas, intake.Unavailable, true},
		{kerr.NotEnoughReplicasAfterAppend, intake.Unavailable, false},
		{kerr.LeaderNotAvailable, intake.Unavailable, true},
		{kerr.NotLeaderForPartition, intake.Unavailable, true},
		{kerr.RequestTimedOut, intake.Unavailable, false},
		{kerr.ThrottlingQuotaExceeded, intake.Throttled, true},
		{kerr.MessageTooLarge, intake.Permanent, true},
		{kerr.RecordListTooLarge, intake.Permanent, true},
		{kerr.InvalidRecord, intake.Permanent, true},
		{kerr.TopicAuthorizationFailed, intake.Permanent, true},
		{kerr.ClusterAuthorizationFailed, intake.Permanent, true},
		// The topic's settings refusing the produce: Unavailable here,
		// Permanent in the sink (kafkaclient.KindTopicRefused says why).
		{kerr.PolicyViolation, intake.Unavailable, true},
		{kerr.InvalidTimestamp, intake.Unavailable, true},
	} {
		t.Run(tc.inject.Message, func(t *testing.T) {
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: tc.inject})
			defer h.Remove()
			_, err := in.PublishBatch(ctxT(t), []intake.Record{rec(node, 2)})
			wantClass(t, err, tc.class)
			if tc.wraps && !errors.Is(err, tc.inject) {
				t.Errorf("err = %v, want it to wrap %v", err, tc.inject)
			}
			if _, after := intake.ClassOf(err); tc.class == intake.Throttled && after != time.Second {
				t.Errorf("RetryAfter = %s, want 1s", after)
			}
			mustPublish(t, in, rec(node, 3))
		})
	}
}

// TestPublish_TooLargeRefusedBeforeProducing: a record that cannot fit a
// batch of intake.max_record_bytes fails the whole batch Permanent, and no
// record of the batch is produced.
func TestPublish_TooLargeRefusedBeforeProducing(t *testing.T) {
	c := newCluster(t)
	const node, p = "node-a", 0
	o := options(c, node, p)
	o.MaxRecordBytes = 4096
	in := openWith(t, o)
	big := rec(node, 2)
	big.Value = bytes.Repeat([]byte{'x'}, 4096)
	_, err := in.PublishBatch(ctxT(t), []intake.Record{rec(node, 1), big, rec(node, 3)})
	wantClass(t, err, intake.Permanent)
	if !errors.Is(err, kafka.ErrTooLarge) {
		t.Errorf("err = %v, want ErrTooLarge", err)
	}
	if n := endOffset(t, c, topic, p); n != 0 {
		t.Errorf("partition holds %d records, want 0", n)
	}
	// A record that fits goes through the same client.
	ok := rec(node, 4)
	ok.Value = bytes.Repeat([]byte{'y'}, 3000)
	mustPublish(t, in, ok)
}

// TestPublish_Refusals: calls the adapter refuses before producing.
func TestPublish_Refusals(t *testing.T) {
	c := newCluster(t)
	const node = "node-a"
	in := open(t, c, node, 0)
	_, err := in.PublishBatch(ctxT(t), nil)
	wantClass(t, err, intake.Permanent)
	noKind := rec(node, 1)
	noKind.Kind = ""
	_, err = in.PublishBatch(ctxT(t), []intake.Record{noKind})
	wantClass(t, err, intake.Permanent)

	unstamped := open(t, c, node, -1)
	_, err = unstamped.PublishBatch(ctxT(t), []intake.Record{rec(node, 1)})
	wantClass(t, err, intake.Permanent)
	if !errors.Is(err, kafka.ErrNoPartition) {
		t.Errorf("err = %v, want ErrNoPartition", err)
	}
	_, err = unstamped.Earliest(ctxT(t))
	if !errors.Is(err, kafka.ErrNoPartition) {
		t.Errorf("Earliest: err = %v, want ErrNoPartition", err)
	}
	if n := endOffset(t, c, topic, 0); n != 0 {
		t.Errorf("partition holds %d records, want 0", n)
	}

	_ = in.Close()
	_, err = in.PublishBatch(ctxT(t), []intake.Record{rec(node, 1)})
	wantClass(t, err, intake.Unavailable)
	if !errors.Is(err, kafka.ErrClosed) {
		t.Errorf("after Close: err = %v, want ErrClosed", err)
	}
}

// TestPublish_UnknownTopic: a missing topic is NotFound on every call and
// is never created, even by a cluster that would create it on request.
func TestPublish_UnknownTopic(t *testing.T) {
	c := newCluster(t, kfake.AllowAutoTopicCreation())
	const node = "node-a"
	o := options(c, node, 0)
	o.Topic = "missing"
	in := openWith(t, o)

	_, err := in.PublishBatch(ctxT(t), []intake.Record{rec(node, 1)})
	wantClass(t, err, intake.NotFound)
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Errorf("err = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	_, err = in.AssignPartition(ctxT(t), node)
	wantClass(t, err, intake.NotFound)
	wantClass(t, in.Verify(ctxT(t)), intake.NotFound)
	_, err = in.Earliest(ctxT(t))
	wantClass(t, err, intake.NotFound)
	err = in.Replay(ctxT(t), -1, func(intake.Record, intake.Position) error { return nil })
	wantClass(t, err, intake.NotFound)

	adm := newAdmin(t, c)
	topics, err := adm.ListTopics(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("missing") {
		t.Fatal("the adapter created the topic")
	}

	// Once an operator creates it, the next attempt goes through.
	if _, err := adm.CreateTopic(ctxT(t), 1, 3, nil, "missing"); err != nil {
		t.Fatal(err)
	}
	if _, err := in.PublishBatch(ctxT(t), []intake.Record{rec(node, 1)}); err != nil {
		t.Errorf("publish after the topic exists: %v", err)
	}
}

// TestPublish_ContextBoundsTheAttempt: a broker that never answers the
// produce holds PublishBatch only until ctx ends; the outcome is unknown
// (Unavailable, ErrAckLost).
func TestPublish_ContextBoundsTheAttempt(t *testing.T) {
	c := newCluster(t)
	const node = "node-a"
	in := open(t, c, node, 0)
	mustPublish(t, in, rec(node, 1)) // warm, so the held request is the produce

	held, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the cluster's and adapter's Close
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		close(held)
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := in.PublishBatch(ctx, []intake.Record{rec(node, 2), rec(node, 3)})
		errc <- err
	}()
	var err error
	select {
	case err = <-errc:
	case <-time.After(bound):
		t.Fatal("PublishBatch did not return after its ctx ended")
	}
	select {
	case <-held:
	default:
		t.Fatal("the produce request never reached the broker")
	}
	wantClass(t, err, intake.Unavailable)
	if !errors.Is(err, kafka.ErrAckLost) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrAckLost and the deadline", err)
	}
}

// TestPublish_ClusterGoneIsUnavailable: with every broker gone, a publish
// fails Unavailable (a dial error or ctx), never a hang past ctx.
func TestPublish_ClusterGoneIsUnavailable(t *testing.T) {
	c := newCluster(t)
	const node = "node-a"
	in := open(t, c, node, 0)
	mustPublish(t, in, rec(node, 1))
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := in.PublishBatch(ctx, []intake.Record{rec(node, 2)})
	t.Log(err)
	wantClass(t, err, intake.Unavailable)
}

// TestPublish_TopicGrowthKeepsStampedPartition: a node's partition is
// stamped once; after the topic grows (kadm CreatePartitions), the hash
// would choose another partition, and the stamped one is still where the
// publish goes and where Replay reads.
func TestPublish_TopicGrowthKeepsStampedPartition(t *testing.T) {
	c := newCluster(t)
	const grown = 10
	node := ""
	for i := range 1000 {
		n := "node-" + strconv.Itoa(i)
		if kafka.PartitionFor(n, partitions) != kafka.PartitionFor(n, grown) {
			node = n
			break
		}
	}
	if node == "" {
		t.Fatal("no node id maps differently in 3 and 10 partitions")
	}
	in := openAssigned(t, c, node)
	stamped := in.Partition()
	if stamped != kafka.PartitionFor(node, partitions) {
		t.Fatalf("stamped %d, want PartitionFor(%s, 3) = %d", stamped, node, kafka.PartitionFor(node, partitions))
	}
	r1 := rec(node, 1)
	mustPublish(t, in, r1)

	adm := newAdmin(t, c)
	resps, err := adm.CreatePartitions(ctxT(t), grown-partitions, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := resps.Error(); err != nil {
		t.Fatal(err)
	}
	moved, err := in.AssignPartition(ctxT(t), node)
	if err != nil {
		t.Fatal(err)
	}
	if moved == stamped || moved != kafka.PartitionFor(node, grown) {
		t.Fatalf("AssignPartition after growth = %d (stamped %d): want the hash over %d partitions", moved, stamped, grown)
	}
	if err := in.SetPartition(moved); err == nil {
		t.Fatal("SetPartition changed a stamped partition")
	}

	r2 := rec(node, 2)
	pos := mustPublish(t, in, r2)
	if pos != 1 {
		t.Errorf("second record confirmed at %d, want 1 (the stamped partition's next offset)", pos)
	}
	if n := endOffset(t, c, topic, stamped); n != 2 {
		t.Errorf("stamped partition %d holds %d records, want 2", stamped, n)
	}
	if n := endOffset(t, c, topic, moved); n != 0 {
		t.Errorf("partition %d (the new hash) holds %d records, want 0", moved, n)
	}
	expectRecords(t, replayAll(t, in, -1), []intake.Record{r1, r2})

	// A new adapter opened with the stamp (the next boot) agrees.
	next := open(t, c, node, stamped)
	expectRecords(t, replayAll(t, next, -1), []intake.Record{r1, r2})
}

// TestPartitionFor is stable and in range.
func TestPartitionFor(t *testing.T) {
	for _, n := range []int32{1, 2, 3, 7, 64, 1000} {
		for i := range 200 {
			node := "node-" + strconv.Itoa(i)
			p := kafka.PartitionFor(node, n)
			if p < 0 || p >= n {
				t.Fatalf("PartitionFor(%s, %d) = %d, out of range", node, n, p)
			}
			if again := kafka.PartitionFor(node, n); again != p {
				t.Fatalf("PartitionFor(%s, %d) = %d then %d", node, n, p, again)
			}
		}
	}
	// FNV-1a 32 of "a" is 0xe40c292c: pinned, so a change of hash (which
	// would move every unstamped node) fails here.
	if got := kafka.PartitionFor("a", 1000); got != int32(0xe40c292c%1000) {
		t.Errorf("PartitionFor(a, 1000) = %d, want %d", got, 0xe40c292c%1000)
	}
}

// TestAssignPartition is the hash over the topic's partition count, the
// same from every adapter and on every call.
func TestAssignPartition(t *testing.T) {
	c := newCluster(t)
	a, b := open(t, c, "node-a", -1), open(t, c, "node-b", 2)
	seen := map[int32]bool{}
	for i := range 30 {
		node := "node-" + strconv.Itoa(i)
		p1, err := a.AssignPartition(ctxT(t), node)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := b.AssignPartition(ctxT(t), node)
		if err != nil {
			t.Fatal(err)
		}
		if p1 != p2 || p1 != kafka.PartitionFor(node, partitions) || p1 < 0 || p1 >= partitions {
			t.Fatalf("AssignPartition(%s) = %d and %d, want PartitionFor = %d", node, p1, p2, kafka.PartitionFor(node, partitions))
		}
		seen[p1] = true
	}
	if len(seen) != partitions {
		t.Errorf("30 nodes landed on %d of %d partitions", len(seen), partitions)
	}
}

// TestSetPartition stamps once.
func TestSetPartition(t *testing.T) {
	c := newCluster(t)
	in := open(t, c, "node-a", -1)
	if in.Partition() != -1 {
		t.Fatalf("Partition() = %d, want -1", in.Partition())
	}
	if err := in.SetPartition(-1); err == nil {
		t.Error("SetPartition(-1) accepted")
	}
	if err := in.SetPartition(2); err != nil {
		t.Fatal(err)
	}
	if err := in.SetPartition(2); err != nil {
		t.Errorf("setting the same partition again: %v", err)
	}
	if err := in.SetPartition(1); err == nil {
		t.Error("SetPartition changed the stamp")
	}
	if in.Partition() != 2 {
		t.Errorf("Partition() = %d, want 2", in.Partition())
	}
}
