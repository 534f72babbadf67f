package natssink_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/sink"
	natssink "github.com/ankusa/ankusa/internal/sink/nats"
	"github.com/ankusa/ankusa/internal/testutil"
)

// These tests run against the machine's NATS server (JetStream enabled);
// each creates its own stream and deletes it at the end.

func TestSink_Deliver(t *testing.T) {
	url, js := liveJetStream(t)

	t.Run("stored with message JSON and headers", func(t *testing.T) {
		st := createStream(t, js, nil)
		subject := st.CachedInfo().Config.Subjects[0]
		s := newSink(t, natssink.Options{URL: url, Subject: subject})
		m := newMessage(nil)
		if err := deliver(s, m, 5*time.Second); err != nil {
			t.Fatalf("Deliver: %v", err)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatalf("ordered consumer: %v", err)
		}
		got, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if got.Subject() != subject {
			t.Errorf("subject = %q, want %q", got.Subject(), subject)
		}

		var body struct {
			V              int     `json:"v"`
			ID             string  `json:"id"`
			SourceID       string  `json:"source_id"`
			TenantID       string  `json:"tenant_id"`
			IdempotencyKey string  `json:"idempotency_key"`
			DedupeKey      *string `json:"dedupe_key"`
			ReplayID       *string `json:"replay_id"`
			BodyBase64     string  `json:"body_base64"`
		}
		if err := json.Unmarshal(got.Data(), &body); err != nil {
			t.Fatalf("message JSON: %v\n%s", err, got.Data())
		}
		if want := sink.EncodeJSON(m, sink.NewHeaderFilter(nil)); !bytes.Equal(got.Data(), want) {
			t.Errorf("payload is not sink.EncodeJSON(m):\n got %s\nwant %s", got.Data(), want)
		}
		raw, err := base64.StdEncoding.DecodeString(body.BodyBase64)
		if err != nil {
			t.Fatalf("body_base64: %v", err)
		}
		for _, c := range []struct{ name, got, want string }{
			{"id", body.ID, m.ID.String()},
			{"source_id", body.SourceID, m.Source},
			{"tenant_id", body.TenantID, m.Tenant},
			{"idempotency_key", body.IdempotencyKey, "acme:stripe:evt_123"},
			{"body", string(raw), string(m.Body)},
		} {
			if c.got != c.want {
				t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
			}
		}
		if body.V != sink.MessageVersion {
			t.Errorf("v = %d, want %d", body.V, sink.MessageVersion)
		}
		if body.DedupeKey == nil || *body.DedupeKey != m.DedupeKey || body.ReplayID == nil || *body.ReplayID != m.ReplayID {
			t.Errorf("dedupe_key/replay_id = %v/%v, want %q/%q", body.DedupeKey, body.ReplayID, m.DedupeKey, m.ReplayID)
		}

		h := got.Headers()
		if v := h.Get(jetstream.MsgIDHeader); v != m.ID.String() {
			t.Errorf("%s = %q, want the hook id %q", jetstream.MsgIDHeader, v, m.ID)
		}
		want := sink.BrokerHeaders(m)
		if len(want) != 8 {
			t.Fatalf("test message should carry all 8 broker headers, has %d", len(want))
		}
		for _, bh := range want {
			if v := h.Values(bh.Key); len(v) != 1 || v[0] != bh.Value {
				t.Errorf("header %s = %q, want [%q]", bh.Key, v, bh.Value)
			}
		}
	})

	t.Run("redelivery absorbed by the duplicate window", func(t *testing.T) {
		st := createStream(t, js, nil)
		s := newSink(t, natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0]})
		m := newMessage(nil)
		for i := range 2 {
			if err := deliver(s, m, 5*time.Second); err != nil {
				t.Fatalf("Deliver #%d: %v", i+1, err)
			}
		}
		other := newMessage(nil) // same body, new id: not a duplicate
		if err := deliver(s, other, 5*time.Second); err != nil {
			t.Fatalf("Deliver other: %v", err)
		}
		if n := streamMsgs(t, st); n != 2 {
			t.Fatalf("stream holds %d messages, want 2 (one per hook id)", n)
		}
	})

	t.Run("no stream captures the subject", func(t *testing.T) {
		subject := uniqueName() + ".nostream"
		s := newSink(t, natssink.Options{URL: url, Subject: subject})
		err := deliver(s, newMessage(nil), 5*time.Second)
		assertTransient(t, err)
		if !errors.Is(err, natssink.ErrNoStream) {
			t.Errorf("error %q is not ErrNoStream", err)
		}
		for _, want := range []string{subject, "no JetStream stream captures", "never creates streams"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	})

	t.Run("expired context", func(t *testing.T) {
		st := createStream(t, js, nil)
		s := newSink(t, natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0]})
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		start := time.Now()
		err := s.Deliver(ctx, newMessage(nil))
		if d := time.Since(start); d > time.Second {
			t.Errorf("Deliver took %s with an expired context", d)
		}
		assertTransient(t, err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %q is not context.DeadlineExceeded", err)
		}
		if n := streamMsgs(t, st); n != 0 {
			t.Errorf("stream holds %d messages, want 0", n)
		}
	})

	t.Run("over the stream's max_msg_size", func(t *testing.T) {
		st := createStream(t, js, func(c *jetstream.StreamConfig) { c.MaxMsgSize = 512 })
		s := newSink(t, natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0]})
		err := deliver(s, newMessage(bytes.Repeat([]byte("x"), 1024)), 5*time.Second)
		assertPermanent(t, err)
		if !errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) {
			t.Errorf("error %q is not ErrStreamMessageExceedsMaximum", err)
		}
		if n := streamMsgs(t, st); n != 0 {
			t.Errorf("stream holds %d messages, want 0", n)
		}
	})

	t.Run("timeout_ms bounds an attempt without a deadline", func(t *testing.T) {
		// No stream and a 300 ms timeout: the client's no-responders
		// retries would take longer, so the attempt ends on timeout_ms.
		s := newSink(t, natssink.Options{URL: url, Subject: uniqueName() + ".nostream", Timeout: 300 * time.Millisecond})
		start := time.Now()
		err := s.Deliver(context.Background(), newMessage(nil))
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Deliver took %s with timeout_ms 300", d)
		}
		assertTransient(t, err)
	})
}

