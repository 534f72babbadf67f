// Package rabbitmq is the RabbitMQ sink: it publishes each hook's message
// JSON to an existing exchange with publisher confirms, mandatory routing
// and persistent delivery, and reports only what the broker said.
//
// Delivery protocol (each rule is relied on by Sink.publish):
//
//  1. One publish in flight per AMQP channel. A Deliver takes a channel of
//     its own from a small pool (at most maxInFlight open at once), publishes
//     one message, waits for that message's confirm, and only then gives the
//     channel back. The deferred confirmation is therefore its own, and so
//     is any basic.return on that channel.
//  2. A message is delivered only when it was acked AND not returned.
//     RabbitMQ sends basic.return for an unroutable mandatory message before
//     its basic.ack, and amqp091-go hands the return to the channel's
//     NotifyReturn listener (buffered, capacity 1) before it reads the ack;
//     so when the confirm has arrived, a return, if there was one, is
//     already in the buffer. The return is matched on message_id.
//  3. A channel the broker closed (404 exchange not found, 403, 406) is
//     dropped; the next Deliver opens a fresh one. A channel whose publish
//     was abandoned (ctx ended before the confirm) is dropped too, since its
//     late confirm or return would otherwise be read by the next user.
//  4. The connection is dialled lazily and redialled by the first Deliver
//     that finds it closed: a broker that is down at boot never stops
//     Ankusa from starting, and meanwhile Deliver fails transiently.
//  5. Nothing is declared: the exchange, queues and bindings belong to the
//     operator. A missing exchange is a transient error that says so.
//
// Rejected design: one shared channel with pipelined publishes and a router
// goroutine correlating returns by message_id. amqp091-go reports returns
// and confirms on separate Go channels, so the ack could wake the publisher
// before the router had recorded the return, and an unroutable message would
// be reported delivered.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ankusa/ankusa/internal/sink"
)

const (
	// defaultTimeout bounds one attempt when Options.Timeout is 0: the dial,
	// the publish and the wait for the confirm together.
	defaultTimeout = 5 * time.Second
	// maxInFlight caps concurrent publishes, and so open channels, per sink.
	maxInFlight = 16
	contentType = "application/json"
)

var _ sink.Sink = (*Sink)(nil)

// Sink publishes to one exchange with one routing key.
type Sink struct {
	cfg     Options
	log     *slog.Logger
	addr    string // host:port and vhost, never the credentials
	op      string // prefix of every error: names the exchange and routing key
	timeout time.Duration
	drop    sink.HeaderFilter // request headers left out of the message

	// slots holds a token per publish in flight (protocol rule 1).
	slots chan struct{}
	// dialMu makes one Deliver dial while the others wait for its result.
	dialMu sync.Mutex
	// wg tracks the publish workers and connection watchers Close waits for.
	wg sync.WaitGroup

	mu     sync.Mutex
	closed bool     // REQUIRES: mu held
	link   *link    // REQUIRES: mu held; nil until dialled
	idle   []*pubCh // REQUIRES: mu held; open channels with nothing in flight
}

// Options configures New. config validates the operator's settings; New
// checks only what it cannot work without.
type Options struct {
	// URL is amqp:// or amqps://, with the credentials. Required.
	URL string
	// Exchange is the existing exchange published to; "" is the default
	// exchange.
	Exchange string
	// RoutingKey routes every message. Required by config.
	RoutingKey string
	// Timeout bounds one attempt (dial, publish and confirm) on top of the
	// caller's ctx; 0 means 5s, negative is refused.
	Timeout time.Duration
	// DropHeaders are the request headers left out of the message (any
	// case); nil means sink.DefaultDropHeaders, an empty list drops none.
	DropHeaders []string
	// Logger receives connection events. Nil discards.
	Logger *slog.Logger
}

// New builds the sink. It does not dial: the first Deliver does. It fails
// only on options it cannot use (a URL that does not parse, a negative
// Timeout), with an error that never holds the URL's password.
func New(cfg Options) (*Sink, error) {
	log := cfg.Logger
	uri, err := amqp.ParseURI(cfg.URL)
	if err != nil {
		// url.Error repeats the URL, password included: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("rabbitmq sink: url: %v", err)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("rabbitmq sink: timeout %s is negative", cfg.Timeout)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sink{
		cfg:     cfg,
		addr:    fmt.Sprintf("%s vhost %q", net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)), uri.Vhost),
		op:      fmt.Sprintf("rabbitmq publish to exchange %q routing key %q", cfg.Exchange, cfg.RoutingKey),
		timeout: defaultTimeout,
		drop:    sink.NewHeaderFilter(cfg.DropHeaders),
		slots:   make(chan struct{}, maxInFlight),
	}
	if cfg.Timeout > 0 {
		s.timeout = cfg.Timeout
	}
	s.log = log.With("component", "sink.rabbitmq", "addr", s.addr, "exchange", cfg.Exchange, "routing_key", cfg.RoutingKey)
	return s, nil
}

