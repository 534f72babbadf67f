package ops

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// Notifier speaks systemd's readiness protocol (sd_notify(3)): one datagram
// of newline-separated KEY=VALUE assignments to the unix socket named by
// $NOTIFY_SOCKET. A unit with Type=notify counts as started only once
// READY=1 arrives, so `systemctl start` returns when the node serves (after
// boot recovery), not when the process forks.
//
// Rejected: the go-systemd library. The protocol is one sendto on a
// datagram socket; a dependency for it is not worth its weight.
//
// A Notifier built without $NOTIFY_SOCKET (not under systemd, or a unit of
// another type) does nothing, so the binary calls it unconditionally.
type Notifier struct {
	addr string // socket path, or "@name" for the abstract namespace; "" = off
}

// NewNotifier reads $NOTIFY_SOCKET through getenv (nil means os.LookupEnv).
func NewNotifier(getenv func(string) (string, bool)) *Notifier {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	addr, _ := getenv("NOTIFY_SOCKET")
	return &Notifier{addr: addr}
}

// Enabled reports whether a notify socket was given.
func (n *Notifier) Enabled() bool { return n.addr != "" }

// Readiness states sent by the binary.
const (
	StateReady    = "READY=1"
	StateStopping = "STOPPING=1"
)

// Notify sends the given assignments ("READY=1", "STATUS=…") in one
// datagram. It returns nil at once when no socket was given.
//
// Error contract: a socket that cannot be reached or written is returned
// wrapped; it is never fatal to the caller (the service still runs; under
// Type=notify systemd's start timeout then reports it).
func (n *Notifier) Notify(states ...string) error {
	if n.addr == "" {
		return nil
	}
	if len(states) == 0 {
		return errors.New("sd_notify: no state")
	}
	for _, s := range states {
		// A newline inside a value would start a new assignment.
		if !strings.Contains(s, "=") || strings.ContainsAny(s, "\n") {
			return fmt.Errorf("sd_notify: malformed state %q", s)
		}
	}
	// An address starting with '@' is in the abstract namespace; the net
	// package maps the '@' to the leading NUL byte itself.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: dial %s: %w", n.addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(states, "\n") + "\n")); err != nil {
		return fmt.Errorf("sd_notify: write %s: %w", n.addr, err)
	}
	return nil
}
