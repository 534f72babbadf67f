package memory_test

import (
	"testing"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
)

// TestLog_Contract runs the adapter contract suite with one directory shared
// by every subtest (nodes are per subtest), as a drill shares one directory
// between the nodes of a fleet.
func TestLog_Contract(t *testing.T) {
	dir := t.TempDir()
	intaketest.Run(t, func(t *testing.T, node string) intake.Intake {
		return open(t, dir, node)
	})
}
