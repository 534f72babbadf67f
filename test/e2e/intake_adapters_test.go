package e2e_test

// The whole dual-mode path end to end against each real log: an in-process
// node (app.New, wal.type: dual) posts hooks through its HTTP edge, and the
// test reads the log back with a plain client of its own, never the
// adapter.
//
//   - Kafka runs on franz-go's pkg/kfake, an in-process Kafka-protocol
//     cluster of three brokers: no Kafka broker can run on the machines this
//     suite runs on. kfake does not replicate (acks=all is acknowledged at
//     once), so quorum loss is injected as the brokers' answer,
//     NOT_ENOUGH_REPLICAS, rather than produced by stopping brokers.
//   - JetStream runs on three real nats-server instances, embedded and
//     clustered on loopback, with an R3 stream: quorum loss is two of the
//     three servers shut down, and they are started again on the same store
//     directories and ports.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/intake"
	kafkaintake "github.com/ankusa/ankusa/internal/intake/kafka"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/testutil/natscluster"
)

// intakeBackups is the backup block dual requires: file:// in dir, hourly,
// max age 1 h (so the log's retention must cover 2 h).
func intakeBackups(dir string) config.BackupConfig {
	return config.BackupConfig{
		Enabled: true, IntervalMs: 3_600_000, MaxAgeMs: 3_600_000, Keep: 3,
		Primary: "file://" + dir, SigningKey: "0123456789abcdef-e2e-intake",
	}
}

// intakeAnswer is one POST's answer, as a provider sees it.
type intakeAnswer struct {
	Code       int
	RetryAfter string
	Error      string // the "error" of a refusal
	ID         string // the "id" of a 201
}

// postIntake posts one hook to the orders source and returns the answer;
// it never fails the test, so it may run off the test goroutine.
func postIntake(in *instance, body string) (intakeAnswer, error) {
	resp, err := http.Post("http://"+in.IngestAddr()+"/webhooks/"+sourceID, "application/json", strings.NewReader(body))
	if err != nil {
		return intakeAnswer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return intakeAnswer{}, err
	}
	a := intakeAnswer{Code: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	var out struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return a, fmt.Errorf("answer %d %q: %w", resp.StatusCode, raw, err)
	}
	a.ID, a.Error = out.ID, out.Error
	return a, nil
}

// postIntakeConcurrently posts n hooks from workers goroutines and returns
// the ids of the 201s; any other answer fails the test.
func postIntakeConcurrently(t *testing.T, in *instance, n, workers int) []string {
	t.Helper()
	var mu sync.Mutex
	var ids []string
	var errs []error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				a, err := postIntake(in, fmt.Sprintf(`{"n":%d}`, i))
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case a.Code != http.StatusCreated || a.ID == "":
					errs = append(errs, fmt.Errorf("hook %d answered %+v, want 201 with an id", i, a))
				default:
					ids = append(ids, a.ID)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d posts were not 201: %v", len(errs), n, errors.Join(errs...))
	}
	return ids
}

// expectOutage posts n hooks one after another while the log cannot
// confirm: every answer must be 503 intake_unavailable with the configured
// Retry-After, and not one may be a 201. Each answer must come within
// bound: one publish attempt and its slack, far below the batcher's 15 s
// record deadline a hanging publish would run into.
func expectOutage(t *testing.T, in *instance, n int, retryAfter string, bound time.Duration) {
	t.Helper()
	created := 0
	for i := range n {
		start := time.Now()
		a, err := postIntake(in, fmt.Sprintf(`{"outage":%d}`, i))
		if err != nil {
			t.Fatalf("post %d during the outage: %v", i, err)
		}
		if d := time.Since(start); d > bound {
			t.Errorf("post %d during the outage was answered after %s, beyond %s", i, d, bound)
		}
		if a.Code == http.StatusCreated {
			created++
			t.Errorf("post %d during the outage answered 201 (id %s): a hook was acked that the log never confirmed", i, a.ID)
			continue
		}
		if a.Code != http.StatusServiceUnavailable || a.Error != "intake_unavailable" || a.RetryAfter != retryAfter {
			t.Errorf("post %d during the outage answered %+v, want 503 {\"error\":\"intake_unavailable\"} with Retry-After %s", i, a, retryAfter)
		}
	}
	if created > 0 {
		t.Fatalf("%d of %d posts were acked while the log could not confirm", created, n)
	}
}

