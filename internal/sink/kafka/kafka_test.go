package kafka_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankusa/ankusa/internal/hook"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/kafka"
	"github.com/ankusa/ankusa/internal/testutil"
)

const topic = "hooks"

// hangBound fails a test instead of letting it hang; no assertion is about
// how fast anything is.
const hangBound = 5 * time.Second

// newCluster starts a three-broker fake cluster with topic seeded on three
// partitions.
func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(3, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func sinkConfig(c *kfake.Cluster) *kafka.Options {
	return &kafka.Options{Brokers: c.ListenAddrs(), Topic: topic}
}

func newSink(t *testing.T, cfg *kafka.Options) *kafka.Sink {
	t.Helper()
	s, err := kafka.New(withLogger(t, *cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// message is a hook with every optional field set and a body that is not
// valid UTF-8, so a lossy encoding shows.
func message() *sink.Message {
	body := []byte("{\"action\":\"opened\"}\x00\xff\xfe")
	return &sink.Message{
		ID:          uuid.New(),
		Seq:         42,
		Tenant:      "acme",
		Source:      "github",
		ReceivedAt:  time.Date(2025, 3, 4, 5, 6, 7, 891_000_000, time.UTC),
		ContentType: "application/json",
		Headers:     []hook.Header{{Name: "x-github-event", Value: "pull_request"}},
		Body:        body,
		SHA256:      sha256.Sum256(body),
		DedupeKey:   "delivery-7",
		ReplayID:    "replay-1",
		Flagged:     true,
		Attempt:     1,
	}
}

func deliver(t *testing.T, s *kafka.Sink, m *sink.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Deliver(ctx, m)
}

// consume reads topic from the start until it has n records.
func consume(t *testing.T, c *kfake.Cluster, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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

// stored is how many records the topic holds, summed over partitions.
func stored(t *testing.T, c *kfake.Cluster) int64 {
	t.Helper()
	adm := newAdmin(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		n += o.Offset
	})
	return n
}

func newAdmin(t *testing.T, c *kfake.Cluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// answerProduce makes the next produce request, on any broker, fail every
// partition it carries with code.
func answerProduce(c *kfake.Cluster, code int16) {
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
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
}

func TestDeliver_Record(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, sinkConfig(c))
	m := message()
	if err := deliver(t, s, m); err != nil {
		t.Fatal(err)
	}

	recs := consume(t, c, 1)
	if len(recs) != 1 {
		t.Fatalf("consumed %d records, want 1", len(recs))
	}
	r := recs[0]
	if got, want := string(r.Key), "acme/github"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	if !bytes.Equal(r.Value, sink.EncodeJSON(m, sink.NewHeaderFilter(nil))) {
		t.Errorf("value is not EncodeJSON(m):\n%s", r.Value)
	}

	var v struct {
		V              int     `json:"v"`
		ID             string  `json:"id"`
		SourceID       string  `json:"source_id"`
		TenantID       string  `json:"tenant_id"`
		ReceivedAt     string  `json:"received_at"`
		ContentType    string  `json:"content_type"`
		Size           int     `json:"size"`
		DedupeKey      *string `json:"dedupe_key"`
		ReplayID       *string `json:"replay_id"`
		IdempotencyKey string  `json:"idempotency_key"`
		Flagged        bool    `json:"flagged"`
		Headers        []struct {
			Name, Value string
		} `json:"headers"`
		SHA256     string `json:"sha256"`
		BodyBase64 string `json:"body_base64"`
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		t.Fatal(err)
	}
	body, err := base64.StdEncoding.DecodeString(v.BodyBase64)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ name, got, want string }{
		{"id", v.ID, m.ID.String()},
		{"source_id", v.SourceID, "github"},
		{"tenant_id", v.TenantID, "acme"},
		{"received_at", v.ReceivedAt, "2025-03-04T05:06:07.891Z"},
		{"content_type", v.ContentType, "application/json"},
		{"idempotency_key", v.IdempotencyKey, "acme:github:delivery-7"},
		{"sha256", v.SHA256, hex.EncodeToString(m.SHA256[:])},
		{"body", string(body), string(m.Body)},
	} {
		if f.got != f.want {
			t.Errorf("%s = %q, want %q", f.name, f.got, f.want)
		}
	}
	if v.V != sink.MessageVersion || v.Size != len(m.Body) || !v.Flagged {
		t.Errorf("v, size, flagged = %d, %d, %t; want %d, %d, true", v.V, v.Size, v.Flagged, sink.MessageVersion, len(m.Body))
	}
	if v.DedupeKey == nil || *v.DedupeKey != m.DedupeKey || v.ReplayID == nil || *v.ReplayID != m.ReplayID {
		t.Errorf("dedupe_key, replay_id = %v, %v", v.DedupeKey, v.ReplayID)
	}
	if len(v.Headers) != 1 || v.Headers[0].Name != "x-github-event" || v.Headers[0].Value != "pull_request" {
		t.Errorf("headers = %+v", v.Headers)
	}

	got := map[string]string{}
	for _, h := range r.Headers {
		if _, dup := got[h.Key]; dup {
			t.Errorf("header %s twice", h.Key)
		}
		got[h.Key] = string(h.Value)
	}
	want := sink.BrokerHeaders(m)
	if len(want) != 8 { // all five fixed headers, dedupe, replay, flagged
		t.Fatalf("BrokerHeaders has %d entries; the message should set every optional one", len(want))
	}
	for _, h := range want {
		if got[h.Key] != h.Value {
			t.Errorf("header %s = %q, want %q", h.Key, got[h.Key], h.Value)
		}
	}
	if len(got) != len(want) {
		t.Errorf("record has %d headers, want %d: %v", len(got), len(want), got)
	}
}

// TestDeliver_KeyPartition checks that one source's hooks share a partition,
// which is what keeps them in order.
func TestDeliver_KeyPartition(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, sinkConfig(c))
	for range 10 {
		if err := deliver(t, s, message()); err != nil {
			t.Fatal(err)
		}
	}
	recs := consume(t, c, 10)
	for _, r := range recs[1:] {
		if r.Partition != recs[0].Partition {
			t.Fatalf("records of one source on partitions %d and %d", recs[0].Partition, r.Partition)
		}
	}
}

func TestDeliver_TransientThenRetry(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, sinkConfig(c))
	m := message()

	answerProduce(c, kerr.NotEnoughReplicas.Code)
	err := deliver(t, s, m)
	if err == nil {
		t.Fatal("Deliver succeeded through NOT_ENOUGH_REPLICAS")
	}
	if !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Errorf("err = %v, want NOT_ENOUGH_REPLICAS", err)
	}
	if perm, after := sink.Classify(err); perm || after != 0 {
		t.Errorf("Classify(%v) = %t, %s; want transient", err, perm, after)
	}

	// The dispatcher's retry: the same message again.
	if err := deliver(t, s, m); err != nil {
		t.Fatalf("retry: %v", err)
	}
	recs := consume(t, c, 1)
	var got struct{ ID string }
	if err := json.Unmarshal(recs[0].Value, &got); err != nil || got.ID != m.ID.String() {
		t.Errorf("consumed %s (%v), want id %s", recs[0].Value, err, m.ID)
	}
	if n := stored(t, c); n != 1 {
		t.Errorf("topic holds %d records, want 1 (the refused attempt stored nothing)", n)
	}
}

