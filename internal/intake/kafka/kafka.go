package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/kafkaclient"
)

// ErrClosed is wrapped by the Unavailable error of a call on a closed
// Intake: the intake package's, as the Intake contract states.
var ErrClosed = intake.ErrClosed

// ErrNoPartition is wrapped by the error of a call that needs the node's
// stamped partition while Options.Partition is still -1.
var ErrNoPartition = errors.New("kafka intake: no partition stamped for this node (AssignPartition, then SetPartition)")

// ErrTooLarge is wrapped by the Permanent error of a record that cannot fit
// a record batch of at most the producer's batch cap (Options.MaxRecordBytes).
var ErrTooLarge = fmt.Errorf("record too large (%w)", intake.ErrRecordRefused)

// ErrAckLost is wrapped by the Unavailable error of a publish whose ctx
// ended before every record's outcome was known: some may have landed.
var ErrAckLost = errors.New("publish outcome unknown (ack not received)")

const (
	// readyInterval is how often the ready goroutine asks for metadata.
	readyInterval = time.Second
	// readyTimeout bounds one readiness metadata request.
	readyTimeout = 2 * time.Second
	// kgoDefaultBatchMaxBytes is kgo's ProducerBatchMaxBytes default, the
	// cap when Options.MaxRecordBytes is 0.
	kgoDefaultBatchMaxBytes = 1_000_012
	// maxBatchBytes is the largest batch cap kgo accepts.
	maxBatchBytes = 1 << 30
	// recordOverheadBound bounds what a v2 record batch adds around one
	// record beyond its key, value and header bytes: the 61-byte batch
	// header, the record's length, attributes, timestamp and offset deltas,
	// the key and value lengths and the header count (5-byte varints and a
	// 10-byte timestamp delta at most).
	recordOverheadBound = 61 + 5 + 1 + 10 + 5 + 5 + 5 + 5
	// headerOverheadBound bounds one header's two length varints.
	headerOverheadBound = 5 + 5
)

// Options configures Open.
type Options struct {
	// Brokers are the seed brokers (intake.kafka.brokers). Required.
	Brokers []string
	// Topic is the intake topic, operator-owned: the adapter never creates
	// or alters it. Required.
	Topic string
	// Partition is the node's stamped partition (m:intake_partition), or -1
	// when not yet stamped (see SetPartition and AssignPartition). The zero
	// value is partition 0, a stamp like any other: say -1 for none.
	Partition int32
	// Node is this node's id (intake.node_id): the record key, the node
	// header, and what Replay filters on. Required.
	Node string
	// Fleet names the node's fleet (intake.fleet); it is logged, the topic
	// already being per fleet.
	Fleet string
	// SASL and TLS configure the connection (intake.kafka.sasl, .tls); nil
	// means none.
	SASL *kafkaclient.SASL
	TLS  *kafkaclient.TLS
	// MaxRecordBytes (intake.max_record_bytes) caps a record batch: the
	// producer never builds a larger one, a record that cannot fit one is
	// refused Permanent before anything is produced, and Verify requires the
	// topic's max.message.bytes to be at least this. 0 means kgo's default
	// cap (1 000 012 bytes) and no max.message.bytes check.
	MaxRecordBytes int64
	// BackupMaxAge (backup.max_age_ms): Verify requires retention.ms ≥ 2 ×
	// this. 0 skips the check.
	BackupMaxAge time.Duration
	// VerifyTopic (intake.verify_topic): false makes Verify a no-op, and the
	// caller says UNVERIFIED in the startup line.
	VerifyTopic bool
	// Logger receives the client's warnings and the adapter's. Nil discards.
	Logger *slog.Logger
}

// Intake is one node's view of the Kafka intake topic. Its methods are safe
// for concurrent use.
type Intake struct {
	topic     string
	node      string
	maxBatch  int32 // the producer's batch cap: no record batch is larger
	maxRecord int64 // Options.MaxRecordBytes
	checkMax  bool  // Verify checks max.message.bytes ≥ maxRecord
	backupAge time.Duration
	verify    bool
	log       *slog.Logger
	baseOpts  []kgo.Opt // seeds, auth, logger: shared by the replay consumers

	cl        *kgo.Client
	adm       *kadm.Client // on cl
	partition atomic.Int32

	produceMu sync.Mutex // held while one batch's records are enqueued

	ready   atomic.Bool
	closed  atomic.Bool
	skipped atomic.Int64

	verifiedMu sync.Mutex
	verified   *settings // from the last Verify, nil unless it passed

	closeOnce sync.Once
	stop      context.CancelFunc // ends the ready goroutine and its request
	done      chan struct{}      // closed when the ready goroutine returns
}

