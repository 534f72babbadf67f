package jetstream

import (
	"errors"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

const (
	// connectionName is how the intake connection appears in the server's
	// connz (the NATS sink's is "ankusa-sink").
	connectionName = "ankusa-intake"
	// connectTimeout bounds one TCP+handshake attempt, so Open blocks at
	// most this long per URL when a server is unreachable.
	connectTimeout = 2 * time.Second
	// reconnectBase and reconnectMax shape the reconnect backoff after each
	// full pass over the known servers: min(max, base·2^(n−1)), jittered to
	// [½, 1] of that. Shorter than the sink's: the intake gates acks.
	reconnectBase = 100 * time.Millisecond
	reconnectMax  = 2 * time.Second
	// pingInterval × maxPingsOut is how long a silently dead TCP connection
	// goes unnoticed (Ready stays true that long).
	pingInterval = 5 * time.Second
	maxPingsOut  = 2
	// asyncAckTimeout drops a PubAck future nobody waits for any more (its
	// PublishBatch gave up at its ctx deadline); it is above the largest
	// intake.publish_timeout_ms (60 s), so it never ends a live attempt.
	asyncAckTimeout = 90 * time.Second
	// maxAsyncPending bounds PubAck futures in flight on the connection; a
	// publish beyond it waits (up to its ctx deadline) for a free slot.
	maxAsyncPending = 1 << 16
	// defaultStallWait is that wait when ctx has no deadline.
	defaultStallWait = 5 * time.Second
)

// conn is one client connection and its JetStream context.
type conn struct {
	nc *nats.Conn
	js natsjs.JetStream
}

// authOptions turns the configured credentials into client options; at most
// one method may be set.
func authOptions(o Options) ([]nats.Option, error) {
	var opts []nats.Option
	var methods []string
	if o.User != "" || o.Password != "" {
		if o.User == "" {
			return nil, errors.New("password set without user")
		}
		opts = append(opts, nats.UserInfo(o.User, o.Password))
		methods = append(methods, "user/password")
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
		methods = append(methods, "token")
	}
	if o.CredsFile != "" {
		// The client reads the file at every (re)connect, so a rotated file
		// is picked up; an unreadable one is refused here, at boot.
		if _, err := os.ReadFile(o.CredsFile); err != nil {
			return nil, errors.New("creds_file: " + err.Error())
		}
		opts = append(opts, nats.UserCredentials(o.CredsFile))
		methods = append(methods, "creds_file")
	}
	if o.NKeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, errors.New("nkey_file: " + err.Error())
		}
		opts = append(opts, opt)
		methods = append(methods, "nkey_file")
	}
	if len(methods) > 1 {
		return nil, errors.New("set at most one of user/password, token, creds_file, nkey_file; got " + strings.Join(methods, ", "))
	}
	return opts, nil
}

// dial connects to in.url. A server that is down or refuses the credentials
// is not an error: the client is returned reconnecting (RetryOnFailedConnect)
// and keeps trying forever. Only an unusable URL or option fails here.
func (in *Intake) dial() (*conn, error) {
	c := &conn{}
	opts := append([]nats.Option{
		nats.Name(connectionName),
		nats.Timeout(connectTimeout),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.IgnoreAuthErrorAbort(),
		nats.CustomReconnectDelay(reconnectDelay),
		// No reconnect buffer: while disconnected a publish fails at once
		// instead of being parked in memory and sent after its attempt was
		// given up.
		nats.ReconnectBufSize(-1),
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				in.log.Warn("intake nats connection lost; reconnecting", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			in.log.Info("intake nats connection restored", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			in.log.Info("intake nats connected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if in.denied.observe(err, in.subject) {
				in.log.Error("nats refused the intake publish permission", "error", err)
				return
			}
			in.log.Warn("intake nats async error", "error", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { in.lost(c) }),
	}, in.auth...)
	nc, err := nats.Connect(in.url, opts...)
	if err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc,
		natsjs.WithPublishAsyncTimeout(asyncAckTimeout),
		natsjs.WithPublishAsyncMaxPending(maxAsyncPending))
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.nc, c.js = nc, js
	return c, nil
}

// lost runs when the client closes c. With unlimited reconnects that
// happens on Close, or when the server ends the session with an error the
// client treats as fatal; in the second case a fresh connection replaces c.
func (in *Intake) lost(c *conn) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || in.conn != c {
		return
	}
	in.log.Error("intake nats connection closed by the client library; dialling a new one")
	in.redialing.Add(1)
	go in.redial()
}

// redial replaces the closed connection. dial fails only for a bad URL or
// option, which Open already accepted once, so the retry loop is a guard.
func (in *Intake) redial() {
	defer in.redialing.Done()
	for attempt := 1; ; attempt++ {
		c, err := in.dial()
		if err == nil {
			in.mu.Lock()
			if in.closed {
				in.mu.Unlock()
				c.nc.Close()
				return
			}
			in.conn = c
			in.mu.Unlock()
			return
		}
		in.log.Error("intake nats redial failed", "error", err)
		t := time.NewTimer(reconnectDelay(attempt))
		select {
		case <-in.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reconnectDelay is the wait after the attempt-th failed pass over the
// servers.
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
