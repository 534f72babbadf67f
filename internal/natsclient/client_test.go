package natsclient

import (
	"strings"
	"testing"
	"time"
)

func TestRedactURL(t *testing.T) {
	got := RedactURL("nats://user:hunter2@a:4222, nats://tok3n@b:4222,nats://c:4222,us3r:pa55@weird")
	for _, secret := range []string{"hunter2", "tok3n", "pa55", "user", "us3r"} {
		if strings.Contains(got, secret) {
			t.Errorf("RedactURL kept %q: %s", secret, got)
		}
	}
	for _, host := range []string{"a:4222", "b:4222", "nats://c:4222"} {
		if !strings.Contains(got, host) {
			t.Errorf("RedactURL lost %q: %s", host, got)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	for _, b := range []Backoff{
		{Base: 250 * time.Millisecond, Max: 10 * time.Second}, // the NATS sink's
		{Base: 100 * time.Millisecond, Max: 2 * time.Second},  // the JetStream intake's
	} {
		for attempt := 0; attempt <= 100; attempt++ {
			full := b.Max
			if attempt >= 1 && attempt <= 16 {
				full = min(b.Max, b.Base<<(attempt-1))
			}
			for range 20 {
				d := b.Delay(attempt)
				if d < full/2 || d > full || d > b.Max || d <= 0 {
					t.Fatalf("%+v.Delay(%d) = %s, want in [%s, %s]", b, attempt, d, full/2, full)
				}
			}
		}
		if d := b.Delay(1); d > b.Base {
			t.Fatalf("%+v: first delay %s exceeds the base %s", b, d, b.Base)
		}
	}
}
