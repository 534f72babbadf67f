package natssink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/sink"
)

var (
	// ErrNotConnected: the client is (re)connecting; transient.
	ErrNotConnected = errors.New("nats connection not ready")
	// ErrNoStream: nothing answered the publish, so no JetStream stream
	// captures the subject (or JetStream is off); transient, because the
	// operator can add the stream, and never a success.
	ErrNoStream = errors.New("no JetStream stream captures the subject")
	// ErrPermissionDenied: the server refused the publish for lack of
	// permission on the subject; permanent.
	ErrPermissionDenied = errors.New("publish permission violation")
)

// classify turns a PublishMsg error into the dispatcher's vocabulary. ctx
// is the attempt's context (its cause tells a permission denial from a
// timeout), size the payload length.
func (s *Sink) classify(ctx context.Context, c *conn, size int, err error) error {
	op := fmt.Sprintf("jetstream publish to %q", s.subject)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(context.Cause(ctx), errDenied) || errors.Is(err, nats.ErrPermissionViolation):
		return sink.Permanent(fmt.Errorf("%s: %w", op, ErrPermissionDenied))
	case errors.Is(err, nats.ErrMaxPayload):
		return sink.Permanent(fmt.Errorf("%s: message of %d bytes exceeds the server's max_payload of %d: %w",
			op, size, c.nc.MaxPayload(), err))
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum ||
		apiErr.ErrorCode == errCodeStreamHeaderExceedsMaximum):
		return sink.Permanent(fmt.Errorf("%s: the stream refused a message of %d bytes: %w", op, size, err))
	case errors.Is(err, nats.ErrBadHeaderMsg):
		return sink.Permanent(fmt.Errorf("%s: %w", op, err))
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%s: %w; Ankusa never creates streams (%w)", op, ErrNoStream, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%s: no PubAck in time: %w", op, err)
	case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrHeadersNotSupported): // no server INFO yet
		return fmt.Errorf("%s: %w (%w)", op, ErrNotConnected, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// errCodeStreamHeaderExceedsMaximum is the server's
// JSStreamHeaderExceedsMaximumErr, which nats.go names no constant for.
const errCodeStreamHeaderExceedsMaximum jetstream.ErrorCode = 10097

// errDenied is the cancel cause of an attempt ended by a permission denial.
var errDenied = errors.New("publish permission denied by the server")

// denials turns the server's asynchronous "Permissions Violation for
// Publish to <subject>" into a prompt end of the attempts waiting for a
// PubAck that will never come.
type denials struct {
	mu sync.Mutex
	ch chan struct{} // REQUIRES: mu held; closed and replaced on each denial
}

func newDenials() denials { return denials{ch: make(chan struct{})} }

// observe reports whether err is a publish denial for subject, and if so
// wakes every watcher.
func (d *denials) observe(err error, subject string) bool {
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

// watch returns ctx cancelled with cause errDenied when a denial arrives;
// stop releases the watcher and must be called.
func (d *denials) watch(ctx context.Context) (_ context.Context, stop func()) {
	d.mu.Lock()
	ch := d.ch
	d.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-ch:
			cancel(errDenied)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}
