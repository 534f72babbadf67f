package app

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
)

// startDiskForTest runs a wal.type: disk instance with config.Default()'s
// demo source on loopback ports; mut adjusts the config first.
func startDiskForTest(t *testing.T, mut func(c *config.Config)) *Instance {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = t.TempDir()
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	if mut != nil {
		mut(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config is invalid: %v", err)
	}
	in := startForTest(t, cfg)
	return in
}

// closedWithin reads c until the server closes it; it fails the test if
// that takes longer than limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s", limit)
	}
}

// The admin server closes a connection that sends its headers too slowly,
// and a keep-alive connection left idle.
func TestAdmin_SlowAndIdleConnectionsAreClosed(t *testing.T) {
	in := startDiskForTest(t, func(c *config.Config) {
		c.Admin.ReadTimeoutMs, c.Admin.IdleTimeoutMs = 300, 1_000
	})
	slow, err := net.Dial("tcp", in.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "GET /health HTTP/1.1\r\nHost: x\r\n"); err != nil { // never finishes
		t.Fatal(err)
	}
	closedWithin(t, slow, 5*time.Second)

	idle, err := net.Dial("tcp", in.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := idle.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		t.Fatalf("health answer %q, %v", buf[:n], err)
	}
	start := time.Now()
	closedWithin(t, idle, 5*time.Second)
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("idle connection closed after %s, before admin.idle_timeout_ms", d)
	}
}

func TestConnCaps(t *testing.T) {
	tests := []struct {
		limit                        uint64
		reserve, maxConns, adminMax  int
		wantIngest, wantAdmin, wantR int
	}{
		{1_048_576, 1_024, 10_000, 256, 10_000, 256, 1_024},
		{20_000, 1_024, 100_000, 256, 18_720, 256, 1_024},
		{2_048, 1_024, 10_000, 256, 922, 102, 1_024},
		{1_024, 1_024, 10_000, 256, 461, 51, 512},
	}
	for _, tt := range tests {
		i, a, r := connCaps(tt.limit, tt.reserve, tt.maxConns, tt.adminMax)
		if i != tt.wantIngest || a != tt.wantAdmin || r != tt.wantR {
			t.Errorf("connCaps(%d, %d, %d, %d) = %d, %d, %d; want %d, %d, %d", tt.limit, tt.reserve, tt.maxConns, tt.adminMax,
				i, a, r, tt.wantIngest, tt.wantAdmin, tt.wantR)
		}
	}
}
