// Package sinktest is the contract suite every sink.Sink passes (http, Kafka
// on kfake, NATS on a loopback JetStream server, RabbitMQ on a loopback
// broker, log): one suite, many implementations, so the dispatcher can rely
// on the contract stated on sink.Sink rather than on an adapter.
package sinktest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/hook"
	"github.com/ankusa/ankusa/internal/sink"
)

// bound fails a call that hangs instead of letting the test hang; no
// assertion is about how fast anything is.
const bound = 10 * time.Second

// Carries says which parts of a message a sink hands its target.
type Carries uint8

const (
	// CarriesBody: the hook's body, byte for byte (raw or in the message
	// JSON).
	CarriesBody Carries = 1 << iota
	// CarriesHeaders: the hook's request headers (the queue sinks' message
	// JSON; the HTTP sink sends only Ankusa's own headers).
	CarriesHeaders
	// CarriesIdempotencyKey: the key a consumer dedupes on.
	CarriesIdempotencyKey

	// CarriesAll is what a queue sink carries.
	CarriesAll = CarriesBody | CarriesHeaders | CarriesIdempotencyKey
)

// Received is what a target got for one hook.
type Received struct {
	ID             string
	IdempotencyKey string
	Body           []byte
	Headers        []hook.Header // the hook's request headers, as carried
}

// Instance is one sink and a way to read what its target received.
type Instance struct {
	// Sink delivers to a target of this test's own (a unique topic, stream,
	// queue or server), cleaned up when the test ends. The suite may Close
	// it; a cleanup that closes it again must tolerate that (Close is
	// idempotent by contract).
	Sink sink.Sink
	// Received returns what the target holds for hook id, waiting at most
	// the suite's bound; it fails t when nothing arrived.
	Received func(t *testing.T, id uuid.UUID) Received
}

// Target describes one sink implementation to the suite.
type Target struct {
	// New builds an Instance.
	New func(t *testing.T) Instance
	// Refusing builds a sink whose target refuses every message for good
	// (an HTTP 400, a message over the broker's size limit, refused
	// credentials). Nil for a sink no target can refuse (log).
	Refusing func(t *testing.T) sink.Sink
	// Carries is what the sink hands its target.
	Carries Carries
	// DoesIO: Deliver talks to a target, so a Deliver with an ended ctx
	// must fail (transient). False for the log sink, which cannot block
	// and returns nil. A sink implements sink.NoIO exactly when DoesIO is
	// false (the dispatcher gives a NoIO sink's attempts no deadline).
	DoesIO bool
}

// Run runs the contract suite against tg.
func Run(t *testing.T, tg Target) {
	t.Run("NoIOExactlyWhenItDoesNoIO", func(t *testing.T) { testNoIO(t, tg) })
	t.Run("BodyFreeExactlyWhenItCarriesNoBody", func(t *testing.T) { testBodyFree(t, tg) })
	t.Run("DeliverCarriesTheMessageIntact", func(t *testing.T) { testDeliver(t, tg) })
	t.Run("RefusalIsPermanent", func(t *testing.T) { testRefusal(t, tg) })
	t.Run("EndedContextReturnsPromptly", func(t *testing.T) { testContext(t, tg) })
	t.Run("CloseIsIdempotent", func(t *testing.T) { testClose(t, tg) })
}

// NewMessage is a hook with every optional field set, a body that is not
// valid UTF-8 (so a lossy encoding shows) and request headers a queue sink
// carries by default.
func NewMessage() *sink.Message {
	body := []byte("{\"action\":\"opened\"}\x00\xff\xfe\n")
	return &sink.Message{
		ID:          uuid.New(),
		Seq:         42,
		Tenant:      "acme",
		Source:      "github",
		ReceivedAt:  time.Date(2025, 3, 4, 5, 6, 7, 891_000_000, time.UTC),
		ContentType: "application/json",
		Headers: []hook.Header{
			{Name: "x-github-event", Value: "pull_request"},
			{Name: "x-hub-signature-256", Value: "sha256=0a1b"},
		},
		Body:      body,
		Size:      len(body),
		SHA256:    sha256.Sum256(body),
		DedupeKey: "delivery-7",
		ReplayID:  "replay-1",
		Flagged:   true,
		Attempt:   1,
	}
}

