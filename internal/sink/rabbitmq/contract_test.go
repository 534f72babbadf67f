package rabbitmq_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/sinktest"
)

// TestSink_Contract runs the sink contract suite against the loopback
// broker (guest/guest on 5672; skipped when none listens), an exchange and
// a queue of its own per test, deleted at the end; the refusing target
// refuses the credentials (403 at login).
func TestSink_Contract(t *testing.T) {
	sinktest.Run(t, sinktest.Target{
		New: func(t *testing.T) sinktest.Instance {
			b := newBroker(t)
			ex, q, key := b.name("ex"), b.name("q"), "hooks"
			b.exchange(ex)
			b.queue(q, ex, key)
			return sinktest.Instance{
				Sink: newSink(t, brokerURL, ex, key),
				Received: func(t *testing.T, id uuid.UUID) sinktest.Received {
					t.Helper()
					// Deliver returned after the broker's confirm, so the
					// message is queued already. Take messages until the
					// hook's: an attempt whose ctx ended may have landed.
					for {
						d := b.get(q)
						if d.MessageId == id.String() {
							return sinktest.DecodeQueueMessage(t, d.Body)
						}
					}
				},
			}
		},
		Refusing: func(t *testing.T) sink.Sink {
			newBroker(t) // skip when there is no broker
			return newSink(t, "amqp://guest:wrong-password@"+brokerAddr+"/", "", "k")
		},
		Carries: sinktest.CarriesAll,
		DoesIO:  true,
	})
}
