// Package ops holds the operator-facing logic the binary's thin commands
// call: `ankusa config check` (CheckConfig) and the systemd readiness
// protocol (Notifier). Tests call it directly, without exec.
package ops

import "time"

// DrainTimeout is the default of http.shutdown_timeout_ms, which bounds a
// clean stop of `ankusa serve`: in-flight requests
// get their answers, the queue's last fsync covers them, and with backups
// on a final backup is taken. A supervisor must wait longer than this
// before it kills the process (systemd TimeoutStopSec, Kubernetes
// terminationGracePeriodSeconds: both 30 s in deploy/, and test/deploy
// checks that they stay above DrainTimeout).
const DrainTimeout = 20 * time.Second
