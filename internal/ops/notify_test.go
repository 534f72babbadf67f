package ops_test

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/ops"
)

// listenNotify is the systemd end of the protocol: a datagram socket.
func listenNotify(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readDatagram(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestNotifier_Notify(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"path", func(t *testing.T) string { return filepath.Join(t.TempDir(), "notify.sock") }},
		{"abstract", func(t *testing.T) string { return "@ankusa-test-" + strings.ReplaceAll(t.Name(), "/", "-") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			sock := listenNotify(t, addr)
			n := ops.NewNotifier(func(k string) (string, bool) {
				if k == "NOTIFY_SOCKET" {
					return addr, true
				}
				return "", false
			})
			if !n.Enabled() {
				t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
			}
			if err := n.Notify(ops.StateReady, "STATUS=serving"); err != nil {
				t.Fatal(err)
			}
			if got, want := readDatagram(t, sock), "READY=1\nSTATUS=serving\n"; got != want {
				t.Fatalf("datagram = %q, want %q", got, want)
			}
		})
	}
}

func TestNotifier_WithoutSocketDoesNothing(t *testing.T) {
	n := ops.NewNotifier(func(string) (string, bool) { return "", false })
	if n.Enabled() {
		t.Fatal("Enabled() = true without NOTIFY_SOCKET")
	}
	if err := n.Notify(ops.StateReady); err != nil {
		t.Fatalf("Notify without a socket = %v, want nil", err)
	}
}

func TestNotifier_Errors(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "missing.sock")
	n := ops.NewNotifier(func(string) (string, bool) { return gone, true })
	for _, tc := range []struct {
		name   string
		states []string
		want   string
	}{
		{"no state", nil, "no state"},
		{"not an assignment", []string{"READY"}, "malformed"},
		{"newline in value", []string{"STATUS=a\nREADY=1"}, "malformed"},
		{"socket missing", []string{ops.StateReady}, "dial " + gone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := n.Notify(tc.states...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Notify(%q) = %v, want an error containing %q", tc.states, err, tc.want)
			}
		})
	}
}