// settings are the topic settings Verify read and Describe reports.
type settings struct {
	minISR   int64
	replicas int
}

var (
	_ intake.Intake            = (*Intake)(nil)
	_ intake.PartitionAssigner = (*Intake)(nil)
	_ intake.Positioner        = (*Intake)(nil)
)

// Open builds the adapter's own client and starts the readiness goroutine.
// It does not wait for a broker: one that is down shows up as Ready false
// and failed publishes. It fails only on options it cannot use.
func Open(o Options) (*Intake, error) {
	switch {
	case len(o.Brokers) == 0:
		return nil, errors.New("kafka intake: no brokers")
	case o.Topic == "":
		return nil, errors.New("kafka intake: no topic")
	case o.Node == "":
		return nil, errors.New("kafka intake: no node id")
	case o.Partition < -1:
		return nil, fmt.Errorf("kafka intake: partition %d: want -1 (not stamped) or ≥ 0", o.Partition)
	case o.MaxRecordBytes < 0 || o.MaxRecordBytes > maxBatchBytes:
		return nil, fmt.Errorf("kafka intake: max record bytes %d: want 0..%d", o.MaxRecordBytes, maxBatchBytes)
	case o.BackupMaxAge < 0:
		return nil, fmt.Errorf("kafka intake: backup max age %s < 0", o.BackupMaxAge)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "intake.kafka", "topic", o.Topic, "node", o.Node, "fleet", o.Fleet)

	maxBatch := int32(kgoDefaultBatchMaxBytes)
	if o.MaxRecordBytes > 0 {
		maxBatch = int32(max(o.MaxRecordBytes, 512)) // kgo's floor
	}
	// kgo refuses a batch cap that does not fit its write limit, and a
	// replay must be able to read a batch of that size back (a broker
	// returns the first batch of a fetch whatever its size).
	brokerMax := int32(min(max(int64(100<<20), int64(maxBatch)+1<<20), maxBatchBytes))

	base := []kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.ClientID("ankusa-intake"),
		kgo.WithLogger(kafkaclient.Logger(logger)),
		kgo.BrokerMaxWriteBytes(brokerMax),
		kgo.BrokerMaxReadBytes(brokerMax),
		// kgo.AllowAutoTopicCreation is deliberately absent: Ankusa never
		// creates topics.
	}
	auth, err := kafkaclient.AuthOpts("kafka intake", o.SASL, o.TLS)
	if err != nil {
		return nil, err
	}
	base = append(base, auth...)
	produce := append(base[:len(base):len(base)],
		kgo.DefaultProduceTopic(o.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// The record carries its partition: the node's stamp.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(maxBatch),
		// PublishBatch is synchronous, so a linger only adds latency;
		// batches of concurrent calls still share a request whenever
		// one is already in flight.
		kgo.ProducerLinger(0),
		// One attempt per PublishBatch: the client fails a record on its
		// first error instead of retrying inside the attempt, so the
		// attempt deadline is real and the reconciler owns every retry.
		// With 0 a missing topic also fails after one metadata load.
		kgo.RecordRetries(0),
		// Keep the idempotent producer (it dedupes the client's own
		// resends) but let ctx ending fail an in-flight record, so a hung
		// broker does not hold later batches; the cost is a possible
		// duplicate when the reconciler republishes a batch that landed,
		// which the read side dedupes anyway.
		kgo.AllowIdempotentProduceCancellation(),
	)
	cl, err := kgo.NewClient(produce...)
	if err != nil {
		return nil, fmt.Errorf("kafka intake: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	in := &Intake{
		topic:     o.Topic,
		node:      o.Node,
		maxBatch:  maxBatch,
		maxRecord: o.MaxRecordBytes,
		checkMax:  o.MaxRecordBytes > 0,
		backupAge: o.BackupMaxAge,
		verify:    o.VerifyTopic,
		log:       logger,
		baseOpts:  base,
		cl:        cl,
		adm:       kadm.NewClient(cl),
		stop:      stop,
		done:      make(chan struct{}),
	}
	in.partition.Store(o.Partition)
	go in.readyLoop(ctx)
	return in, nil
}

// Partition returns the stamped partition, or -1.
func (in *Intake) Partition() int32 { return in.partition.Load() }

// SetPartition stamps the node's partition once, for an Intake opened with
// Partition -1: PublishBatch, Replay, Earliest and Ready use it from then
// on. Setting the partition already set is a no-op; changing it is refused
// (a stamp is never recomputed).
func (in *Intake) SetPartition(p int32) error {
	if p < 0 {
		return fmt.Errorf("kafka intake: partition %d < 0", p)
	}
	if in.partition.CompareAndSwap(-1, p) {
		return nil
	}
	if cur := in.partition.Load(); cur != p {
		return fmt.Errorf("kafka intake: partition already stamped %d, refusing %d", cur, p)
	}
	return nil
}

// PartitionFor is the partition a node is assigned in a topic of n
// partitions: FNV-1a 32 of the node id modulo n. It is computed once, at
// the node's first dual boot, and stamped.
func PartitionFor(node string, n int32) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	return int32(h.Sum32() % uint32(n))
}

