//go:build !linux

package bench

import "time"

// processCPU, processUsage, hostBusy and childCPU are only measured on
// Linux.
func processCPU() (time.Duration, bool)           { return 0, false }
func hostBusy() (time.Duration, bool)             { return 0, false }
func childCPU(int) (time.Duration, bool)          { return 0, false }
func processUsage() (time.Duration, uint64, bool) { return 0, 0, false }
