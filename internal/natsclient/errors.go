package natsclient

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errCodeStreamHeaderExceedsMax is the server's
// JSStreamHeaderExceedsMaximumErr, which nats.go names no constant for.
const errCodeStreamHeaderExceedsMax jetstream.ErrorCode = 10097

// ErrDenied is the cancel cause of an attempt ended by a permission denial
// (Denials.Watch).
var ErrDenied = errors.New("publish permission denied by the server")

// IsPermissionDenied reports whether the server refused a permission to the
// attempt under ctx that ended in err: a permissions violation the client
// returned, or one that arrived asynchronously and ended the attempt
// (ErrDenied, as ctx's cause or as err).
func IsPermissionDenied(ctx context.Context, err error) bool {
	return errors.Is(context.Cause(ctx), ErrDenied) || errors.Is(err, ErrDenied) ||
		errors.Is(err, nats.ErrPermissionViolation)
}

// IsMaxPayload reports a message over the server's max_payload.
func IsMaxPayload(err error) bool { return errors.Is(err, nats.ErrMaxPayload) }

// IsStreamMsgTooLarge reports a message the stream refused as over its
// max_msg_size (10054) or its header limit (10097).
func IsStreamMsgTooLarge(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum ||
		apiErr.ErrorCode == errCodeStreamHeaderExceedsMax)
}

// IsBadHeader reports a malformed message header.
func IsBadHeader(err error) bool { return errors.Is(err, nats.ErrBadHeaderMsg) }

// IsNoResponders reports a request nobody answered: for a publish, no
// stream captures the subject (or JetStream is off).
func IsNoResponders(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// IsTimeout reports a request whose answer (a PubAck) did not come in time.
func IsTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// IsDisconnected reports a client that is not connected: reconnecting,
// closed, draining, or without a server INFO yet.
func IsDisconnected(err error) bool {
	return errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrHeadersNotSupported) // no server INFO yet
}

// Denials turns the server's asynchronous "Permissions Violation for
// Publish to <subject>" into a prompt end of the attempts waiting for a
// PubAck that will never come.
type Denials struct {
	mu sync.Mutex
	ch chan struct{} // REQUIRES: mu held; closed and replaced on each denial
}

// NewDenials returns a Denials with no watcher.
func NewDenials() *Denials { return &Denials{ch: make(chan struct{})} }

// Observe reports whether err is a publish denial for subject, and if so
// wakes every watcher.
func (d *Denials) Observe(err error, subject string) bool {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	text := err.Error()
	if !strings.Contains(strings.ToLower(text), "publish to") || !strings.Contains(text, `"`+subject+`"`) {
		return false
	}
	d.mu.Lock()
	close(d.ch)
	d.ch = make(chan struct{})
	d.mu.Unlock()
	return true
}

// Watch returns ctx cancelled with cause ErrDenied when a denial arrives;
// stop releases the watcher and must be called.
func (d *Denials) Watch(ctx context.Context) (_ context.Context, stop func()) {
	d.mu.Lock()
	ch := d.ch
	d.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-ch:
			cancel(ErrDenied)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}
