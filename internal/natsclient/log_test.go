package natsclient

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ankusa/ankusa/internal/testutil"
)

// A token in the URL (nats://TOKEN@host) is a credential: the connect log
// line names the server without it. Against the NATS server on loopback,
// which has no auth configured and so accepts any token.
func TestConnectLogHidesURLToken(t *testing.T) {
	rec := testutil.NewLogRecorder()
	cl, err := Dial(Config{
		URL: "nats://tok3n-secret@127.0.0.1:4222", Name: "log-test",
		Backoff: Backoff{Base: 100 * time.Millisecond, Max: time.Second}, PingInterval: time.Second, MaxPingsOut: 2,
		Log: slog.New(rec), LogPrefix: "nats",
	}, func(nc *nats.Conn) (*nats.Conn, error) { return nc, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	testutil.Eventually(t, 10*time.Second, "connected line", func() bool { return len(rec.Matching("nats connected")) > 0 })
	for _, line := range rec.Matching("nats") {
		if strings.Contains(line, "tok3n-secret") {
			t.Fatalf("the log repeats the URL token: %s", line)
		}
	}
	if lines := rec.Matching("nats connected", "127.0.0.1:4222"); len(lines) == 0 {
		t.Fatalf("the connect line does not name the server: %v", rec.Matching("nats"))
	}
}
