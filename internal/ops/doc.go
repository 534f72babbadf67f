// Package ops holds the operator-facing logic the binary's thin commands
// call: `ankusa config check` (CheckConfig) and the systemd readiness
// protocol (Notifier). Tests call it directly, without exec.
package ops
