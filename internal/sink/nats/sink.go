// Package natssink publishes each hook's message JSON to a JetStream stream
// that the operator created, and reports the broker's answer to the
// dispatcher as a classified error.
//
// Delivery protocol, per attempt:
//
//  1. The message is sink.EncodeJSON(m) on the configured subject with every
//     sink.BrokerHeaders(m) header and Nats-Msg-Id = the hook id, so the
//     stream's duplicate window absorbs a redelivery of the same hook (a
//     retry after a lost PubAck, a second dispatcher after a crash).
//  2. Deliver returns nil only after a PubAck from the stream. A plain NATS
//     publish is never used: it "succeeds" with no stream listening.
//  3. No responders means no stream captures the subject. That is an error
//     (ErrNoStream), never a success. Ankusa never creates or edits a
//     stream: retention, replicas and limits are the operator's.
//
// The connection is dialled in New, and a server that is down (or refuses
// the credentials) does not fail New: the client keeps reconnecting in the
// background, forever, with capped exponential backoff, and Deliver returns
// ErrNotConnected (transient) meanwhile. New blocks at most for one connect
// attempt per URL (natsclient.ConnectTimeout). Rejected design: dialling
// lazily on the first Deliver, which would make the first hook pay the dial
// and hide a bad URL until traffic arrives.
package natssink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/natsclient"
	"github.com/ankusa/ankusa/internal/sink"
)

// defaultTimeout bounds one attempt when Options.Timeout is 0.
const defaultTimeout = 5 * time.Second

// connectionName is how Ankusa's sink connections appear in the server's
// connz.
const connectionName = "ankusa-sink"

// Sink publishes to one JetStream subject.
type Sink struct {
	subject string
	timeout time.Duration
	drop    sink.HeaderFilter // request headers left out of the message
	log     *slog.Logger
	denied  *natsclient.Denials
	client  *natsclient.Client[*conn]
	maxBody int64 // the largest body the edge accepts; 0: not checked
}

var _ sink.Sink = (*Sink)(nil)

// Options configures New. config validates the operator's settings; New
// checks only what it cannot work without.
type Options struct {
	// URL is the server URL, or a comma-separated list. Required.
	URL string
	// Subject is published to; an operator-created stream must capture it.
	// Required.
	Subject string
	// Timeout bounds one attempt on top of the caller's ctx; 0 means 5s.
	Timeout time.Duration

	// At most one credential method: User/Password, Token, CredsFile or
	// NKeyFile (a seed file).
	User      string
	Password  string
	Token     string
	CredsFile string
	NKeyFile  string

	// DropHeaders are the request headers left out of the message (any
	// case); nil means sink.DefaultDropHeaders, an empty list drops none.
	DropHeaders []string
	// MaxBody is the largest body the edge accepts (http.max_body_bytes):
	// whenever the sink connects it warns if the server's max_payload
	// cannot carry such a body (see MessageBytes); 0 skips the check.
	MaxBody int64
	// Logger receives connection events. Nil discards.
	Logger *slog.Logger
}

// New validates the options, builds the sink and dials the server. It fails only
// for options it can never use (no URL or subject, conflicting or
// unreadable credentials), with an error naming the setting; a down server
// is not one of them.
func New(cfg Options) (*Sink, error) {
	log, maxBody := cfg.Logger, cfg.MaxBody
	if cfg.URL == "" {
		return nil, errors.New("nats sink: url is required")
	}
	if cfg.Subject == "" {
		return nil, errors.New("nats sink: subject is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	auth, err := natsclient.AuthOptions(natsclient.Auth{User: cfg.User, Password: cfg.Password,
		Token: cfg.Token, CredsFile: cfg.CredsFile, NKeyFile: cfg.NKeyFile})
	if err != nil {
		return nil, fmt.Errorf("nats sink: %w", err)
	}
	s := &Sink{
		subject: cfg.Subject,
		timeout: defaultTimeout,
		drop:    sink.NewHeaderFilter(cfg.DropHeaders),
		log:     log.With("component", "sink", "sink_type", "nats", "subject", cfg.Subject),
		denied:  natsclient.NewDenials(),
		maxBody: maxBody,
	}
	if cfg.Timeout > 0 {
		s.timeout = cfg.Timeout
	}
	if s.client, err = s.dial(cfg.URL, auth); err != nil {
		return nil, fmt.Errorf("nats sink: connect %s: %w", natsclient.RedactURL(cfg.URL), err)
	}
	c := s.current()
	if st := c.nc.Status(); st != nats.CONNECTED {
		s.log.Warn("nats server not reachable at start (down, or refusing the credentials); reconnecting in the background",
			"url", natsclient.RedactURL(cfg.URL), "status", st.String(), "error", c.nc.LastError())
	}
	return s, nil
}

