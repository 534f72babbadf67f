package kafka_test

import (
	"testing"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
)

// TestIntake_Contract runs the adapter contract suite on one kfake cluster
// (in-process, see helpers_test.go) shared by every subtest: each factory
// call opens an adapter for its node, unstamped, and stamps the partition
// AssignPartition chooses, as a node's first dual boot does. Nodes of one
// subtest may share a partition; Replay's node filter is what keeps them
// apart.
func TestIntake_Contract(t *testing.T) {
	c := newCluster(t)
	intaketest.Run(t, func(t *testing.T, node string) intake.Intake {
		return openAssigned(t, c, node)
	})
}
