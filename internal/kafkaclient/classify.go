package kafkaclient

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Kind is what a failed produce or metadata call to Kafka means, as far as
// the broker's answer says. It is the one classification of Kafka errors;
// the sink (internal/sink/kafka) and the intake (internal/intake/kafka)
// each map a Kind to their own package's error classes, and differ only
// where their callers must (see KindAuth and KindTopicRefused).
type Kind int

const (
	// KindTransient is everything not named below: NOT_ENOUGH_REPLICAS and
	// NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended: the outcome is unknown;
	// kgo reports it as ErrRecordRetries), LEADER_NOT_AVAILABLE,
	// NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT, network and dial errors,
	// a closed client and ctx ending. Both adapters retry it.
	KindTransient Kind = iota
	// KindThrottled is THROTTLING_QUOTA_EXCEEDED: retry after ThrottleDelay.
	KindThrottled
	// KindNoTopic is UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID: the
	// topic (or the partition) does not exist, and Ankusa never creates
	// topics. The sink reports it transient (an operator may be creating
	// it), the intake NotFound.
	KindNoTopic
	// KindRecordRefused: the record itself can never be accepted (too
	// large, malformed). Permanent in both adapters.
	KindRecordRefused
	// KindNotAuthorized: the principal may not write the topic (or, before
	// Kafka 3.0, IDEMPOTENT_WRITE on the cluster). Permanent in both.
	KindNotAuthorized
	// KindAuth: SASL authentication failed. The sink dead-letters
	// (Permanent: its dispatcher would only retry the same credentials),
	// the intake reports Unavailable: a failed login is the log's outage
	// for every hook, so the gate closes (503, the provider retries) and
	// the hooks complete once the credentials are fixed, without the
	// restart a Permanent (stuck) entry needs.
	KindAuth
	// KindTopicRefused: the topic's settings refuse the produce (a policy,
	// the message format, the compression, the timestamp type, an invalid
	// topic name or acks). Permanent for the sink and Unavailable for the
	// intake, for the same reasons as KindAuth: an operator's fix to the
	// topic then completes the intake's hooks live.
	KindTopicRefused
)

// ThrottleDelay is the retry delay of KindThrottled: Kafka names no delay of
// its own in the error.
const ThrottleDelay = time.Second

// kinds lists the broker answers that are not KindTransient.
var kinds = []struct {
	err  error
	kind Kind
}{
	{kerr.ThrottlingQuotaExceeded, KindThrottled},
	{kerr.UnknownTopicOrPartition, KindNoTopic},
	{kerr.UnknownTopicID, KindNoTopic},
	{kerr.MessageTooLarge, KindRecordRefused},    // also kgo's own check against ProducerBatchMaxBytes
	{kerr.RecordListTooLarge, KindRecordRefused}, // the batch exceeds the segment size
	{kerr.InvalidRecord, KindRecordRefused},
	{kerr.TopicAuthorizationFailed, KindNotAuthorized},
	{kerr.ClusterAuthorizationFailed, KindNotAuthorized}, // IDEMPOTENT_WRITE on CLUSTER, before Kafka 3.0
	{kerr.TransactionalIDAuthorizationFailed, KindNotAuthorized},
	{kerr.SaslAuthenticationFailed, KindAuth},
	{kerr.UnsupportedSaslMechanism, KindAuth},
	{kerr.IllegalSaslState, KindAuth},
	{kerr.InvalidTimestamp, KindTopicRefused},
	{kerr.InvalidTopicException, KindTopicRefused},
	{kerr.InvalidRequiredAcks, KindTopicRefused},
	{kerr.PolicyViolation, KindTopicRefused},
	{kerr.UnsupportedForMessageFormat, KindTopicRefused},
	{kerr.UnsupportedCompressionType, KindTopicRefused},
}

// Classify reads err, a failed client call (possibly wrapped).
func Classify(err error) Kind {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return KindTransient
}
