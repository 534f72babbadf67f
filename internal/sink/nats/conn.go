package natssink

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/natsclient"
)

const (
	// reconnectBase and reconnectMax shape the reconnect backoff
	// (natsclient.Backoff).
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
	nc *nats.Conn
	js jetstream.JetStream
}

// dial connects to url and keeps a connection open until Close (see
// natsclient.Dial): a server that is down or refuses the credentials is not
// an error, only an unusable URL or option is.
func (s *Sink) dial(url string, auth []nats.Option) (*natsclient.Client[*conn], error) {
	return natsclient.Dial(natsclient.Config{
		URL: url, Name: connectionName, Auth: auth,
		Backoff:      natsclient.Backoff{Base: reconnectBase, Max: reconnectMax},
		PingInterval: pingInterval, MaxPingsOut: maxPingsOut, DrainTimeout: drainTimeout,
		Log: s.log, LogPrefix: "nats",
		Denials: s.denied, Subject: s.subject, DeniedMsg: "nats refused publish permission",
		OnConnect: s.checkMaxPayload,
	}, func(nc *nats.Conn) (*conn, error) {
		js, err := jetstream.New(nc)
		return &conn{nc: nc, js: js}, err
	})
}
