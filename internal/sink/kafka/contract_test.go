package kafka_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/sinktest"
)

// TestSink_Contract runs the sink contract suite against a kfake cluster
// per test; the refusing target answers MESSAGE_TOO_LARGE to the produce.
func TestSink_Contract(t *testing.T) {
	sinktest.Run(t, sinktest.Target{
		New: func(t *testing.T) sinktest.Instance {
			c := newCluster(t)
			return sinktest.Instance{
				Sink: newSink(t, sinkConfig(c)),
				Received: func(t *testing.T, id uuid.UUID) sinktest.Received {
					t.Helper()
					// Read the topic until the hook's record is there: an
					// attempt whose ctx ended may have landed too.
					for n := 1; ; n++ {
						for _, r := range consume(t, c, n) {
							for _, h := range r.Headers {
								if h.Key == "ankusa_id" && string(h.Value) == id.String() {
									return sinktest.DecodeQueueMessage(t, r.Value)
								}
							}
						}
					}
				},
			}
		},
		Refusing: func(t *testing.T) sink.Sink {
			c := newCluster(t)
			answerProduce(c, kerr.MessageTooLarge.Code)
			return newSink(t, sinkConfig(c))
		},
		Carries: sinktest.CarriesAll,
		DoesIO:  true,
	})
}
