package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/kafka"
)

func TestClassifyError(t *testing.T) {
	const (
		transient = iota
		permanent
		retry
		missing // transient, saying the topic does not exist
	)
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{kerr.NotEnoughReplicas, transient},
		{kerr.NotEnoughReplicasAfterAppend, transient},
		{kerr.LeaderNotAvailable, transient},
		{kerr.NotLeaderForPartition, transient},
		{kerr.RequestTimedOut, transient},
		{kerr.BrokerNotAvailable, transient},
		{kerr.NetworkException, transient},
		{kerr.KafkaStorageError, transient},
		{kerr.CorruptMessage, transient},
		{kerr.UnknownServerError, transient},
		{context.DeadlineExceeded, transient},
		{context.Canceled, transient},
		{dial, transient},
		{io.EOF, transient},
		{kgo.ErrRecordTimeout, transient},
		{kgo.ErrRecordRetries, transient},
		{kgo.ErrClientClosed, transient},

		{kerr.UnknownTopicOrPartition, missing},
		{kerr.UnknownTopicID, missing},
		// kgo's wording when metadata never lists the topic.
		{fmt.Errorf("no partitions available after attempting to refresh metadata 1 times, last err: %w", kerr.UnknownTopicOrPartition), missing},

		{kerr.ThrottlingQuotaExceeded, retry},

		{kerr.MessageTooLarge, permanent},
		// kgo's wording for a record over its batch cap.
		{fmt.Errorf("%w (uncompressed_bytes=%d)", kerr.MessageTooLarge, 2<<20), permanent},
		{kerr.RecordListTooLarge, permanent},
		{kerr.InvalidRecord, permanent},
		{kerr.InvalidTimestamp, permanent},
		{kerr.InvalidTopicException, permanent},
		{kerr.InvalidRequiredAcks, permanent},
		{kerr.PolicyViolation, permanent},
		{kerr.UnsupportedForMessageFormat, permanent},
		{kerr.UnsupportedCompressionType, permanent},
		{kerr.TopicAuthorizationFailed, permanent},
		{kerr.ClusterAuthorizationFailed, permanent},
		{kerr.TransactionalIDAuthorizationFailed, permanent},
		{kerr.SaslAuthenticationFailed, permanent},
		{fmt.Errorf("sasl: %w: invalid credentials", kerr.SaslAuthenticationFailed), permanent},
		{kerr.UnsupportedSaslMechanism, permanent},
		{kerr.IllegalSaslState, permanent},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			got := kafka.ClassifyError("orders", tc.err)
			if !errors.Is(got, tc.err) {
				t.Errorf("%v does not wrap %v", got, tc.err)
			}
			if !strings.Contains(got.Error(), `"orders"`) {
				t.Errorf("%q does not name the topic", got)
			}
			perm, after := sink.Classify(got)
			switch tc.want {
			case transient, missing:
				if perm || after != 0 {
					t.Errorf("Classify(%v) = %t, %s; want transient", got, perm, after)
				}
			case permanent:
				if !perm {
					t.Errorf("Classify(%v) = transient, want permanent", got)
				}
			case retry:
				if perm || after != time.Second {
					t.Errorf("Classify(%v) = %t, %s; want retry after 1s", got, perm, after)
				}
			}
			if says := strings.Contains(got.Error(), "never creates topics"); says != (tc.want == missing) {
				t.Errorf("%q: says the topic is missing = %t", got, says)
			}
		})
	}
}
