package sim

import (
	"os"
	"runtime"
	"testing"
)

// TestMain runs the simulator on one P: with one thread running Go code
// the goroutines woken at one virtual instant run in a far more repeatable
// order, which is what makes a seed replay its trace. (select's random
// choice and map order remain; the trace is built to be insensitive to
// both wherever the real code's outcome is.)
func TestMain(m *testing.M) {
	runtime.GOMAXPROCS(1)
	os.Exit(m.Run())
}