// Deliver publishes m and returns nil only once the broker confirmed it and
// did not return it as unroutable.
//
// Errors: an unroutable message (ErrUnroutable), a nack (ErrNacked), a
// missing exchange (ErrNoExchange), a broker that blocks publishers
// (ErrBlocked), a dial or connection failure and the end of ctx are
// transient. An access refusal (AMQP 403, at login or on publish) and a
// message the broker refuses (406, e.g. over max_message_size) are
// sink.Permanent. Deliver returns promptly when ctx ends, even if a broker
// call is stuck; the publish then counts as failed and may still arrive.
func (s *Sink) Deliver(ctx context.Context, m *sink.Message) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", s.op, err)
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for a free channel: %w", s.op, ctx.Err())
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.slots
		return fmt.Errorf("%s: %w", s.op, ErrClosed)
	}
	s.wg.Add(1)
	s.mu.Unlock()

	// Encoded here: the worker may outlive Deliver and must not read m then.
	pub := publishing(m, s.drop)
	// The publish runs on its own goroutine so that a broker call that does
	// not take a ctx (a channel open, a write the broker's TCP flow control
	// holds back) cannot hold Deliver past ctx. The worker keeps its slot
	// until it returns, so stuck workers are bounded by maxInFlight.
	res := make(chan error, 1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.slots }()
		res <- s.publish(ctx, pub)
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		select {
		case err := <-res:
			return err
		default:
		}
		return fmt.Errorf("%s: %w", s.op, ctx.Err())
	}
}

// publish does one attempt on a channel of its own (protocol rules 1–3).
func (s *Sink) publish(ctx context.Context, pub amqp.Publishing) error {
	pc, err := s.take(ctx)
	if err != nil {
		return err
	}
	if reason := pc.link.blocked.Load(); reason != nil {
		s.release(pc)
		return fmt.Errorf("%s: %w: %s", s.op, ErrBlocked, *reason)
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, s.cfg.Exchange, s.cfg.RoutingKey,
		true, false, pub)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			s.release(pc) // ctx ended before anything was sent
			return fmt.Errorf("%s: %w", s.op, err)
		}
		s.discard(pc)
		if e := pc.closeReason(); e != nil {
			return s.brokerError(e)
		}
		return fmt.Errorf("%s: %w", s.op, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		s.discard(pc) // rule 3: the late confirm or return must not reach the next user
		return fmt.Errorf("%s: awaiting the confirm: %w", s.op, err)
	}
	if !acked {
		// The library nacks every pending confirm when the channel shuts
		// down, after it has handed the close reason to NotifyClose.
		if e := pc.closeReason(); e != nil {
			s.discard(pc)
			return s.brokerError(e)
		}
		if pc.ch.IsClosed() {
			s.discard(pc)
			return fmt.Errorf("%s: channel closed before the confirm", s.op)
		}
		s.release(pc)
		return fmt.Errorf("%s: %w", s.op, ErrNacked)
	}
	// Rule 2: any return for this message is already buffered.
	var ret *amqp.Return
	for drained := false; !drained; {
		select {
		case r, ok := <-pc.returns:
			if !ok {
				drained = true
			} else if r.MessageId == pub.MessageId {
				ret = &r
			} else {
				s.log.Warn("dropping a basic.return for another message", "message_id", r.MessageId)
			}
		default:
			drained = true
		}
	}
	s.release(pc)
	if ret != nil {
		return fmt.Errorf("%s: %w: %s (%d): no queue is bound to take it",
			s.op, ErrUnroutable, ret.ReplyText, ret.ReplyCode)
	}
	return nil
}

// publishing is m as an AMQP message.
func publishing(m *sink.Message, drop sink.HeaderFilter) amqp.Publishing {
	hs := sink.BrokerHeaders(m)
	headers := make(amqp.Table, len(hs))
	for _, h := range hs {
		headers[h.Key] = h.Value
	}
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  contentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID.String(),
		Timestamp:    m.ReceivedAt,
		Body:         sink.EncodeJSON(m, drop),
	}
}

// Close closes the connection, which closes every channel, and waits for
// the publish workers and watchers to end. Deliver is not called after
// Close; if it is, it fails with ErrClosed.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	l := s.link
	s.link, s.idle = nil, nil
	s.mu.Unlock()

	var err error
	if l != nil {
		if cerr := l.conn.CloseDeadline(time.Now().Add(s.timeout)); cerr != nil && !errors.Is(cerr, amqp.ErrClosed) {
			err = fmt.Errorf("rabbitmq sink: close: %w", cerr)
		}
	}
	s.wg.Wait()
	return err
}
