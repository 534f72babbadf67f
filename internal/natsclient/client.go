// Package natsclient holds what the NATS sink (internal/sink/nats) and the
// JetStream intake (internal/intake/jetstream) build their connections from:
// the connection options and the redial that keeps one connection alive, the
// credentials' options, URL redaction, and the recognition of the client's
// and the server's error conditions. How a condition is classified stays
// with each adapter (sink.Permanent or transient for the sink, intake
// classes for the intake). Each adapter has a connection of its own; sharing
// this package keeps the intake from depending on a sink package. Like the
// two adapters, it may import nats.go; nothing else in the tree does.
package natsclient

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectTimeout bounds one TCP+handshake attempt, so Dial blocks at most
// this long per URL when a server is unreachable.
const ConnectTimeout = 2 * time.Second

// Backoff shapes the reconnect backoff: the delay after the n-th full pass
// over the known servers is min(Max, Base·2^(n−1)), jittered to [½, 1] of
// that. A disconnect starts again at n = 1.
type Backoff struct{ Base, Max time.Duration }

// Delay is the wait after the attempt-th failed pass over the servers.
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Max
	if attempt >= 1 && attempt <= 16 {
		d = min(b.Max, b.Base<<(attempt-1))
	}
	return d/2 + rand.N(d/2+1)
}

// Config is what Dial needs.
type Config struct {
	// URL is the server URL, or a comma-separated list.
	URL string
	// Name is how the connection appears in the server's connz.
	Name string
	// Auth is the credentials' options (AuthOptions).
	Auth []nats.Option
	// Backoff is the reconnect backoff, also the wait between redials.
	Backoff Backoff
	// PingInterval × MaxPingsOut is how long a silently dead TCP connection
	// goes unnoticed.
	PingInterval time.Duration
	MaxPingsOut  int
	// DrainTimeout > 0 makes Close drain the connection, for at most that
	// long; 0 makes Close close it at once.
	DrainTimeout time.Duration
	// Log receives the connection events; LogPrefix ("nats", "intake nats")
	// starts each message.
	Log       *slog.Logger
	LogPrefix string
	// Denials, if set, is told of each asynchronous error: a publish denial
	// on Subject wakes its watchers and is logged as DeniedMsg; any other
	// asynchronous error is logged as a warning.
	Denials   *Denials
	Subject   string
	DeniedMsg string
	// OnConnect, if set, is called (on the client library's callback
	// goroutine) each time a connection is established or re-established,
	// so an adapter can check what the server it reached allows.
	OnConnect func(*nats.Conn)
}

// Client keeps one connection open: Dial dials it and, when the client
// library closes it (with unlimited reconnects that happens only when the
// server ends the session with an error the client treats as fatal), a
// fresh one replaces it, until Close. C is the caller's view of one
// connection (its JetStream context, say), built by Dial's open for each.
type Client[C any] struct {
	cfg  Config
	open func(*nats.Conn) (C, error)

	mu        sync.Mutex
	conn      *conn[C]      // REQUIRES: mu held; replaced when the client gives up on it
	closed    bool          // REQUIRES: mu held
	stop      chan struct{} // closed by Close: ends a redial
	redialing sync.WaitGroup
}

// conn is one client connection and the caller's view of it.
type conn[C any] struct {
	nc   *nats.Conn
	view C
	done chan struct{} // closed when the client reports the connection closed
}

// Dial connects to cfg.URL, and open builds the caller's view of the
// connection (its result is dropped when it fails). A server that is down
// or refuses the credentials is not an error: the client is returned
// reconnecting (RetryOnFailedConnect) and keeps trying forever. Only an
// unusable URL or option, or an open that fails, fails here.
func Dial[C any](cfg Config, open func(*nats.Conn) (C, error)) (*Client[C], error) {
	cl := &Client[C]{cfg: cfg, open: open, stop: make(chan struct{})}
	c, err := cl.dial()
	if err != nil {
		return nil, err
	}
	cl.conn = c
	return cl, nil
}

// Current returns the live connection's view; ok is false once Close has
// been called.
func (cl *Client[C]) Current() (view C, ok bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return view, false
	}
	return cl.conn.view, true
}

