package jetstream_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/jetstream"
)

// collapsedBySuite is the contract case that JetStream's duplicate window
// contradicts: it expects a republish of the same (node, seq) to be stored
// a second time at a later position, while Nats-Msg-Id = <node>:<seq> makes
// the stream store it once and confirm it at the original's position (ADR
// section 6). TestIntake_DuplicateWindowCollapsesRepublish checks what this
// adapter does instead. The factory skips the case until the suite accepts
// either outcome.
const collapsedBySuite = "/DuplicatePublishIsReplayedTwice"

// TestIntake_Contract runs the adapter contract suite against an R3 stream
// on the three-server cluster, one stream shared by every subtest (node ids
// are per subtest), as the nodes of a fleet share one stream.
func TestIntake_Contract(t *testing.T) {
	c := sharedCluster(t)
	fleet := newFleet()
	cfg := c.createStream(t, streamConfig(fleet))
	intaketest.Run(t, func(t *testing.T, node string) intake.Intake {
		if strings.HasSuffix(t.Name(), collapsedBySuite) {
			t.Skip("JetStream collapses a republish within the duplicate window (stored once, confirmed at the " +
				"original's position); see TestIntake_DuplicateWindowCollapsesRepublish")
		}
		return open(t, jetstream.Options{
			URL:            c.URL(),
			Stream:         cfg.Name,
			Fleet:          fleet,
			Node:           node,
			MaxRecordBytes: 1 << 20,
			BackupMaxAge:   time.Hour,
			VerifyTopic:    true,
		})
	})
}
