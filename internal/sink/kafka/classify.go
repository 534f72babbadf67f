package kafka

import (
	"fmt"

	"github.com/ankusa/ankusa/internal/kafkaclient"
	"github.com/ankusa/ankusa/internal/sink"
)

// classify wraps a failed produce to topic for the dispatcher, from the one
// Kafka classification (kafkaclient.Classify):
//
//   - KindNoTopic is transient, not permanent: the topic may be being
//     provisioned, and dead-lettering every hook while it is would be worse
//     than letting the breaker park them. Retries run out to the DLQ if
//     nobody creates it.
//   - KindThrottled is sink.Retry after kafkaclient.ThrottleDelay.
//   - KindRecordRefused, KindNotAuthorized, KindAuth and KindTopicRefused
//     are sink.Permanent: a retry of the same record with the same config
//     cannot fix them, so the row dead-letters at once and a replay after
//     the fix delivers it. (The intake maps KindAuth and KindTopicRefused
//     to Unavailable instead; kafkaclient.Kind says why.)
//   - KindTransient (leader elections, NOT_ENOUGH_REPLICAS, timeouts,
//     network errors, ctx ending) is an unwrapped, transient error.
func classify(topic string, err error) error {
	switch kafkaclient.Classify(err) {
	case kafkaclient.KindNoTopic:
		return fmt.Errorf("kafka topic %q does not exist; Ankusa never creates topics: %w", topic, err)
	case kafkaclient.KindThrottled:
		return sink.Retry(fmt.Errorf("kafka produce to %q: %w", topic, err), kafkaclient.ThrottleDelay)
	case kafkaclient.KindRecordRefused, kafkaclient.KindNotAuthorized, kafkaclient.KindAuth, kafkaclient.KindTopicRefused:
		return sink.Permanent(fmt.Errorf("kafka produce to %q: %w", topic, err))
	}
	return fmt.Errorf("kafka produce to %q: %w", topic, err)
}
