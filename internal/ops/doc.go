// Package ops holds the operator-facing logic the binary's thin commands
// call: the systemd readiness protocol (Notifier). Tests call it directly,
// without exec. (`ankusa config check` lives in cmd/ankusa: it is the
// config load itself, and config is imported only by cmd, app and admin.)
package ops
