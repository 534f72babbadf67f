package jetstream_test

import (
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/jetstream"
)

// TestIntake_Contract runs the adapter contract suite against an R3 stream
// on the three-server cluster, one stream shared by every subtest (node ids
// are per subtest), as the nodes of a fleet share one stream.
func TestIntake_Contract(t *testing.T) {
	c := sharedCluster(t)
	fleet := newFleet()
	cfg := c.CreateStream(t, streamConfig(fleet))
	intaketest.Run(t, func(t *testing.T, node string) intake.Intake {
		return open(t, jetstream.Options{
			URL:            c.URL(),
			Stream:         cfg.Name,
			Fleet:          fleet,
			Node:           node,
			MaxRecordBytes: 1 << 20,
			BackupMaxAge:   time.Hour,
			VerifyTopic:    true,
		})
	}, intaketest.Limits{MaxRecordBytes: 1 << 20})
}
