package rabbitmq

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// link is one AMQP connection and what is known about it.
type link struct {
	conn *amqp.Connection
	// blocked is the broker's reason while it blocks publishers
	// (connection.blocked, a resource alarm), nil otherwise.
	blocked atomic.Pointer[string]
}

// pubCh is one channel in confirm mode with at most one publish in flight.
type pubCh struct {
	link    *link
	ch      *amqp.Channel
	returns chan amqp.Return // capacity 1: room for the one in-flight message's return
	closes  chan *amqp.Error // capacity 1: the broker's close reason
}

// closeReason is why the broker closed the channel, or nil if it did not
// (still open, or closed by us).
func (pc *pubCh) closeReason() *amqp.Error {
	select {
	case e, ok := <-pc.closes:
		if ok {
			return e
		}
	default:
	}
	return nil
}

// take returns a channel for one publish: an idle one, else a new one on the
// current connection, dialling first if there is none or it has closed.
func (s *Sink) take(ctx context.Context) (*pubCh, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", s.op, ErrClosed)
	}
	for len(s.idle) > 0 {
		pc := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if !pc.ch.IsClosed() {
			s.mu.Unlock()
			return pc, nil
		}
	}
	s.mu.Unlock()

	l, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := l.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%s: open channel: %w", s.op, err)
	}
	pc := &pubCh{
		link:    l,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	if err := ch.Confirm(false); err != nil {
		s.discard(pc)
		if e := pc.closeReason(); e != nil {
			return nil, s.brokerError(e)
		}
		return nil, fmt.Errorf("%s: enable confirms: %w", s.op, err)
	}
	return pc, nil
}

// release gives back a channel whose publish has been settled.
func (s *Sink) release(pc *pubCh) {
	s.mu.Lock()
	if !s.closed && s.link == pc.link && !pc.ch.IsClosed() && len(s.idle) < maxInFlight {
		s.idle = append(s.idle, pc)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.discard(pc)
}

// discard closes a channel that must not be reused. channel.close waits for
// the broker's close-ok, so it runs in the background.
func (s *Sink) discard(pc *pubCh) {
	if pc.ch.IsClosed() {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = pc.ch.Close()
	}()
}

// connect returns the open connection, dialling if there is none. One
// caller dials at a time; the others then find its connection.
func (s *Sink) connect(ctx context.Context) (*link, error) {
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	s.mu.Lock()
	l, closed := s.link, s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%s: %w", s.op, ErrClosed)
	}
	if l != nil && !l.conn.IsClosed() {
		return l, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.op, err)
	}

	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("ankusa sink")
	conn, err := amqp.DialConfig(s.cfg.URL, amqp.Config{
		Properties: props,
		// The TCP connect ends with ctx; TLS and the AMQP handshake with its
		// deadline (Deliver always sets one). The library clears the
		// deadline once the connection is open.
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if dl, ok := ctx.Deadline(); ok {
				if err := c.SetDeadline(dl); err != nil {
					_ = c.Close()
					return nil, err
				}
			}
			return c, nil
		},
	})
	if err != nil {
		return nil, s.dialError(err)
	}

	l = &link{conn: conn}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return nil, fmt.Errorf("%s: %w", s.op, ErrClosed)
	}
	s.link = l
	s.idle = nil // channels of an older connection are closed with it
	s.wg.Add(1)
	s.mu.Unlock()
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go s.watch(l, closes, blocks)
	s.log.Info("connected")
	return l, nil
}

// watch follows one connection until it closes: it logs the loss and keeps
// the blocked state. It always drains both notifications, since the library
// waits on a full listener before it reads the next frame.
func (s *Sink) watch(l *link, closes <-chan *amqp.Error, blocks <-chan amqp.Blocking) {
	defer s.wg.Done()
	for {
		select {
		case b, ok := <-blocks:
			switch {
			case !ok:
				blocks = nil
			case b.Active:
				reason := b.Reason
				l.blocked.Store(&reason)
				s.log.Warn("broker blocks publishing", "reason", reason)
			default:
				l.blocked.Store(nil)
				s.log.Info("broker unblocked publishing")
			}
		case e, ok := <-closes:
			if !ok {
				return
			}
			if e != nil {
				s.log.Warn("connection lost; the next delivery redials", "err", e)
			}
		}
	}
}
