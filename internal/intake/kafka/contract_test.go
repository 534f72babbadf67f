package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
)

// TestIntake_Contract runs the adapter contract suite on one kfake cluster
// (in-process, see helpers_test.go) shared by every subtest: each factory
// call opens an adapter for its node, unstamped, and stamps the partition
// AssignPartition chooses, as a node's first dual boot does. Nodes of one
// subtest may share a partition; Replay's node filter is what keeps them
// apart. Every DescribeConfigs is answered with a topic configuration
// Verify accepts (kfake cannot report all of it; see
// answerDescribeConfigs).
func TestIntake_Contract(t *testing.T) {
	c := newCluster(t)
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return describeConfigs(kreq, goodConfigs()), nil, true
	})
	intaketest.Run(t, func(t *testing.T, node string) intake.Intake {
		return openAssigned(t, c, node)
	}, intaketest.Limits{MaxRecordBytes: kgoDefaultBatchMaxBytes})
}

// kgoDefaultBatchMaxBytes is the record batch cap of an adapter opened
// with MaxRecordBytes 0, as the contract's adapters are: kgo's
// ProducerBatchMaxBytes default.
const kgoDefaultBatchMaxBytes = 1_000_012
