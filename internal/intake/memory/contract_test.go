package memory_test

import (
	"testing"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/memory"
)

// TestLog_Contract runs the adapter contract suite with one directory shared
// by every subtest (nodes are per subtest), as a drill shares one directory
// between the nodes of a fleet. The records are capped at 1 MiB (the
// default is 64 MiB) so the oversize case stays cheap.
func TestLog_Contract(t *testing.T) {
	dir := t.TempDir()
	const maxRecord = 1 << 20
	intaketest.Run(t, func(t *testing.T, node string) intake.Intake {
		l, err := memory.Open(memory.Options{Dir: dir, Node: node, MaxRecordBytes: maxRecord, Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("open %s in %s: %v", node, dir, err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}, intaketest.Limits{MaxRecordBytes: maxRecord})
}