// expectBackAfterOutage polls, as a provider retrying, until a post is
// acked again, then requires the next n posts to be acked too; it returns
// every acked id.
func expectBackAfterOutage(t *testing.T, in *instance, within time.Duration, n int) []string {
	t.Helper()
	var ids []string
	testutil.Eventually(t, within, "a post to be acked (201) again after the log came back", func() bool {
		a, err := postIntake(in, `{"phase":"back"}`)
		if err != nil {
			t.Fatalf("post after the outage: %v", err)
		}
		if a.Code == http.StatusCreated {
			ids = append(ids, a.ID)
			return true
		}
		if a.Code != http.StatusServiceUnavailable || a.Error != "intake_unavailable" {
			t.Fatalf("post after the outage answered %+v, want 201 or 503 intake_unavailable", a)
		}
		return false
	})
	return append(ids, postIntakeConcurrently(t, in, n, 2)...)
}

// waitIntakeReady waits, as a load balancer does, until GET /ready answers
// 200: the adapter has seen the log answer since the node started. (A post
// that arrives before that meets a gate that opened on the adapter's
// not-yet-ready flag and refuses it for intake.probe_ms.)
func waitIntakeReady(t *testing.T, in *instance) {
	t.Helper()
	testutil.Eventually(t, waitFor, "GET /ready to answer 200 (the intake adapter ready)", func() bool {
		return in.api(http.MethodGet, "/ready", nil, nil) == http.StatusOK
	})
}

// walIntake reads the intake object of GET /v1/wal.
func walIntake(t *testing.T, in *instance) walIntakeView {
	t.Helper()
	var v walIntakeView
	if code := in.api(http.MethodGet, "/v1/wal", nil, &v); code != http.StatusOK || v.Intake == nil {
		t.Fatalf("GET /v1/wal = %d, intake %v; want 200 with an intake object", code, v.Intake)
	}
	return v
}

// waitPendingDrained waits until the reconciler has carried every record
// stored during an outage into the log: nothing pending, nothing stuck.
func waitPendingDrained(t *testing.T, in *instance) {
	t.Helper()
	testutil.Eventually(t, waitFor, "the pending set to drain (every stored hook confirmed in the log)", func() bool {
		v := walIntake(t, in)
		return v.Intake.Pending == 0 && v.Intake.Stuck == 0
	})
}

// logEntry is one record as read back from the log, with its headers.
type logEntry struct {
	Partition int32 // Kafka only
	Key       string
	Node      string
	Seq       uint64
	ID        string
}

// checkLog asserts what the log holds for node after the pending set
// drained: every seq the node assigned (1..nextSeq-1) exactly once, every
// acked id exactly once, nothing of another node. A hook refused by the
// open gate got no seq; one answered 503 after its publish failed was
// stored and carried, and the reconciler put it in the log once.
func checkLog(t *testing.T, entries []logEntry, node string, nextSeq uint64, acked []string) {
	t.Helper()
	bySeq := map[uint64]int{}
	byID := map[string]int{}
	for _, e := range entries {
		if e.Node != node {
			t.Errorf("log record of node %q (seq %d), want only %q", e.Node, e.Seq, node)
			continue
		}
		bySeq[e.Seq]++
		byID[e.ID]++
	}
	for s := uint64(1); s < nextSeq; s++ {
		if n := bySeq[s]; n != 1 {
			t.Errorf("seq %d is in the log %d times, want exactly once", s, n)
		}
	}
	if len(bySeq) != int(nextSeq-1) {
		t.Errorf("the log holds %d distinct seqs, want %d (1..%d)", len(bySeq), nextSeq-1, nextSeq-1)
	}
	t.Logf("the log holds %d records of %s: %d acked hooks, %d stored during the outage (answered 503) and carried by the reconciler",
		len(entries), node, len(acked), int(nextSeq-1)-len(acked))
	for _, id := range acked {
		if n := byID[id]; n != 1 {
			t.Errorf("acked hook %s is in the log %d times, want exactly once", id, n)
		}
	}
}