// Deliver publishes m and waits for the stream's PubAck, within ctx and the
// sink's Options.Timeout, whichever ends first.
//
// Errors: Permanent for a publish permission violation, a message over the
// server's max_payload or the stream's max_msg_size, and a header the stream
// refuses; everything else is transient: ErrNotConnected while the client
// reconnects, ErrNoStream when no stream captures the subject, and the
// context's error when the PubAck does not arrive in time.
func (s *Sink) Deliver(ctx context.Context, m *sink.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jetstream publish to %q: %w", s.subject, err)
	}
	c := s.current()
	if c == nil {
		return fmt.Errorf("jetstream publish to %q: %w (sink closed)", s.subject, ErrNotConnected)
	}
	if st := c.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("jetstream publish to %q: %w (%s)", s.subject, ErrNotConnected, st)
	}

	msg := nats.NewMsg(s.subject)
	msg.Data = sink.EncodeJSON(m, s.drop)
	for _, h := range sink.BrokerHeaders(m) {
		msg.Header.Set(h.Key, h.Value)
	}
	msg.Header.Set(jetstream.MsgIDHeader, m.ID.String())

	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// A publish permission violation reaches the client only as an
	// asynchronous -ERR; without this watch the attempt would wait out its
	// whole deadline and be mistaken for a transient timeout.
	ctx, stopWatch := s.denied.Watch(ctx)
	defer stopWatch()

	ack, err := c.js.PublishMsg(ctx, msg)
	if err != nil {
		return s.classify(ctx, c, len(msg.Data), err)
	}
	if ack.Duplicate {
		s.log.Debug("duplicate absorbed by the stream", "id", m.ID.String(), "stream", ack.Stream, "seq", ack.Sequence)
	}
	return nil
}

// Close drains the connection (it carries no subscriptions of Ankusa's,
// so this flushes what was written) and waits for it to close, at most
// drainTimeout plus a grace. A redial in progress is stopped first.
func (s *Sink) Close() error {
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("nats sink: %w", err)
	}
	return nil
}

// current is the live connection, nil after Close.
func (s *Sink) current() *conn {
	c, _ := s.client.Current()
	return c
}

// envelopeAllowance is what MessageBytes adds to the base64 body for the
// rest of a message: the JSON fields (about 400 bytes), the broker headers
// and Nats-Msg-Id (about 300, up to 500 with a 200-byte dedupe key) and a
// typical provider's request headers. A request with several KiB of headers
// needs more; see docs/delivery.md.
const envelopeAllowance = 2048

// MessageBytes is how large the message for a body of n bytes gets, by the
// arithmetic docs/delivery.md states: base64 turns every 3 bytes (or part)
// into 4, then the envelope adds envelopeAllowance.
func MessageBytes(n int64) int64 { return 4*((n+2)/3) + envelopeAllowance }

// MaxBodyFor is the largest body whose message (MessageBytes) fits in a
// server's max_payload: the inverse of MessageBytes, 0 if none fits.
func MaxBodyFor(maxPayload int64) int64 {
	room := maxPayload - envelopeAllowance
	if room < 4 {
		return 0
	}
	return room / 4 * 3
}

// checkMaxPayload warns when the server just reached cannot carry the
// largest body the edge accepts: such a hook would be acked to the provider
// and then dead-lettered by this sink (a permanent error). It is a warning,
// not a refusal: most hooks are small, and max_payload is the server
// operator's to raise.
func (s *Sink) checkMaxPayload(nc *nats.Conn) {
	if s.maxBody <= 0 {
		return
	}
	mp := nc.MaxPayload()
	if need := MessageBytes(s.maxBody); need > mp {
		s.log.Warn("nats max_payload cannot carry the largest accepted body: larger hooks will be dead-lettered by this sink; raise max_payload on the server or lower http.max_body_bytes",
			"max_payload", mp, "http_max_body_bytes", s.maxBody, "message_bytes_needed", need,
			"largest_body_carried", MaxBodyFor(mp))
	}
}
