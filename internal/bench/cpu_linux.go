//go:build linux

package bench

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// processCPU is the user+system CPU time this process has used.
func processCPU() (time.Duration, bool) {
	cpu, _, ok := processUsage()
	return cpu, ok
}

// processUsage is processCPU and how many page faults (minor and major)
// this process has taken, from one getrusage: a first touch of fresh
// memory costs one fault each, so a window with many is not the steady
// state.
func processUsage() (cpu time.Duration, faults uint64, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), uint64(ru.Minflt + ru.Majflt), true
}

// hostBusy is the CPU time every CPU of the host has spent not idle (steal
// included: it is time this guest wanted and did not get), from /proc/stat.
func hostBusy() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, false
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice]:
	// guest time is already counted in user.
	var busy int64
	for i := 1; i <= 8; i++ {
		v, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil {
			return 0, false
		}
		if i == 4 || i == 5 { // idle, iowait
			continue
		}
		busy += v
	}
	const userHZ = 100 // USER_HZ is 100 on every Linux ABI Go supports
	return time.Duration(busy) * (time.Second / userHZ), true
}

// childCPU is the user+system CPU time process pid has used, from fields
// 14 and 15 (utime, stime, in clock ticks) of /proc/<pid>/stat; false
// for pid <= 0 or when unreadable.
func childCPU(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields after its closing one.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so utime (14) is f[11] and stime (15) f[12].
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const userHZ = 100
	return time.Duration(ut+st) * (time.Second / userHZ), true
}
