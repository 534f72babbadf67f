// Package kafka delivers hooks to an existing Kafka topic with franz-go: one
// record per hook, the queue sinks' message JSON as the value, key
// "<tenant>/<source>" (so one source's hooks keep their order on one
// partition), and the broker headers. A delivery counts only once every
// in-sync replica has it (acks=all).
//
// The sink never creates the topic: auto topic creation is off in the client,
// and a missing topic is reported (transient) until an operator creates it.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankusa/ankusa/internal/kafkaclient"
	"github.com/ankusa/ankusa/internal/sink"
)

// Sink produces to one topic. It is safe for concurrent Deliver calls; they
// share one client, which batches records that are in flight together.
type Sink struct {
	topic   string
	timeout time.Duration     // 0: only the caller's ctx bounds an attempt
	drop    sink.HeaderFilter // request headers left out of the message
	cl      *kgo.Client
}

var _ sink.Sink = (*Sink)(nil)

// Options configures New. config validates the operator's settings; New
// checks only what it cannot work without.
type Options struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Topic is the existing topic produced to. Required.
	Topic string
	// Timeout bounds one attempt on top of the caller's ctx; 0 leaves only
	// the ctx.
	Timeout time.Duration
	// SASL and TLS configure the connection; nil means none.
	SASL *kafkaclient.SASL
	TLS  *kafkaclient.TLS
	// DropHeaders are the request headers left out of the message (any
	// case); nil means sink.DefaultDropHeaders, an empty list drops none.
	DropHeaders []string
	// Logger receives the client's warnings. Nil discards.
	Logger *slog.Logger
}

// New builds the sink's client. It does not dial: a broker that is down when
// Ankusa starts shows up as failed (transient) deliveries, not a failed start.
// It fails only on options it cannot use (no brokers or topic, an unknown
// SASL mechanism, unreadable TLS files), with an error naming the setting.
func New(cfg Options) (*Sink, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafka sink: no brokers")
	}
	if cfg.Topic == "" {
		return nil, errors.New("kafka sink: no topic")
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("ankusa"),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// kgo.AllowAutoTopicCreation is deliberately absent: Ankusa never
		// creates topics, and a metadata request that may create one
		// would turn a typo'd topic into a silently new one.

		// Deliver is synchronous, so a linger only adds latency; records
		// from concurrent Delivers still share a request whenever one is
		// already in flight.
		kgo.ProducerLinger(0),
		// The dispatcher owns retrying (backoff, attempt count, breaker,
		// dead-lettering), so the client reports the first failure
		// instead of retrying inside the attempt. The rejected design,
		// kgo's unbounded default, hides an outage from the dispatcher
		// until the attempt deadline and reports it as a bare timeout.
		kgo.RecordRetries(0),
		// The idempotent producer stays on (it dedupes the client's own
		// resends), but may fail an in-flight record when the attempt's
		// ctx ends. The cost is a possible duplicate when the dispatcher
		// retries a record the broker did store; consumers dedupe on the
		// idempotency key anyway.
		kgo.AllowIdempotentProduceCancellation(),
		kgo.WithLogger(kafkaclient.Logger(log.With("component", "sink.kafka", "topic", cfg.Topic))),
	}
	auth, err := kafkaclient.AuthOpts("kafka sink", cfg.SASL, cfg.TLS)
	if err != nil {
		return nil, err
	}
	opts = append(opts, auth...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	return &Sink{
		topic:   cfg.Topic,
		timeout: cfg.Timeout,
		drop:    sink.NewHeaderFilter(cfg.DropHeaders),
		cl:      cl,
	}, nil
}

// Deliver produces m as one record and waits for the acks=all answer.
//
// Errors: a message the broker refuses for good (too large, invalid, not
// authorized, failed SASL) is sink.Permanent; a quota throttle is
// sink.Retry; everything else is transient, including a missing topic (an
// operator may still be creating it) and ctx ending, which makes Deliver
// return at once even if the broker never answers.
func (s *Sink) Deliver(ctx context.Context, m *sink.Message) error {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	// An attempt whose ctx has already ended never reaches the client:
	// kgo fails a whole record batch when one of its records' ctx is done
	// (AllowIdempotentProduceCancellation), so a record left buffered by
	// such an attempt failed the next Deliver's record with this ctx's
	// error (sinktest EndedContextReturnsPromptly, 6 runs in 8). A ctx
	// ending while its record is in flight still fails the records batched
	// with it: those attempts are transient failures the dispatcher retries.
	if err := ctx.Err(); err != nil {
		return classify(s.topic, err)
	}
	bh := sink.BrokerHeaders(m)
	r := &kgo.Record{
		Key:     []byte(m.Tenant + "/" + m.Source),
		Value:   sink.EncodeJSON(m, s.drop),
		Headers: make([]kgo.RecordHeader, 0, len(bh)),
		// Timestamp stays zero, so the client stamps the produce time.
		// ReceivedAt would be wrong here: a hook delivered after a long
		// outage or by a replay would carry an old timestamp, which
		// time-based retention may delete at once and
		// log.message.timestamp.before.max.ms may refuse. received_at
		// rides in the value.
	}
	for _, h := range bh {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}

	// Produce with our own promise rather than ProduceSync: ProduceSync
	// waits for the record's outcome, and a record already written to a
	// broker that never answers has none until the request times out,
	// long after ctx. The channel is buffered so a late promise never
	// blocks the client.
	done := make(chan error, 1)
	s.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- err })
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		// An ack that raced the deadline still counts: reporting it
		// as failed would only cause a duplicate.
		select {
		case err = <-done:
		default:
			err = ctx.Err()
		}
	}
	if err != nil {
		return classify(s.topic, err)
	}
	return nil
}

// Close closes the client. Records still buffered belong to Delivers that
// already returned an error (their ctx ended); they are dropped, and any
// that a broker stored anyway is a duplicate consumers dedupe.
func (s *Sink) Close() error {
	s.cl.Close()
	return nil
}
