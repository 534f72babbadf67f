package jetstream

import (
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/natsclient"
)

const (
	// connectionName is how the intake connection appears in the server's
	// connz (the NATS sink's is "ankusa-sink").
	connectionName = "ankusa-intake"
	// reconnectBase and reconnectMax shape the reconnect backoff
	// (natsclient.Backoff). Shorter than the sink's: the intake gates acks.
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

// dial connects to url and keeps a connection open until Close (see
// natsclient.Dial): a server that is down or refuses the credentials is not
// an error, only an unusable URL or option is.
func (in *Intake) dial(url string, auth []nats.Option) (*natsclient.Client[*conn], error) {
	return natsclient.Dial(natsclient.Config{
		URL: url, Name: connectionName, Auth: auth, Log: in.log, LogPrefix: "intake nats",
		Backoff:      natsclient.Backoff{Base: reconnectBase, Max: reconnectMax},
		PingInterval: pingInterval, MaxPingsOut: maxPingsOut,
		Denials: in.denied, Subject: in.subject, DeniedMsg: "nats refused the intake publish permission",
	}, func(nc *nats.Conn) (*conn, error) {
		js, err := natsjs.New(nc,
			natsjs.WithPublishAsyncTimeout(asyncAckTimeout),
			natsjs.WithPublishAsyncMaxPending(maxAsyncPending))
		return &conn{nc: nc, js: js}, err
	})
}
