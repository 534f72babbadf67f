package natssink

import (
	"errors"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/config"
)

const (
	// connectTimeout bounds one TCP+handshake attempt, so New blocks at most
	// this long per URL when the server is unreachable.
	connectTimeout = 2 * time.Second
	// reconnectBase and reconnectMax shape the reconnect backoff: the delay
	// after the n-th full pass over the URLs is min(max, base·2^(n−1)),
	// jittered to [½, 1] of that. A disconnect starts again at n = 1.
	reconnectBase = 250 * time.Millisecond
	reconnectMax  = 10 * time.Second
	// pingInterval × maxPingsOut is how long a silently dead TCP connection
	// (a black-holed server) goes unnoticed; the client default is minutes.
	pingInterval = 20 * time.Second
	maxPingsOut  = 3
	// drainTimeout bounds Close.
	drainTimeout = 5 * time.Second
)

// conn is one client connection and its JetStream context.
type conn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	done chan struct{} // closed when the client reports the connection closed
}

// authOptions turns the configured credentials into client options; at
// most one method may be set.
func authOptions(cfg *config.NATSSink) ([]nats.Option, error) {
	var opts []nats.Option
	var methods []string
	if cfg.User != "" || cfg.Password != "" {
		if cfg.User == "" {
			return nil, errors.New("password set without user")
		}
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
		methods = append(methods, "user/password")
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
		methods = append(methods, "token")
	}
	if cfg.CredsFile != "" {
		// The client reads the file at every (re)connect, so a rotated file
		// is picked up; an unreadable one is refused here, at boot.
		if _, err := os.ReadFile(cfg.CredsFile); err != nil {
			return nil, errors.New("creds_file: " + err.Error())
		}
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
		methods = append(methods, "creds_file")
	}
	if cfg.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, errors.New("nkey_file: " + err.Error())
		}
		opts = append(opts, o)
		methods = append(methods, "nkey_file")
	}
	if len(methods) > 1 {
		return nil, errors.New("set at most one of user/password, token, creds_file, nkey_file; got " + strings.Join(methods, ", "))
	}
	return opts, nil
}

// dial connects to s.url. A server that is down or refuses the credentials
// is not an error: the client is returned reconnecting (RetryOnFailedConnect)
// and keeps trying forever. Only an unusable URL or option fails here.
func (s *Sink) dial() (*conn, error) {
	c := &conn{done: make(chan struct{})}
	opts := append([]nats.Option{
		nats.Name(connectionName),
		nats.Timeout(connectTimeout),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		// Without this the client gives up (closes) after the same auth
		// error twice; credentials are often fixed on the server side.
		nats.IgnoreAuthErrorAbort(),
		nats.CustomReconnectDelay(reconnectDelay),
		// No reconnect buffer: while disconnected a publish fails at once
		// (ErrNotConnected) instead of being parked in memory, invisible to
		// the dispatcher, and flushed after the attempt has been given up.
		nats.ReconnectBufSize(-1),
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		nats.DrainTimeout(drainTimeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.log.Warn("nats connection lost; reconnecting", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			s.log.Info("nats connection restored", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			s.log.Info("nats connected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if s.denied.observe(err, s.subject) {
				s.log.Error("nats refused publish permission", "error", err)
				return
			}
			s.log.Warn("nats async error", "error", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			close(c.done)
			s.lost(c)
		}),
	}, s.auth...)
	nc, err := nats.Connect(s.url, opts...)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.nc, c.js = nc, js
	return c, nil
}

// lost runs when the client closes c. With unlimited reconnects that
// happens on Close, or when the server ends the session with an error the
// client treats as fatal; in the second case a fresh connection replaces c,
// so the sink never stays dead.
func (s *Sink) lost(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.conn != c {
		return
	}
	s.log.Error("nats connection closed by the client library; dialling a new one")
	s.redialing.Add(1)
	go s.redial()
}

// redial replaces the closed connection. dial fails only for a bad URL or
// option, which New already accepted once, so the retry loop is a guard.
func (s *Sink) redial() {
	defer s.redialing.Done()
	for attempt := 1; ; attempt++ {
		c, err := s.dial()
		if err == nil {
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.nc.Close()
				return
			}
			s.conn = c
			s.mu.Unlock()
			return
		}
		s.log.Error("nats redial failed", "error", err)
		t := time.NewTimer(reconnectDelay(attempt))
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reconnectDelay is the wait after the attempt-th failed pass over the URLs.
func reconnectDelay(attempt int) time.Duration {
	d := reconnectMax
	if attempt >= 1 && attempt <= 16 {
		d = min(reconnectMax, reconnectBase<<(attempt-1))
	}
	return d/2 + rand.N(d/2+1)
}

// redactURL hides credentials in a (comma-separated) server URL list.
func redactURL(raw string) string {
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