// headerOf is the value of header name in a header list.
func headerOf(hs []kgo.RecordHeader, name string) string {
	for _, h := range hs {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// readKafkaTopic reads every partition of topic from its start to its
// current end with a plain kgo consumer.
func readKafkaTopic(t *testing.T, brokers []string, topic string) []logEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	parts := map[int32]kgo.Offset{}
	total := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, o.Partition, o.Err)
		}
		parts[o.Partition] = kgo.NewOffset().AtStart()
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			total += int(o.Offset)
		}
	})
	if total == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []logEntry
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records of %s, still waiting for partitions %v: %v", len(out), topic, want, ctx.Err())
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		for _, r := range fs.Records() {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				continue
			}
			seq, err := strconv.ParseUint(headerOf(r.Headers, intake.HeaderSeq), 10, 64)
			if err != nil {
				t.Fatalf("record %s/%d@%d: seq header: %v", topic, r.Partition, r.Offset, err)
			}
			out = append(out, logEntry{
				Partition: r.Partition, Key: string(r.Key), Node: headerOf(r.Headers, intake.HeaderNode),
				Seq: seq, ID: headerOf(r.Headers, intake.HeaderID),
			})
			if r.Offset == end-1 {
				delete(want, r.Partition)
			}
		}
	}
	return out
}

// partitionRE reads the stamped partition from the durability line (the
// Kafka adapter's Describe names it).
var partitionRE = regexp.MustCompile(`Kafka topic (\S+) partition (\d+) `)