// AssignPartition returns PartitionFor(node, the topic's partition count now),
// from a fresh metadata request. The caller stamps the answer and never asks
// again: a later partition-count change would map the node elsewhere.
func (in *Intake) AssignPartition(ctx context.Context, node string) (int32, error) {
	if in.closed.Load() {
		return -1, &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	t, err := in.topicMetadata(ctx)
	if err != nil {
		return -1, classify("assign partition", in.topic, err)
	}
	if len(t.Partitions) == 0 {
		return -1, intake.Errorf(intake.NotFound, "kafka intake: topic %q has no partitions", in.topic)
	}
	return PartitionFor(node, int32(len(t.Partitions))), nil
}

// topicMetadata asks a broker (never the client's cache) for the topic's
// metadata, without creating it. A topic-level error is returned as error.
func (in *Intake) topicMetadata(ctx context.Context) (*kmsg.MetadataResponseTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(in.topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, in.cl)
	if err != nil {
		return nil, err
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic == nil || *t.Topic != in.topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, kerr.UnknownTopicOrPartition
}

// recordSizeBound bounds the size of a record batch holding r alone.
func recordSizeBound(r *kgo.Record) int64 {
	n := int64(recordOverheadBound + len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += int64(headerOverheadBound + len(h.Key) + len(h.Value))
	}
	return n
}

// toKafka builds r's Kafka record for partition p.
func toKafka(r *intake.Record, p int32) *kgo.Record {
	hs := [...][2]string{
		{intake.HeaderVersion, r.Version},
		{intake.HeaderKind, r.Kind},
		{intake.HeaderNode, r.Node},
		{intake.HeaderSeq, strconv.FormatUint(r.Seq, 10)},
		{intake.HeaderID, uuid.UUID(r.ID).String()},
		{intake.HeaderIncarnation, r.Incarnation},
		{intake.HeaderTenant, r.Tenant},
		{intake.HeaderSource, r.Source},
	}
	kr := &kgo.Record{
		Key:       []byte(r.Node),
		Value:     r.Value,
		Partition: p,
		Headers:   make([]kgo.RecordHeader, len(hs)),
		// Timestamp stays zero: the client stamps the produce time.
	}
	for i, h := range hs {
		kr.Headers[i] = kgo.RecordHeader{Key: h[0], Value: []byte(h[1])}
	}
	return kr
}

// outcome is one record's produce result.
type outcome struct {
	i      int
	offset int64
	part   int32
	err    error
}

// PublishBatch produces recs, in order, to the node's partition with acks
// from every in-sync replica and returns the offset of the last record once
// all are confirmed.
//
// Refused Permanent before anything is produced: an empty batch, a record
// with an empty version, kind or node, a record over the batch cap
// (ErrTooLarge); and with no stamped partition (ErrNoPartition). The
// version and kind are written as given, so a test can publish a record a
// reader must skip. One attempt, bounded by ctx: when ctx ends first the
// error is Unavailable wrapping ErrAckLost and ctx's error, and records may
// have landed. Broker errors are classified as the package doc says; any
// failed record fails the call.
func (in *Intake) PublishBatch(ctx context.Context, recs []intake.Record) (intake.Position, error) {
	pos, err := in.PublishBatchPositions(ctx, recs)
	if err != nil {
		return -1, err
	}
	return pos[len(pos)-1], nil
}

// PublishBatchPositions is PublishBatch returning every record's own
// offset, as the broker assigned it. A batch's offsets are contiguous only
// while no other writer shares the partition: two node ids that hash to one
// partition interleave (a batch larger than one producer batch goes out in
// several requests), and a position derived from the last offset would then
// run ahead of the record, past a record only the log holds.
func (in *Intake) PublishBatchPositions(ctx context.Context, recs []intake.Record) ([]intake.Position, error) {
	if in.closed.Load() {
		return nil, &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	p := in.partition.Load()
	if p < 0 {
		return nil, &intake.Error{Class: intake.Permanent, Err: ErrNoPartition}
	}
	if len(recs) == 0 {
		return nil, intake.Errorf(intake.Permanent, "kafka intake: empty batch")
	}
	krs := make([]*kgo.Record, len(recs))
	for i := range recs {
		r := &recs[i]
		if r.Version == "" || r.Kind == "" || r.Node == "" {
			return nil, intake.Errorf(intake.Permanent, "kafka intake: record %d (seq %d): empty version, kind or node", i, r.Seq)
		}
		krs[i] = toKafka(r, p)
		if n := recordSizeBound(krs[i]); n > int64(in.maxBatch) {
			return nil, &intake.Error{Class: intake.Permanent, Err: fmt.Errorf(
				"kafka intake: record %d (seq %d) needs up to %d bytes as a record batch, over the %d-byte cap (intake.max_record_bytes): %w",
				i, r.Seq, n, in.maxBatch, ErrTooLarge)}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("kafka intake publish: %w", err)}
	}

	// Our own promises rather than ProduceSync: a record written to a
	// broker that never answers has no outcome until the request times
	// out, long after ctx. Buffered, so a late promise never blocks the
	// client.
	outs := make(chan outcome, len(krs))
	in.produceMu.Lock()
	for i, kr := range krs {
		in.cl.Produce(ctx, kr, func(r *kgo.Record, err error) {
			outs <- outcome{i: i, offset: r.Offset, part: r.Partition, err: err}
		})
	}
	in.produceMu.Unlock()

	offsets := make([]int64, len(krs))
	var firstErr error
	firstErrAt := len(krs)
	for range krs {
		var o outcome
		select {
		case o = <-outs:
		case <-ctx.Done():
			// An outcome that raced the deadline still counts; only a
			// missing one is unknown.
			select {
			case o = <-outs:
			default:
				return nil, &intake.Error{Class: intake.Unavailable,
					Err: fmt.Errorf("kafka intake publish of %d records to %s/%d: %w: %w", len(krs), in.topic, p, ErrAckLost, ctx.Err())}
			}
		}
		if o.err != nil {
			if o.i < firstErrAt {
				firstErr, firstErrAt = o.err, o.i
			}
			continue
		}
		if o.part != p {
			// ManualPartitioner makes this impossible; never confirm
			// a record somewhere Replay will not look.
			firstErr, firstErrAt = fmt.Errorf("record %d produced to partition %d, not %d", o.i, o.part, p), -1
		}
		offsets[o.i] = o.offset
	}
	if firstErr != nil {
		if errors.Is(firstErr, context.Canceled) || errors.Is(firstErr, context.DeadlineExceeded) {
			// The client failed the record on ctx (it may have been
			// in flight): the same unknown outcome as the wait below.
			firstErr = fmt.Errorf("%w: %w", ErrAckLost, firstErr)
		}
		return nil, classify("produce", in.topic, firstErr)
	}
	in.ready.Store(true) // the log just answered
	out := make([]intake.Position, len(offsets))
	for i, o := range offsets {
		out[i] = intake.Position(o)
	}
	return out, nil
}

// partitionOffset lists one partition's start (earliest, kadm
// ListStartOffsets) or end (high watermark, ListEndOffsets) offset.
func (in *Intake) partitionOffset(ctx context.Context, p int32, end bool) (int64, error) {
	list := in.adm.ListStartOffsets
	if end {
		list = in.adm.ListEndOffsets
	}
	offs, err := list(ctx, in.topic)
	if o, ok := offs.Lookup(in.topic, p); ok {
		if o.Err != nil {
			return -1, o.Err
		}
		return o.Offset, nil
	}
	if err != nil {
		return -1, err
	}
	// A missing topic is listed as partition -1 with its error.
	if o, ok := offs.Lookup(in.topic, -1); ok && o.Err != nil {
		return -1, o.Err
	}
	return -1, kerr.UnknownTopicOrPartition
}

// Earliest returns the log start offset of the node's partition: the first
// position retention still holds (equal to the end offset when everything
// was deleted).
func (in *Intake) Earliest(ctx context.Context) (intake.Position, error) {
	if in.closed.Load() {
		return -1, &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	p := in.partition.Load()
	if p < 0 {
		return -1, &intake.Error{Class: intake.Permanent, Err: ErrNoPartition}
	}
	off, err := in.partitionOffset(ctx, p, false)
	if err != nil {
		return -1, classify("earliest", in.topic, err)
	}
	return intake.Position(off), nil
}

// Replay calls fn for each record of this node after position from
// (exclusive), in log order, up to the partition's high watermark when
// Replay was called. Records of other nodes (a shared partition) are passed
// over; records of this node with an unknown version or kind, or whose seq
// or id do not parse, are skipped and counted (Skipped). A from before the
// log start starts at the log start: the gap is the caller's to detect
// with Earliest. fn's error is returned as it is; ctx ending and broker
// errors are classified.
//
// With no stamped partition (-1), Replay reads every partition of the topic
// in turn, each from its start (from must be -1: positions are per
// partition); positions then increase only within a partition.
func (in *Intake) Replay(ctx context.Context, from intake.Position, fn func(intake.Record, intake.Position) error) error {
	if in.closed.Load() {
		return &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	var skipped int64
	defer func() {
		if skipped > 0 {
			in.log.Warn("kafka intake replay skipped unknown or unreadable records", "skipped", skipped, "from", from)
		}
	}()
	p := in.partition.Load()
	if p >= 0 {
		return in.replayPartition(ctx, p, from, fn, &skipped)
	}
	if from >= 0 {
		return intake.Errorf(intake.Permanent, "kafka intake: replay from %d with no stamped partition: positions are per partition", from)
	}
	t, err := in.topicMetadata(ctx)
	if err != nil {
		return classify("replay", in.topic, err)
	}
	for q := range int32(len(t.Partitions)) {
		if err := in.replayPartition(ctx, q, -1, fn, &skipped); err != nil {
			return err
		}
	}
	return nil
}

// replayPartition is Replay over partition p, with a consumer client of its
// own (closed on return), so replays never share fetch state.
func (in *Intake) replayPartition(ctx context.Context, p int32, from intake.Position, fn func(intake.Record, intake.Position) error, skipped *int64) error {
	start := max(int64(from)+1, 0)
	end, err := in.partitionOffset(ctx, p, true)
	if err != nil {
		return classify("replay", in.topic, err)
	}
	if start >= end {
		return nil
	}
	opts := append(in.baseOpts[:len(in.baseOpts):len(in.baseOpts)],
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{in.topic: {p: kgo.NewOffset().At(start)}}),
		// A start below the log start (retention) resets to the log start.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka intake replay: %w", err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("kafka intake replay of %s/%d: %w", in.topic, p, err)}
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if dl, ok := errors.AsType[*kgo.ErrDataLoss](err); ok {
				// Retention passed the start: the client reset to the
				// log start and goes on. Informational.
				in.log.Warn("kafka intake replay: records below the log start are gone", "partition", p, "reset_to", dl.ResetTo)
				return
			}
			if ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return classify("replay", in.topic, ferr)
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if r.Partition != p || r.Offset < start {
				continue
			}
			if r.Offset >= end {
				return nil
			}
			if err := in.deliver(r, fn, skipped); err != nil {
				return err
			}
			if r.Offset == end-1 {
				return nil
			}
		}
	}
}

// deliver decodes r and calls fn if it is a known record of this node.
func (in *Intake) deliver(r *kgo.Record, fn func(intake.Record, intake.Position) error, skipped *int64) error {
	var h [8]string
	var seen [8]bool
	names := [8]string{intake.HeaderVersion, intake.HeaderKind, intake.HeaderNode, intake.HeaderSeq,
		intake.HeaderID, intake.HeaderIncarnation, intake.HeaderTenant, intake.HeaderSource}
	for _, rh := range r.Headers {
		for i, n := range names {
			if rh.Key == n && !seen[i] { // the first of a repeated header wins
				h[i], seen[i] = string(rh.Value), true
			}
		}
	}
	if h[2] != in.node {
		return nil // another node's record, or not an intake record
	}
	skip := func(reason string, err error) {
		*skipped++
		in.skipped.Add(1)
		if err != nil {
			in.log.Warn("kafka intake replay: unreadable record", "partition", r.Partition, "offset", r.Offset, "reason", reason, "err", err)
		}
	}
	if h[0] != intake.RecordVersion || h[1] != intake.KindHook {
		skip("unknown version or kind", nil)
		return nil
	}
	seq, err := strconv.ParseUint(h[3], 10, 64)
	if err != nil {
		skip("seq", err)
		return nil
	}
	id, err := uuid.Parse(h[4])
	if err != nil {
		skip("id", err)
		return nil
	}
	rec := intake.Record{
		Version:     h[0],
		Kind:        h[1],
		Node:        h[2],
		Seq:         seq,
		ID:          id,
		Incarnation: h[5],
		Tenant:      h[6],
		Source:      h[7],
		Value:       bytes.Clone(r.Value),
	}
	return fn(rec, intake.Position(r.Offset))
}

// Skipped returns how many of this node's records this Intake's replays
// skipped as unknown (version, kind) or unreadable (seq, id), over its
// lifetime.
func (in *Intake) Skipped() int64 { return in.skipped.Load() }

// Ready reports the flag the readiness goroutine keeps (false until its
// first answer), false once closed. It never does I/O.
func (in *Intake) Ready() bool { return in.ready.Load() && !in.closed.Load() }

// readyLoop refreshes the ready flag about every readyInterval until ctx
// ends (Close).
func (in *Intake) readyLoop(ctx context.Context) {
	defer close(in.done)
	tick := time.NewTicker(readyInterval)
	defer tick.Stop()
	was := false
	for {
		ok := in.leaderKnown(ctx)
		if ctx.Err() != nil {
			return
		}
		in.ready.Store(ok)
		if ok != was {
			if ok {
				in.log.Info("kafka intake partition has a leader: ready", "partition", in.partition.Load())
			} else {
				in.log.Warn("kafka intake not ready: no answer or no leader for the partition", "partition", in.partition.Load())
			}
			was = ok
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// leaderKnown asks a broker for the topic's metadata and reports whether
// the node's partition (every partition, before the stamp) has a leader.
func (in *Intake) leaderKnown(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	t, err := in.topicMetadata(ctx)
	if err != nil || len(t.Partitions) == 0 {
		return false
	}
	p := in.partition.Load()
	found := false
	for _, tp := range t.Partitions {
		if p >= 0 && tp.Partition != p {
			continue
		}
		if tp.ErrorCode != 0 || tp.Leader < 0 {
			return false
		}
		found = true
	}
	return found
}

// Describe is the log's part of the startup durability sentence, with the
// settings the last Verify read if it passed, else "settings UNVERIFIED".
func (in *Intake) Describe() string {
	part := "unassigned"
	if p := in.partition.Load(); p >= 0 {
		part = strconv.Itoa(int(p))
	}
	in.verifiedMu.Lock()
	s := in.verified
	in.verifiedMu.Unlock()
	if s == nil {
		return fmt.Sprintf("Kafka topic %s partition %s (acks=all, settings UNVERIFIED)", in.topic, part)
	}
	return fmt.Sprintf("Kafka topic %s partition %s (acks=all, min.insync.replicas=%d, replicas=%d)", in.topic, part, s.minISR, s.replicas)
}

// Close stops the readiness goroutine and closes the client. Records still
// buffered belong to publishes that already returned an error; any a broker
// stored anyway is a duplicate the read side dedupes. Later calls fail with
// ErrClosed; a second Close returns nil.
func (in *Intake) Close() error {
	in.closeOnce.Do(func() {
		in.closed.Store(true)
		in.stop()
		<-in.done
		in.ready.Store(false)
		in.cl.Close()
	})
	return nil
}