func TestSink_RedialsAfterClientClose(t *testing.T) {
	url, js := liveJetStream(t)
	st := createStream(t, js, nil)
	s := newSink(t, natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0]})
	if err := deliver(s, newMessage(nil), 5*time.Second); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	// What the client does when the server ends the session with an error
	// it treats as fatal: the connection is closed, not reconnecting.
	// The redial may win the race with the next Deliver; if it does not,
	// that Deliver fails transiently.
	natssink.CloseConnForTest(s)
	before := uint64(1)
	if err := deliver(s, newMessage(nil), 5*time.Second); err == nil {
		before++
	} else {
		assertTransient(t, err)
	}
	eventuallyDelivered(t, s, newMessage(nil))
	if n := streamMsgs(t, st); n != before+1 {
		t.Fatalf("stream holds %d messages, want %d", n, before+1)
	}
}

func TestSink_CloseLeavesNoGoroutines(t *testing.T) {
	url, js := liveJetStream(t)
	st := createStream(t, js, nil)
	baseline := runtime.NumGoroutine()

	s, err := natssink.New(natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0], Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatalf("new sink: %v", err)
	}
	for range 3 {
		if err := deliver(s, newMessage(nil), 5*time.Second); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	assertTransient(t, s.Deliver(expired, newMessage(nil)))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "the sink's goroutines to exit", func() bool {
		return runtime.NumGoroutine() <= baseline
	})
	assertTransient(t, deliver(s, newMessage(nil), time.Second))
}

func TestNew_Config(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  natssink.Options
		want string
	}{
		{"no url", natssink.Options{Subject: "a"}, "url is required"},
		{"no subject", natssink.Options{URL: "nats://127.0.0.1:1"}, "subject is required"},
		{"password without user", natssink.Options{URL: "nats://127.0.0.1:1", Subject: "a", Password: "p"}, "without user"},
		{"two methods", natssink.Options{URL: "nats://127.0.0.1:1", Subject: "a", User: "u", Token: "t"}, "at most one"},
		{"missing nkey file", natssink.Options{URL: "nats://127.0.0.1:1", Subject: "a", NKeyFile: "/nonexistent/seed.nk"}, "nkey_file"},
		{"missing creds file", natssink.Options{URL: "nats://127.0.0.1:1", Subject: "a", CredsFile: "/nonexistent/user.creds"}, "creds_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := natssink.New(c.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("New accepted the config")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}
