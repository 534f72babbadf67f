package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake"
)

// JetStream API error codes nats.go names no constant for (the server's
// errors.json).
const (
	errCodeClusterNotAvail        natsjs.ErrorCode = 10008 // JSClusterNotAvailErr: temporarily unavailable
	errCodeClusterNotLeader       natsjs.ErrorCode = 10009 // JSClusterNotLeaderErr
	errCodeInsufficientResources  natsjs.ErrorCode = 10023 // JSInsufficientResourcesErr
	errCodeStreamNotMatch         natsjs.ErrorCode = 10060 // JSStreamNotMatchErr: Nats-Expected-Stream refused
	errCodeStreamStoreFailed      natsjs.ErrorCode = 10077 // JSStreamStoreFailedF (limits with discard new, I/O)
	errCodeStreamHeaderExceedsMax natsjs.ErrorCode = 10097 // JSStreamHeaderExceedsMaximumErr
	errCodeStreamOffline          natsjs.ErrorCode = 10118 // JSStreamOfflineErr
)

// errDenied is the cancel cause of an attempt ended by a permission denial.
var errDenied = errors.New("publish permission denied by the server")

// classify turns a publish error into an intake class. ctx is the attempt's
// context (its cause tells a permission denial from a timeout), size the
// message's size (0 if not known).
//
//	Permanent:   a permission violation; a message over the server's
//	             max_payload or the stream's max_msg_size (10054) or header
//	             limit (10097); a malformed header.
//	NotFound:    no responders (no stream captures the subject, or JetStream
//	             is off); stream not found (10059); the subject is captured
//	             by another stream than Options.Stream (10060); JetStream not
//	             enabled (10076, 10039).
//	Unavailable: everything else, including a missed PubAck (ctx deadline, an
//	             async ack timeout), a disconnected or closed client, and the
//	             cluster's "temporarily unavailable" (10008), "not leader"
//	             (10009), "insufficient resources" (10023), "store failed"
//	             (10077, e.g. a full stream with discard new) and "stream
//	             offline" (10118). A lost quorum shows up as a missed PubAck.
//
// There is no Throttled: JetStream does not ask a publisher to slow down.
func (in *Intake) classify(ctx context.Context, c *conn, size int, err error) error {
	op := fmt.Sprintf("jetstream publish to %q", in.subject)
	var apiErr *natsjs.APIError
	switch {
	case errors.Is(context.Cause(ctx), errDenied) || errors.Is(err, errDenied) || errors.Is(err, nats.ErrPermissionViolation):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("%s: %w", op, ErrPermissionDenied)}
	case errors.Is(err, nats.ErrMaxPayload):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf(
			"%s: message of %d bytes exceeds the server's max_payload of %d: %w: %w", op, size, c.nc.MaxPayload(), ErrTooLarge, err)}
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == natsjs.JSErrCodeStreamMessageExceedsMaximum ||
		apiErr.ErrorCode == errCodeStreamHeaderExceedsMax):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf(
			"%s: stream %s refused a message of %d bytes (max_msg_size): %w: %w", op, in.stream, size, ErrTooLarge, err)}
	case errors.Is(err, nats.ErrBadHeaderMsg):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("%s: %w", op, err)}
	case errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf(
			"%s: %w; Ankusa never creates streams (%w)", op, ErrNoStream, err)}
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamNotMatch:
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf(
			"%s: the subject is captured by a stream other than %s: %w", op, in.stream, err)}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, natsjs.ErrAsyncPublishTimeout):
		return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf(
			"%s: no PubAck in time (no quorum, leader moving or server slow): %w", op, err)}
	case isDisconnected(err):
		return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("%s: %w (%w)", op, ErrNotConnected, err)}
	}
	return in.classifyAPI(ctx, op, err)
}

// classifyAPI classifies the error of a JetStream API request (stream info,
// message get, consumer create) or what classify leaves: NotFound for a
// missing stream or JetStream, Unavailable for the rest.
func (in *Intake) classifyAPI(ctx context.Context, op string, err error) error {
	var apiErr *natsjs.APIError
	switch {
	case errors.Is(context.Cause(ctx), errDenied) || errors.Is(err, nats.ErrPermissionViolation):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("%s: %w", op, ErrPermissionDenied)}
	case errors.Is(err, natsjs.ErrStreamNotFound):
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf(
			"%s: stream %s does not exist; Ankusa never creates streams (%w)", op, in.stream, err)}
	case errors.Is(err, natsjs.ErrJetStreamNotEnabled) || errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount):
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf("%s: %w", op, err)}
	case errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		// An API request nobody answered: JetStream is not reachable from
		// this account; the API itself, not a stream, is missing.
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf("%s: no JetStream API answered: %w", op, err)}
	case isDisconnected(err):
		return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("%s: %w (%w)", op, ErrNotConnected, err)}
	case errors.As(err, &apiErr):
		switch apiErr.ErrorCode {
		case errCodeClusterNotAvail, errCodeClusterNotLeader, errCodeInsufficientResources,
			errCodeStreamStoreFailed, errCodeStreamOffline:
			return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("%s: the cluster cannot serve it now: %w", op, err)}
		}
	}
	return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("%s: %w", op, err)}
}

// isDisconnected reports a client that is not connected (reconnecting,
// closed, draining, or without a server INFO yet).
func isDisconnected(err error) bool {
	return errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, natsjs.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrHeadersNotSupported) || errors.Is(err, nats.ErrNoServers)
}

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
