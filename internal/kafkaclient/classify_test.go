package kafkaclient

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClassify: the one table both Kafka adapters read. Each broker answer
// lands in its kind also when wrapped (kgo wraps UNKNOWN_TOPIC_OR_PARTITION
// in its "no partitions available" error); anything unlisted is transient.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Kind
	}{
		{kerr.NotEnoughReplicas, KindTransient},
		{kerr.NotEnoughReplicasAfterAppend, KindTransient},
		{kerr.LeaderNotAvailable, KindTransient},
		{kerr.RequestTimedOut, KindTransient},
		{context.DeadlineExceeded, KindTransient},
		{io.EOF, KindTransient},
		{kgo.ErrClientClosed, KindTransient},
		{kerr.ThrottlingQuotaExceeded, KindThrottled},
		{kerr.UnknownTopicOrPartition, KindNoTopic},
		{fmt.Errorf("no partitions available after attempting to refresh metadata 1 times, last err: %w", kerr.UnknownTopicOrPartition), KindNoTopic},
		{kerr.UnknownTopicID, KindNoTopic},
		{kerr.MessageTooLarge, KindRecordRefused},
		{kerr.RecordListTooLarge, KindRecordRefused},
		{kerr.InvalidRecord, KindRecordRefused},
		{kerr.TopicAuthorizationFailed, KindNotAuthorized},
		{kerr.ClusterAuthorizationFailed, KindNotAuthorized},
		{kerr.TransactionalIDAuthorizationFailed, KindNotAuthorized},
		{kerr.SaslAuthenticationFailed, KindAuth},
		{kerr.UnsupportedSaslMechanism, KindAuth},
		{kerr.IllegalSaslState, KindAuth},
		{kerr.PolicyViolation, KindTopicRefused},
		{kerr.InvalidTimestamp, KindTopicRefused},
		{kerr.InvalidTopicException, KindTopicRefused},
		{kerr.InvalidRequiredAcks, KindTopicRefused},
		{kerr.UnsupportedForMessageFormat, KindTopicRefused},
		{kerr.UnsupportedCompressionType, KindTopicRefused},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify = %d, want %d", got, tc.want)
			}
			if got := Classify(fmt.Errorf("produce: %w", tc.err)); got != tc.want {
				t.Errorf("Classify of the wrapped error = %d, want %d", got, tc.want)
			}
		})
	}
}
