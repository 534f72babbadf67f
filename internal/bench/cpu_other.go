//go:build !linux

package bench

import "time"

// processCPU, hostBusy, childCPU and processFaults are only measured on
// Linux.
func processCPU() (time.Duration, bool)  { return 0, false }
func hostBusy() (time.Duration, bool)    { return 0, false }
func childCPU(int) (time.Duration, bool) { return 0, false }
func processFaults() (uint64, bool)      { return 0, false }
