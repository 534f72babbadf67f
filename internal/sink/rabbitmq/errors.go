package rabbitmq

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ankusa/ankusa/internal/sink"
)

// Errors a Deliver error may wrap (errors.Is). All of them are transient.
var (
	// ErrUnroutable: the broker returned the mandatory message because no
	// queue is bound for the routing key. Transient: a binding may appear,
	// and the dispatcher dead-letters once attempts run out.
	ErrUnroutable = errors.New("message unroutable")
	// ErrNacked: the broker refused the message with basic.nack.
	ErrNacked = errors.New("broker nacked the message")
	// ErrNoExchange: the exchange does not exist (channel closed with 404).
	ErrNoExchange = errors.New("exchange does not exist")
	// ErrBlocked: the broker blocks publishers (a memory or disk alarm).
	ErrBlocked = errors.New("broker blocks publishing")
	// ErrClosed: Deliver after Close.
	ErrClosed = errors.New("sink closed")
)

// brokerError classifies the reason the broker closed a channel or the
// connection during a publish.
func (s *Sink) brokerError(e *amqp.Error) error {
	switch e.Code {
	case amqp.NotFound:
		return fmt.Errorf("%s: %w (Ankusa never declares exchanges; broker: %s)", s.op, ErrNoExchange, e.Reason)
	case amqp.AccessRefused:
		return sink.Permanent(fmt.Errorf("%s: access refused: %w", s.op, e))
	case amqp.PreconditionFailed:
		// On basic.publish: a message over the broker's max_message_size.
		return sink.Permanent(fmt.Errorf("%s: broker refused the message: %w", s.op, e))
	}
	return fmt.Errorf("%s: channel closed: %w", s.op, e)
}

// dialError classifies a failed dial: refused credentials or vhost access
// (403) are permanent, anything else (refused, timed out, broker starting)
// is transient.
func (s *Sink) dialError(err error) error {
	err = fmt.Errorf("%s: connect to %s: %w", s.op, s.addr, err)
	var e *amqp.Error
	if errors.As(err, &e) && e.Code == amqp.AccessRefused {
		return sink.Permanent(err)
	}
	return err
}