// TestE2E_IntakeKafkaDual: a dual node on the Kafka intake (kfake, three
// brokers, the topic on three partitions) acks 50 concurrent hooks, and the
// topic holds each acked hook once, with its id header, keyed by the node,
// on the one partition stamped at the node's first boot. While every
// produce is answered NOT_ENOUGH_REPLICAS the node answers 503
// intake_unavailable with Retry-After and acks nothing; once the brokers
// answer again it acks again, and the hooks stored during the outage reach
// the log too, each once.
func TestE2E_IntakeKafkaDual(t *testing.T) {
	t.Parallel()
	const (
		topic      = "ankusa.intake.default" // the default topic: ankusa.intake.<fleet>
		partitions = 3
		node       = "node-kafka" // FNV-1a 32 % 3 = 2: a stamp of 0 would be visible
	)
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // registered first, so it runs after the node's stop

	rc := newReceiver(t, status(http.StatusOK))
	dataDir := t.TempDir()
	verify := false
	in := startInstance(t, rc, func(cfg *config.Config) {
		cfg.Node.DataDir = dataDir
		cfg.WAL.Type = "dual"
		cfg.Intake.Type = "kafka"
		cfg.Intake.NodeID = node
		cfg.Intake.Kafka = &config.IntakeKafka{Brokers: c.ListenAddrs()}
		// kfake does not report unclean.leader.election.enable (nor
		// enforce min.insync.replicas), so Verify would refuse the topic
		// as unverifiable: the real settings are not under test here.
		cfg.Intake.VerifyTopic = &verify
		cfg.Intake.ProbeMs = 100 // the open gate probes the log soon after the fault is gone
		cfg.Backup = intakeBackups(t.TempDir())
	})

	line := in.DurabilityLine()
	m := partitionRE.FindStringSubmatch(line)
	if m == nil || m[1] != topic || !strings.Contains(line, "wal.type=dual") || !strings.Contains(line, "UNVERIFIED") {
		t.Fatalf("durability line %q: want wal.type=dual, Kafka topic %s with its stamped partition, and UNVERIFIED", line, topic)
	}
	stamped, _ := strconv.Atoi(m[2])
	if want := kafkaintake.PartitionFor(node, partitions); int32(stamped) != want {
		t.Fatalf("stamped partition %d, want PartitionFor(%q, %d) = %d", stamped, node, partitions, want)
	}

	// 50 hooks, concurrently (so batches hold several records): all 201.
	waitIntakeReady(t, in)
	acked := postIntakeConcurrently(t, in, 50, 8)
	entries := readKafkaTopic(t, c.ListenAddrs(), topic)
	if len(entries) != len(acked) {
		t.Errorf("the topic holds %d records after %d acks, want %d", len(entries), len(acked), len(acked))
	}
	for _, e := range entries {
		if e.Partition != int32(stamped) || e.Key != node {
			t.Errorf("record seq %d (id %s) on partition %d with key %q, want partition %d, key %q",
				e.Seq, e.ID, e.Partition, e.Key, stamped, node)
		}
	}
	checkLog(t, entries, node, uint64(len(acked))+1, acked)

	// Quorum lost: every produce, on every broker, is answered
	// NOT_ENOUGH_REPLICAS until the fault is removed.
	var injected atomic.Bool
	var refusedProduces atomic.Int64
	injected.Store(true)
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if !injected.Load() {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		refusedProduces.Add(1)
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotEnoughReplicas.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	// Broker answers are immediate; 2 s is the default publish timeout.
	expectOutage(t, in, 20, "2", 2*time.Second)
	if n := refusedProduces.Load(); n < 3 {
		t.Fatalf("the brokers refused %d produce requests during the outage, want at least intake.breaker_failures (3)", n)
	}
	t.Logf("the brokers answered NOT_ENOUGH_REPLICAS to %d produce requests", refusedProduces.Load())
	if v := walIntake(t, in); v.Intake.State != "open" {
		t.Errorf("GET /v1/wal intake.state = %q during the outage, want open (the gate)", v.Intake.State)
	}

	injected.Store(false)
	acked = append(acked, expectBackAfterOutage(t, in, waitFor, 10)...)
	waitPendingDrained(t, in)
	wal := walIntake(t, in)
	var next struct {
		WAL struct {
			NextSeq uint64 `json:"next_seq"`
		} `json:"wal"`
	}
	in.api(http.MethodGet, "/v1/wal", nil, &next)
	entries = readKafkaTopic(t, c.ListenAddrs(), topic)
	for _, e := range entries {
		if e.Partition != int32(stamped) {
			t.Errorf("record seq %d on partition %d, want only the stamped %d", e.Seq, e.Partition, stamped)
		}
	}
	checkLog(t, entries, node, next.WAL.NextSeq, acked)
	if wal.Intake.Watermark != next.WAL.NextSeq-1 {
		t.Errorf("watermark %d with nothing pending, want next_seq-1 = %d", wal.Intake.Watermark, next.WAL.NextSeq-1)
	}

	// The stamp is in the store: m:intake_partition, written once.
	if err := in.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(dataDir, "store"), Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, err := st.Get([]byte("m:intake_partition"))
	if p, ok := store.ParseU64(v); err != nil || !ok || p != uint64(stamped) {
		t.Errorf("m:intake_partition = %d (%v, %x), want %d", p, err, v, stamped)
	}
	_ = st.Close()

	// ankusa recover on the stopped node reads its stamped partition (a
	// dry run: delivered hooks were reclaimed, so a real run would apply
	// them again — the documented redelivery of a replay from earliest).
	sum, err := app.Recover(context.Background(), in.Config(), app.RecoverFlags{From: "earliest", DryRun: true}, testutil.Logger(t))
	if err != nil || sum.Records != len(entries) {
		t.Fatalf("recover --dry-run on the stopped Kafka node: %s %v; want all %d records read", sum, err, len(entries))
	}
}

// readStream reads every message of stream on subject, by stream sequence,
// with the admin client.
func readStream(t *testing.T, c *natscluster.Cluster, stream, subject string) []logEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := c.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream info %s: %v", stream, err)
	}
	var out []logEntry
	if info.State.Msgs == 0 {
		return nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("stream %s message %d: %v", stream, seq, err)
		}
		if m.Subject != subject {
			continue
		}
		s, err := strconv.ParseUint(m.Header.Get(intake.HeaderSeq), 10, 64)
		if err != nil {
			t.Fatalf("stream %s message %d: seq header: %v", stream, seq, err)
		}
		out = append(out, logEntry{Node: m.Header.Get(intake.HeaderNode), Seq: s, ID: m.Header.Get(intake.HeaderID)})
	}
	return out
}