// Close stops a redial in progress, then closes the connection; with a
// DrainTimeout it drains it first (it carries no subscriptions of Ankusa's,
// so this flushes what was written) and waits for it to close, at most
// DrainTimeout plus a grace. It is idempotent.
func (cl *Client[C]) Close() error {
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return nil
	}
	cl.closed = true
	close(cl.stop)
	cl.mu.Unlock()
	cl.redialing.Wait()

	cl.mu.Lock()
	c := cl.conn
	cl.mu.Unlock()
	if cl.cfg.DrainTimeout <= 0 {
		c.nc.Close()
		return nil
	}
	if err := c.nc.Drain(); err != nil {
		// Reconnecting or already closed: Drain has closed it (or it was).
		c.nc.Close()
	}
	t := time.NewTimer(cl.cfg.DrainTimeout + time.Second)
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case <-t.C:
		c.nc.Close()
		return fmt.Errorf("drain did not finish within %s", cl.cfg.DrainTimeout)
	}
}

// dial connects to cfg.URL (see Dial).
func (cl *Client[C]) dial() (*conn[C], error) {
	cfg := &cl.cfg
	c := &conn[C]{done: make(chan struct{})}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(ConnectTimeout),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		// Without this the client gives up (closes) after the same auth
		// error twice; credentials are often fixed on the server side.
		nats.IgnoreAuthErrorAbort(),
		nats.CustomReconnectDelay(cfg.Backoff.Delay),
		// No reconnect buffer: while disconnected a publish fails at once
		// (the adapters' ErrNotConnected) instead of being parked in memory,
		// invisible to the caller, and flushed after its attempt has been
		// given up.
		nats.ReconnectBufSize(-1),
		nats.PingInterval(cfg.PingInterval),
		nats.MaxPingsOutstanding(cfg.MaxPingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				cfg.Log.Warn(cfg.LogPrefix+" connection lost; reconnecting", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			cfg.Log.Info(cfg.LogPrefix+" connection restored", "server", RedactURL(nc.ConnectedUrl()))
			if cfg.OnConnect != nil {
				cfg.OnConnect(nc)
			}
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			// Not ConnectedUrlRedacted: it hides a password only, and a
			// token in the URL's user part is the credential itself.
			cfg.Log.Info(cfg.LogPrefix+" connected", "server", RedactURL(nc.ConnectedUrl()))
			if cfg.OnConnect != nil {
				cfg.OnConnect(nc)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if cfg.Denials != nil && cfg.Denials.Observe(err, cfg.Subject) {
				cfg.Log.Error(cfg.DeniedMsg, "error", err)
				return
			}
			cfg.Log.Warn(cfg.LogPrefix+" async error", "error", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			close(c.done)
			cl.lost(c)
		}),
	}
	if cfg.DrainTimeout > 0 {
		opts = append(opts, nats.DrainTimeout(cfg.DrainTimeout))
	}
	nc, err := nats.Connect(cfg.URL, append(opts, cfg.Auth...)...)
	if err != nil {
		return nil, err
	}
	view, err := cl.open(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.nc, c.view = nc, view
	return c, nil
}

// lost runs when the client closes c. With unlimited reconnects that
// happens on Close, or when the server ends the session with an error the
// client treats as fatal; in the second case a fresh connection replaces c,
// so the caller never stays without one.
func (cl *Client[C]) lost(c *conn[C]) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed || cl.conn != c {
		return
	}
	cl.cfg.Log.Error(cl.cfg.LogPrefix + " connection closed by the client library; dialling a new one")
	cl.redialing.Add(1)
	go cl.redial()
}

// redial replaces the closed connection. dial fails only for a bad URL or
// option, which Dial already accepted once, so the retry loop is a guard.
func (cl *Client[C]) redial() {
	defer cl.redialing.Done()
	for attempt := 1; ; attempt++ {
		c, err := cl.dial()
		if err == nil {
			cl.mu.Lock()
			if cl.closed {
				cl.mu.Unlock()
				c.nc.Close()
				return
			}
			cl.conn = c
			cl.mu.Unlock()
			return
		}
		cl.cfg.Log.Error(cl.cfg.LogPrefix+" redial failed", "error", err)
		t := time.NewTimer(cl.cfg.Backoff.Delay(attempt))
		select {
		case <-cl.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// RedactURL hides credentials in a (comma-separated) server URL list.
func RedactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if strings.Contains(p, "@") {
				parts[i] = "[REDACTED]"
			}
			continue
		}
		u.User = nil
		parts[i] = strings.Replace(u.String(), "://", "://[REDACTED]@", 1)
	}
	return strings.Join(parts, ",")
}
