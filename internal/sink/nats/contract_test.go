package natssink_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/sink"
	natssink "github.com/ankusa/ankusa/internal/sink/nats"
	"github.com/ankusa/ankusa/internal/sink/sinktest"
)

// TestSink_Contract runs the sink contract suite against the machine's
// JetStream server (skipped when none listens), a stream of its own per
// test, deleted at the end; the refusing target is a stream whose
// max_msg_size no message fits.
func TestSink_Contract(t *testing.T) {
	sinktest.Run(t, sinktest.Target{
		New: func(t *testing.T) sinktest.Instance {
			url, js := liveJetStream(t)
			st := createStream(t, js, nil)
			return sinktest.Instance{
				Sink: newSink(t, natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0]}),
				Received: func(t *testing.T, id uuid.UUID) sinktest.Received {
					t.Helper()
					return streamHook(t, st, id)
				},
			}
		},
		Refusing: func(t *testing.T) sink.Sink {
			url, js := liveJetStream(t)
			st := createStream(t, js, func(c *jetstream.StreamConfig) { c.MaxMsgSize = 64 })
			return newSink(t, natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0]})
		},
		Carries: sinktest.CarriesAll,
		DoesIO:  true,
	})
}

// streamHook finds hook id's message in st. Deliver returned after the
// PubAck, so the message is stored already: no waiting.
func streamHook(t *testing.T, st jetstream.Stream, id uuid.UUID) sinktest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		if m.Header.Get("ankusa_id") == id.String() {
			return sinktest.DecodeQueueMessage(t, m.Data)
		}
	}
	t.Fatalf("stream %s holds no message of hook %s", info.Config.Name, id)
	return sinktest.Received{}
}
