package kafka

import (
	"errors"
	"fmt"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/kafkaclient"
)

// classify wraps err, a failed call named by what ("produce", "verify", …)
// on topic, into an *intake.Error of its class, from the one Kafka
// classification (kafkaclient.Classify). An error that already is an
// *intake.Error is returned as it is.
//
//   - KindThrottled is Throttled, RetryAfter kafkaclient.ThrottleDelay.
//   - KindNoTopic is NotFound.
//   - KindRecordRefused and KindNotAuthorized are Permanent: no retry of the
//     same records with the same config can fix them. The reconciler marks
//     such an entry stuck at once (and keeps it); an operator's fix and a
//     restart complete it.
//   - KindAuth, KindTopicRefused and KindTransient are Unavailable (the
//     safe assumption: retry, never drop). The sink maps the first two to
//     Permanent; kafkaclient.Kind says why the intake does not.
func classify(what, topic string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*intake.Error](err); ok {
		return err
	}
	switch kafkaclient.Classify(err) {
	case kafkaclient.KindThrottled:
		return &intake.Error{Class: intake.Throttled, RetryAfter: kafkaclient.ThrottleDelay,
			Err: fmt.Errorf("kafka intake %s on topic %q: %w", what, topic, err)}
	case kafkaclient.KindNoTopic:
		return &intake.Error{Class: intake.NotFound,
			Err: fmt.Errorf("kafka intake %s: topic %q (or the partition) does not exist; Ankusa never creates topics: %w", what, topic, err)}
	case kafkaclient.KindRecordRefused:
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("kafka intake %s on topic %q: %w (%w)", what, topic, err, intake.ErrRecordRefused)}
	case kafkaclient.KindNotAuthorized:
		return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("kafka intake %s on topic %q: %w", what, topic, err)}
	}
	return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("kafka intake %s on topic %q: %w", what, topic, err)}
}
