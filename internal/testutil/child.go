package testutil

import "os/exec"

// DiesWithTest makes the process cmd starts die with the test binary that
// starts it: a test binary killed mid-run (a timeout, an interrupted make
// test) runs no cleanup, and a killed run once left two `ankusa serve`
// children of the fleet drill running for an hour and forty minutes
// (2026-12-07). On Linux the kernel sends the child SIGKILL when the OS
// thread that started it exits, which it does when the test binary exits
// (Go does not retire the threads of unlocked goroutines); elsewhere it
// does nothing. Call it before cmd.Start.
func DiesWithTest(cmd *exec.Cmd) { diesWithParent(cmd) }
