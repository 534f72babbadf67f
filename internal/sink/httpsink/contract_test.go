package httpsink_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/httpsink"
	"github.com/ankusa/ankusa/internal/sink/sinktest"
)

// TestSink_Contract runs the sink contract suite against an httptest
// receiver per test; the refusing target answers 400.
func TestSink_Contract(t *testing.T) {
	sinktest.Run(t, sinktest.Target{
		New: func(t *testing.T) sinktest.Instance {
			srv, ch := receiver(t, http.StatusOK, nil)
			return sinktest.Instance{
				Sink: newSink(t, httpsink.Options{URL: srv.URL}),
				Received: func(t *testing.T, id uuid.UUID) sinktest.Received {
					t.Helper()
					return receivedHook(t, ch, id)
				},
			}
		},
		Refusing: func(t *testing.T) sink.Sink {
			srv, _ := receiver(t, http.StatusBadRequest, nil)
			return newSink(t, httpsink.Options{URL: srv.URL})
		},
		Carries: sinktest.CarriesBody | sinktest.CarriesIdempotencyKey,
		DoesIO:  true,
	})
}

// receivedHook takes requests from ch until one carries hook id.
func receivedHook(t *testing.T, ch <-chan received, id uuid.UUID) sinktest.Received {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case r := <-ch:
			if r.header.Get("X-Ankusa-Id") != id.String() {
				continue
			}
			return sinktest.Received{ID: r.header.Get("X-Ankusa-Id"),
				IdempotencyKey: r.header.Get("X-Ankusa-Idempotency-Key"), Body: r.body}
		case <-timer.C:
			t.Fatalf("the receiver got no request for hook %s", id)
			return sinktest.Received{}
		}
	}
}
