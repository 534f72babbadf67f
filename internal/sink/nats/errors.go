package natssink

import (
	"context"
	"errors"
	"fmt"

	"github.com/ankusa/ankusa/internal/natsclient"
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
	switch {
	case natsclient.IsPermissionDenied(ctx, err):
		return sink.Permanent(fmt.Errorf("%s: %w", op, ErrPermissionDenied))
	case natsclient.IsMaxPayload(err):
		return sink.Permanent(fmt.Errorf("%s: message of %d bytes exceeds the server's max_payload of %d: %w",
			op, size, c.nc.MaxPayload(), err))
	case natsclient.IsStreamMsgTooLarge(err):
		return sink.Permanent(fmt.Errorf("%s: the stream refused a message of %d bytes: %w", op, size, err))
	case natsclient.IsBadHeader(err):
		return sink.Permanent(fmt.Errorf("%s: %w", op, err))
	case natsclient.IsNoResponders(err):
		return fmt.Errorf("%s: %w; Ankusa never creates streams (%w)", op, ErrNoStream, err)
	case natsclient.IsTimeout(err):
		return fmt.Errorf("%s: no PubAck in time: %w", op, err)
	case natsclient.IsDisconnected(err):
		return fmt.Errorf("%s: %w (%w)", op, ErrNotConnected, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