// DecodeQueueMessage reads the queue sinks' message JSON (sink.EncodeJSON,
// a frozen format) as a consumer would, without the sink package's help.
func DecodeQueueMessage(t *testing.T, value []byte) Received {
	t.Helper()
	var j struct {
		V              int    `json:"v"`
		ID             string `json:"id"`
		IdempotencyKey string `json:"idempotency_key"`
		Headers        []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"headers"`
		BodyBase64 string `json:"body_base64"`
	}
	if err := json.Unmarshal(value, &j); err != nil {
		t.Fatalf("message JSON does not parse: %v\n%s", err, value)
	}
	if j.V != sink.MessageVersion {
		t.Fatalf("message version %d, want %d", j.V, sink.MessageVersion)
	}
	body, err := base64.StdEncoding.DecodeString(j.BodyBase64)
	if err != nil {
		t.Fatalf("body_base64: %v", err)
	}
	r := Received{ID: j.ID, IdempotencyKey: j.IdempotencyKey, Body: body}
	for _, h := range j.Headers {
		r.Headers = append(r.Headers, hook.Header{Name: h.Name, Value: h.Value})
	}
	return r
}

// deliver runs Deliver under ctx, failing t if it does not return within
// the bound: Deliver must return promptly, whatever the target does.
func deliver(t *testing.T, s sink.Sink, ctx context.Context, m *sink.Message) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Deliver(ctx, m) }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Fatalf("Deliver did not return within %s", bound)
		return nil
	}
}

func boundCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	t.Cleanup(cancel)
	return ctx
}

func testDeliver(t *testing.T, tg Target) {
	in := tg.New(t)
	m := NewMessage()
	if _, ok := in.Sink.(sink.BodyFree); ok {
		m.Body = nil // as the dispatcher may hand it (sink.BodyFree)
	}
	if err := deliver(t, in.Sink, boundCtx(t), m); err != nil {
		t.Fatalf("Deliver to a healthy target: %v", err)
	}
	got := in.Received(t, m.ID)
	if got.ID != m.ID.String() {
		t.Errorf("target got id %q, want %s", got.ID, m.ID)
	}
	if tg.Carries&CarriesBody != 0 && !slices.Equal(got.Body, m.Body) {
		t.Errorf("target got body %q, want %q", got.Body, m.Body)
	}
	if tg.Carries&CarriesIdempotencyKey != 0 && got.IdempotencyKey != m.IdempotencyKey() {
		t.Errorf("target got idempotency key %q, want %q", got.IdempotencyKey, m.IdempotencyKey())
	}
	if tg.Carries&CarriesHeaders != 0 && !slices.Equal(got.Headers, m.Headers) {
		t.Errorf("target got headers %+v, want %+v", got.Headers, m.Headers)
	}
}

func testRefusal(t *testing.T, tg Target) {
	if tg.Refusing == nil {
		t.Skip("no target of this sink refuses a message (Target.Refusing is nil)")
	}
	s := tg.Refusing(t)
	err := deliver(t, s, boundCtx(t), NewMessage())
	if err == nil {
		t.Fatal("Deliver to a refusing target returned nil")
	}
	if permanent, _ := sink.Classify(err); !permanent {
		t.Fatalf("refusal %v is not sink.Permanent", err)
	}
	var e *sink.Error
	if !errors.As(err, &e) || e.Err == nil {
		t.Fatalf("refusal %v carries no cause", err)
	}
}

func testContext(t *testing.T, tg Target) {
	in := tg.New(t)
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx, cancel
		}},
		{"deadline passed", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := c.ctx()
			defer cancel()
			err := deliver(t, in.Sink, ctx, NewMessage())
			if permanent, _ := sink.Classify(err); permanent {
				t.Fatalf("an ended ctx is a transient failure, got permanent %v", err)
			}
			if tg.DoesIO && err == nil {
				t.Fatal("Deliver with an ended ctx reported the hook delivered")
			}
		})
	}
	// The sink still delivers afterwards: an abandoned attempt leaves no
	// state behind that breaks the next one.
	m := NewMessage()
	if err := deliver(t, in.Sink, boundCtx(t), m); err != nil {
		t.Fatalf("Deliver after attempts with ended contexts: %v", err)
	}
	if got := in.Received(t, m.ID); got.ID != m.ID.String() {
		t.Errorf("target got id %q, want %s", got.ID, m.ID)
	}
}

func testClose(t *testing.T, tg Target) {
	in := tg.New(t)
	m := NewMessage()
	if _, ok := in.Sink.(sink.BodyFree); ok {
		m.Body = nil // as the dispatcher may hand it (sink.BodyFree)
	}
	if err := deliver(t, in.Sink, boundCtx(t), m); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if err := in.Sink.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := in.Sink.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// testBodyFree: a sink claims sink.BodyFree (the dispatcher then may not
// read the body back for it) only when its target gets no body, and one
// whose target gets none claims it.
func testBodyFree(t *testing.T, tg Target) {
	_, bodyFree := tg.New(t).Sink.(sink.BodyFree)
	switch carries := tg.Carries&CarriesBody != 0; {
	case carries && bodyFree:
		t.Fatal("the sink hands its target the body but implements sink.BodyFree: it would be delivered without one")
	case !carries && !bodyFree:
		t.Fatal("the sink hands its target no body but does not implement sink.BodyFree: unless its Deliver reads the body for something else, the body is copied out of the store for nothing")
	}
}

// testNoIO: a sink claims sink.NoIO (its attempts then carry no deadline)
// only when it does no I/O, and one that does none claims it.
func testNoIO(t *testing.T, tg Target) {
	_, noIO := tg.New(t).Sink.(sink.NoIO)
	switch {
	case tg.DoesIO && noIO:
		t.Fatal("the sink talks to a target but implements sink.NoIO: its attempts would run without a deadline")
	case !tg.DoesIO && !noIO:
		t.Fatal("the sink does no I/O but does not implement sink.NoIO: each attempt arms a timer nothing waits on")
	}
}