func TestDeliver_MessageTooLarge(t *testing.T) {
	t.Run("broker", func(t *testing.T) {
		c := newCluster(t)
		s := newSink(t, sinkConfig(c))
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.MessageTooLarge})
		err := deliver(t, s, message())
		if perm, _ := sink.Classify(err); !perm || !errors.Is(err, kerr.MessageTooLarge) {
			t.Errorf("err = %v, want permanent MESSAGE_TOO_LARGE", err)
		}
	})
	// A body over the client's 1 MB batch cap (the broker default
	// message.max.bytes) never reaches the broker.
	t.Run("client", func(t *testing.T) {
		c := newCluster(t)
		s := newSink(t, sinkConfig(c))
		m := message()
		m.Body = bytes.Repeat([]byte("x"), 1<<20)
		err := deliver(t, s, m)
		if perm, _ := sink.Classify(err); !perm || !errors.Is(err, kerr.MessageTooLarge) {
			t.Errorf("err = %v, want permanent MESSAGE_TOO_LARGE", err)
		}
		if n := stored(t, c); n != 0 {
			t.Errorf("topic holds %d records, want 0", n)
		}
	})
}

// TestDeliver_BrokerErrors injects each produce error the broker may answer
// and checks that the client hands it to the dispatcher at once (no hidden
// retries) with classify's verdict, and that the sink delivers again after.
func TestDeliver_BrokerErrors(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, sinkConfig(c))
	for _, tc := range []struct {
		inject *kerr.Error
		want   error // what the error wraps; nil: inject
	}{
		{inject: kerr.NotEnoughReplicas},
		// The broker may have stored the record with these two, so the
		// client does not trust the answer: it fails the record with
		// ErrRecordRetries rather than the broker's code.
		{inject: kerr.NotEnoughReplicasAfterAppend, want: kgo.ErrRecordRetries},
		{inject: kerr.RequestTimedOut, want: kgo.ErrRecordRetries},
		{inject: kerr.LeaderNotAvailable},
		{inject: kerr.NotLeaderForPartition},
		{inject: kerr.KafkaStorageError},
		{inject: kerr.ThrottlingQuotaExceeded},
		{inject: kerr.MessageTooLarge},
		{inject: kerr.RecordListTooLarge},
		{inject: kerr.InvalidRecord},
		{inject: kerr.InvalidTimestamp},
		{inject: kerr.TopicAuthorizationFailed},
	} {
		t.Run(tc.inject.Message, func(t *testing.T) {
			want := tc.want
			if want == nil {
				want = tc.inject
			}
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: tc.inject})
			defer h.Remove()
			err := deliver(t, s, message())
			if !errors.Is(err, want) {
				t.Fatalf("err = %v, want %v", err, want)
			}
			wantPerm, wantAfter := sink.Classify(kafka.ClassifyError(topic, want))
			if perm, after := sink.Classify(err); perm != wantPerm || after != wantAfter {
				t.Errorf("Classify(%v) = %t, %s; want %t, %s", err, perm, after, wantPerm, wantAfter)
			}
			if err := deliver(t, s, message()); err != nil {
				t.Errorf("next delivery: %v", err)
			}
		})
	}
}

