package kafka

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ankusa/ankusa/internal/intake"
)

// throttleDelay is the RetryAfter of THROTTLING_QUOTA_EXCEEDED; Kafka names
// no delay of its own in the error.
const throttleDelay = time.Second

// permanentErrs are the broker answers no retry of the same records with
// the same config can fix: the record is refused (size, format) or the
// principal may not write. The reconciler marks such an entry stuck at once
// (and keeps it); an operator's fix and a restart complete it.
var permanentErrs = []error{
	kerr.MessageTooLarge,    // also kgo's own check against ProducerBatchMaxBytes
	kerr.RecordListTooLarge, // the batch exceeds the segment size
	kerr.InvalidRecord,
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed, // IDEMPOTENT_WRITE on CLUSTER, before Kafka 3.0
}

// classify wraps err, a failed call named by what ("produce", "verify", …)
// on topic, into an *intake.Error of its class. An error that already is an
// *intake.Error is returned as it is. Unavailable is everything not named
// above: NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended:
// the outcome is unknown and the republish resolves it; kgo reports it as
// ErrRecordRetries), LEADER_NOT_AVAILABLE, NOT_LEADER_FOR_PARTITION,
// REQUEST_TIMED_OUT, network and dial errors, a closed client and ctx
// ending (the safe assumption: retry, never drop).
func classify(what, topic string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*intake.Error](err); ok {
		return err
	}
	switch {
	case errors.Is(err, kerr.ThrottlingQuotaExceeded):
		return &intake.Error{Class: intake.Throttled, RetryAfter: throttleDelay,
			Err: fmt.Errorf("kafka intake %s on topic %q: %w", what, topic, err)}
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return &intake.Error{Class: intake.NotFound,
			Err: fmt.Errorf("kafka intake %s: topic %q (or the partition) does not exist; Ankusa never creates topics: %w", what, topic, err)}
	}
	for _, p := range permanentErrs {
		if errors.Is(err, p) {
			return &intake.Error{Class: intake.Permanent, Err: fmt.Errorf("kafka intake %s on topic %q: %w", what, topic, err)}
		}
	}
	return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("kafka intake %s on topic %q: %w", what, topic, err)}
}
