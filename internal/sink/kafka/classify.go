package kafka

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ankusa/ankusa/internal/sink"
)

// throttleDelay is the Retry delay for THROTTLING_QUOTA_EXCEEDED; Kafka
// names no delay of its own in the error.
const throttleDelay = time.Second

// permanentErrs are the broker answers a retry of the same record with the
// same config cannot fix: the record itself is refused (size, format), or
// the principal may not write (authorization, SASL). Each dead-letters at
// once; a replay after the fix delivers it.
var permanentErrs = []error{
	kerr.MessageTooLarge,    // also kgo's own check against ProducerBatchMaxBytes
	kerr.RecordListTooLarge, // the batch exceeds the segment size
	kerr.InvalidRecord,
	kerr.InvalidTimestamp,
	kerr.InvalidTopicException,
	kerr.InvalidRequiredAcks,
	kerr.PolicyViolation,
	kerr.UnsupportedForMessageFormat,
	kerr.UnsupportedCompressionType,
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.SaslAuthenticationFailed,
	kerr.UnsupportedSaslMechanism,
	kerr.IllegalSaslState,
}

// classify wraps a failed produce to topic for the dispatcher. Unlisted
// errors are transient: the NOT_ENOUGH_REPLICAS family, leader elections
// (LEADER_NOT_AVAILABLE, NOT_LEADER_FOR_PARTITION), REQUEST_TIMED_OUT,
// network and dial errors, and ctx ending.
func classify(topic string, err error) error {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		// Transient, not permanent: the topic may be being provisioned,
		// and dead-lettering every hook while it is would be worse than
		// letting the breaker park them. Retries run out to the DLQ if
		// nobody creates it.
		return fmt.Errorf("kafka topic %q does not exist; Ankusa never creates topics: %w", topic, err)
	case errors.Is(err, kerr.ThrottlingQuotaExceeded):
		return sink.Retry(fmt.Errorf("kafka produce to %q: %w", topic, err), throttleDelay)
	}
	for _, p := range permanentErrs {
		if errors.Is(err, p) {
			return sink.Permanent(fmt.Errorf("kafka produce to %q: %w", topic, err))
		}
	}
	return fmt.Errorf("kafka produce to %q: %w", topic, err)
}