func TestDeliver_UnknownTopic(t *testing.T) {
	// The cluster would create the topic if the client asked it to.
	c := newCluster(t, kfake.AllowAutoTopicCreation())
	cfg := sinkConfig(c)
	cfg.Topic = "missing"
	s := newSink(t, cfg)

	err := deliver(t, s, message())
	if err == nil {
		t.Fatal("Deliver to a missing topic succeeded")
	}
	if !strings.Contains(err.Error(), `"missing"`) || !strings.Contains(err.Error(), "never creates topics") {
		t.Errorf("err = %v; want it to name the topic and say Ankusa never creates topics", err)
	}
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Errorf("err = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if perm, _ := sink.Classify(err); perm {
		t.Errorf("Classify(%v) = permanent, want transient", err)
	}

	adm := newAdmin(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("missing") {
		t.Fatal("delivering created the topic")
	}

	// Once an operator creates it, the next attempt goes through.
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "missing"); err != nil {
		t.Fatal(err)
	}
	if err := deliver(t, s, message()); err != nil {
		t.Errorf("Deliver after the topic exists: %v", err)
	}
}

func TestDeliver_Context(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*kafka.Options)
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"ctx deadline", func(*kafka.Options) {}, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}},
		{"timeout_ms", func(c *kafka.Options) { c.Timeout = 200 * time.Millisecond }, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			cfg := sinkConfig(c)
			tc.cfg(cfg)
			s := newSink(t, cfg)
			// Warm up, so metadata and the producer id are loaded and
			// the held request below is the produce itself.
			if err := deliver(t, s, message()); err != nil {
				t.Fatal(err)
			}

			// The next produce request reaches a broker that never
			// answers until the test ends.
			held, release := make(chan struct{}), make(chan struct{})
			t.Cleanup(func() { close(release) }) // before the cluster's and sink's Close
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				close(held)
				c.SleepControl(func() { <-release })
				return nil, nil, false
			})

			ctx, cancel := tc.ctx()
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- s.Deliver(ctx, message()) }()
			var err error
			select {
			case err = <-errc:
			case <-time.After(hangBound):
				t.Fatal("Deliver did not return after its deadline")
			}
			select {
			case <-held:
			default:
				t.Fatal("the produce request never reached the broker")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want a deadline", err)
			}
			if perm, _ := sink.Classify(err); perm {
				t.Errorf("Classify(%v) = permanent, want transient", err)
			}
		})
	}
}

// TestClose_NoLeak abandons a Deliver on a hung produce request, closes the
// sink, and checks that every goroutine the sink and the cluster started
// ends.
func TestClose_NoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, topic))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := kafka.New(withLogger(t, *sinkConfig(c)))
		if err != nil {
			t.Fatal(err)
		}
		if err := deliver(t, s, message()); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		defer close(release)
		c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.SleepControl(func() { <-release })
			return nil, nil, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := s.Deliver(ctx, message()); err == nil {
			t.Error("Deliver through a hung broker succeeded")
		}
		s.Close()
	}()
	testutil.Eventually(t, hangBound, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestDeliver_DropHeaders: the sink's drop_headers reach its records: the
// default leaves authorization out, an own list drops what it names.
func TestDeliver_DropHeaders(t *testing.T) {
	c := newCluster(t)
	def := newSink(t, sinkConfig(c))
	cfg := sinkConfig(c)
	cfg.DropHeaders = []string{"X-Github-Event"}
	own := newSink(t, cfg)
	for _, s := range []*kafka.Sink{def, own} {
		m := message()
		m.Headers = append(m.Headers, hook.Header{Name: "authorization", Value: "Bearer provider-token"})
		if err := deliver(t, s, m); err != nil {
			t.Fatal(err)
		}
	}
	// One key, so one partition, produced one after the other: in order.
	recs := consume(t, c, 2)
	byDefault, byOwn := string(recs[0].Value), string(recs[1].Value)
	if strings.Contains(byDefault, `"authorization"`) || !strings.Contains(byDefault, `"x-github-event"`) {
		t.Errorf("default drop list: %s", byDefault)
	}
	if !strings.Contains(byOwn, `"authorization"`) || strings.Contains(byOwn, `"x-github-event"`) {
		t.Errorf("drop_headers [X-Github-Event]: %s", byOwn)
	}
}

// withLogger is o logging to the test.
func withLogger(t *testing.T, o kafka.Options) kafka.Options {
	o.Logger = testutil.Logger(t)
	return o
}
