package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/natsclient"
)

// JetStream API error codes nats.go names no constant for (the server's
// errors.json).
const (
	errCodeClusterNotAvail       natsjs.ErrorCode = 10008 // JSClusterNotAvailErr: temporarily unavailable
	errCodeClusterNotLeader      natsjs.ErrorCode = 10009 // JSClusterNotLeaderErr
	errCodeInsufficientResources natsjs.ErrorCode = 10023 // JSInsufficientResourcesErr
	errCodeStreamNotMatch        natsjs.ErrorCode = 10060 // JSStreamNotMatchErr: Nats-Expected-Stream refused
	errCodeStreamStoreFailed     natsjs.ErrorCode = 10077 // JSStreamStoreFailedF (limits with discard new, I/O)
	errCodeStreamOffline         natsjs.ErrorCode = 10118 // JSStreamOfflineErr
)

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
	case natsclient.IsPermissionDenied(ctx, err):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("%s: %w", op, ErrPermissionDenied)}
	case natsclient.IsMaxPayload(err):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf(
			"%s: message of %d bytes exceeds the server's max_payload of %d: %w: %w", op, size, c.nc.MaxPayload(), ErrTooLarge, err)}
	case natsclient.IsStreamMsgTooLarge(err):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf(
			"%s: stream %s refused a message of %d bytes (max_msg_size): %w: %w", op, in.stream, size, ErrTooLarge, err)}
	case natsclient.IsBadHeader(err):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("%s: %w", op, err)}
	case natsclient.IsNoResponders(err):
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf(
			"%s: %w; Ankusa never creates streams (%w)", op, ErrNoStream, err)}
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamNotMatch:
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf(
			"%s: the subject is captured by a stream other than %s: %w", op, in.stream, err)}
	case natsclient.IsTimeout(err) || errors.Is(err, natsjs.ErrAsyncPublishTimeout):
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
	case natsclient.IsPermissionDenied(ctx, err):
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("%s: %w", op, ErrPermissionDenied)}
	case errors.Is(err, natsjs.ErrStreamNotFound):
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf(
			"%s: stream %s does not exist; Ankusa never creates streams (%w)", op, in.stream, err)}
	case errors.Is(err, natsjs.ErrJetStreamNotEnabled) || errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount):
		return &intake.Error{Class: intake.NotFound, Err: fmt.Errorf("%s: %w", op, err)}
	case natsclient.IsNoResponders(err):
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
// closed, draining, or without a server INFO yet), or one that has no server
// to connect to.
func isDisconnected(err error) bool {
	return natsclient.IsDisconnected(err) || errors.Is(err, nats.ErrNoServers)
}
