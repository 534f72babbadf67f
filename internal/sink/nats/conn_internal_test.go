package natssink

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	got := redactURL("nats://user:hunter2@a:4222, nats://tok3n@b:4222,nats://c:4222,us3r:pa55@weird")
	for _, secret := range []string{"hunter2", "tok3n", "pa55", "user", "us3r"} {
		if strings.Contains(got, secret) {
			t.Errorf("redactURL kept %q: %s", secret, got)
		}
	}
	for _, host := range []string{"a:4222", "b:4222", "nats://c:4222"} {
		if !strings.Contains(got, host) {
			t.Errorf("redactURL lost %q: %s", host, got)
		}
	}
}

func TestReconnectDelay(t *testing.T) {
	for attempt := 0; attempt <= 100; attempt++ {
		full := reconnectMax
		if attempt >= 1 && attempt <= 16 {
			full = min(reconnectMax, reconnectBase<<(attempt-1))
		}
		for range 20 {
			d := reconnectDelay(attempt)
			if d < full/2 || d > full || d > reconnectMax || d <= 0 {
				t.Fatalf("reconnectDelay(%d) = %s, want in [%s, %s]", attempt, d, full/2, full)
			}
		}
	}
	if d := reconnectDelay(1); d > reconnectBase {
		t.Fatalf("first delay %s exceeds the base %s", d, reconnectBase)
	}
}