// TestE2E_IntakeJetStreamDual: a dual node on the JetStream intake (three
// clustered nats-server instances, an R3 stream the operator created, the
// stream verified at boot, backups on) acks hooks, and the stream holds
// each once on the node's subject. With two of the three servers shut down
// the stream has no quorum: the node answers 503 intake_unavailable with
// Retry-After within its publish timeout and acks nothing. With the two
// started again it acks again, and the hooks stored during the outage
// reach the stream too, each once.
func TestE2E_IntakeJetStreamDual(t *testing.T) {
	t.Parallel()
	const (
		stream = "ANKUSA_INTAKE_DEFAULT"
		node   = "node-js"
	)
	c := natscluster.Start(t, natscluster.Options{Name: "ankusa-e2e-intake"})
	c.CreateStream(t, natsjs.StreamConfig{
		Name:       stream,
		Subjects:   []string{"ankusa.intake.default.>"},
		Replicas:   3,
		Storage:    natsjs.FileStorage,
		Duplicates: 2 * time.Minute,
		// ≥ 2 × backup.max_age_ms (1 h below): Verify checks it.
		MaxAge: 24 * time.Hour,
	})
	c.WaitStreamLeader(t, stream)

	rc := newReceiver(t, status(http.StatusOK))
	backups := t.TempDir()
	in := startInstance(t, rc, func(cfg *config.Config) {
		cfg.WAL.Type = "dual"
		cfg.Intake.Type = "jetstream"
		cfg.Intake.NodeID = node
		cfg.Intake.JetStream = &config.IntakeJetStream{URL: c.URL(), Stream: stream}
		// Verify runs against the real stream (the default, said here).
		verify := true
		cfg.Intake.VerifyTopic = &verify
		cfg.Intake.PublishTimeoutMs = 500
		cfg.Intake.ProbeMs = 100
		// nats-server's default max_payload is 1 MiB and Verify requires
		// it to carry intake.max_record_bytes, which must be at least
		// http.max_body_bytes + 64 KiB.
		cfg.HTTP.MaxBodyBytes = 512 << 10
		cfg.Intake.MaxRecordBytes = 1 << 20
		cfg.Backup = intakeBackups(backups)
	})

	line := in.DurabilityLine()
	for _, want := range []string{"wal.type=dual", "JetStream stream " + stream, "subject ankusa.intake.default." + node, "replicas=3"} {
		if !strings.Contains(line, want) {
			t.Errorf("durability line %q does not say %q", line, want)
		}
	}
	if strings.Contains(line, "UNVERIFIED") {
		t.Errorf("durability line %q says UNVERIFIED with intake.verify_topic on", line)
	}

	subject := "ankusa.intake.default." + node
	waitIntakeReady(t, in)
	acked := postIntakeConcurrently(t, in, 30, 6)
	checkLog(t, readStream(t, c, stream, subject), node, uint64(len(acked))+1, acked)

	// Two of three down: no quorum for the R3 stream.
	leader := c.WaitStreamLeader(t, stream)
	var down []int
	for i := range 3 {
		if i != leader {
			down = append(down, i)
		}
	}
	for _, i := range down {
		c.Stop(i)
	}
	// No PubAck without quorum: each post that reaches the log waits out
	// its publish attempt (500 ms); the open gate answers the others at
	// once.
	start := time.Now()
	expectOutage(t, in, 10, "2", 500*time.Millisecond+time.Second)
	t.Logf("10 posts answered 503 intake_unavailable in %s with two of three servers down", time.Since(start))

	c.Restart(t, down...)
	c.WaitMetaLeader(t)
	c.WaitStreamLeader(t, stream)
	acked = append(acked, expectBackAfterOutage(t, in, natscluster.Timeout, 10)...)
	waitPendingDrained(t, in)
	var next struct {
		WAL struct {
			NextSeq uint64 `json:"next_seq"`
		} `json:"wal"`
	}
	in.api(http.MethodGet, "/v1/wal", nil, &next)
	checkLog(t, readStream(t, c, stream, subject), node, next.WAL.NextSeq, acked)
}
