package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ankusa/ankusa/internal/hook"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/rabbitmq"
	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	brokerURL  = "amqp://guest:guest@127.0.0.1:5672/"
	brokerAddr = "127.0.0.1:5672"
)

// broker is the test's own admin connection: it declares and deletes the
// exchanges and queues the sink under test must only publish to.
type broker struct {
	t  *testing.T
	ch *amqp.Channel
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	conn, err := amqp.Dial(brokerURL)
	if err != nil {
		t.Skipf("RabbitMQ not reachable at %s (start one to run these tests): %v", brokerAddr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("admin channel: %v", err)
	}
	return &broker{t: t, ch: ch}
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// name is unique per test and run.
func (b *broker) name(kind string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("ankusa-test.%s.%s.%x", unsafeName.ReplaceAllString(b.t.Name(), "_"), kind, r)
}

// exchange declares a direct exchange, deleted when the test ends.
func (b *broker) exchange(name string) {
	b.t.Helper()
	if err := b.ch.ExchangeDeclare(name, amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
		b.t.Fatalf("declare exchange %s: %v", name, err)
	}
	b.t.Cleanup(func() {
		if err := b.ch.ExchangeDelete(name, false, false); err != nil {
			b.t.Errorf("delete exchange %s: %v", name, err)
		}
	})
}

// queue declares a queue, bound to exchange with key unless exchange is "",
// deleted when the test ends.
func (b *broker) queue(name, exchange, key string) {
	b.t.Helper()
	if _, err := b.ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		b.t.Fatalf("declare queue %s: %v", name, err)
	}
	b.t.Cleanup(func() {
		if _, err := b.ch.QueueDelete(name, false, false, false); err != nil {
			b.t.Errorf("delete queue %s: %v", name, err)
		}
	})
	if exchange != "" {
		if err := b.ch.QueueBind(name, key, exchange, false, nil); err != nil {
			b.t.Fatalf("bind queue %s to %s with %q: %v", name, exchange, key, err)
		}
	}
}

// get takes the next message from queue, failing the test if there is none.
func (b *broker) get(queue string) amqp.Delivery {
	b.t.Helper()
	d, ok, err := b.ch.Get(queue, true)
	if err != nil {
		b.t.Fatalf("get from %s: %v", queue, err)
	}
	if !ok {
		b.t.Fatalf("queue %s is empty", queue)
	}
	return d
}

// empty fails the test if queue holds a message.
func (b *broker) empty(queue string) {
	b.t.Helper()
	d, ok, err := b.ch.Get(queue, true)
	if err != nil {
		b.t.Fatalf("get from %s: %v", queue, err)
	}
	if ok {
		b.t.Fatalf("queue %s holds an unexpected message %s", queue, d.MessageId)
	}
}

func newSink(t *testing.T, url, exchange, key string) *rabbitmq.Sink {
	t.Helper()
	s, err := rabbitmq.New(rabbitmq.Options{URL: url, Exchange: exchange, RoutingKey: key, Timeout: 10_000 * time.Millisecond, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func message(body string) *sink.Message {
	b := []byte(body)
	return &sink.Message{
		ID:          uuid.New(),
		Seq:         7,
		Tenant:      "acme",
		Source:      "github",
		ReceivedAt:  time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC),
		ContentType: "application/json",
		Headers:     []hook.Header{{Name: "x-github-event", Value: "push"}},
		Body:        b,
		SHA256:      sha256.Sum256(b),
		Attempt:     1,
	}
}

func deliver(t *testing.T, s *rabbitmq.Sink, m *sink.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return s.Deliver(ctx, m)
}

func requireTransient(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Deliver returned nil, want an error")
	}
	if permanent, _ := sink.Classify(err); permanent {
		t.Fatalf("error is permanent, want transient: %v", err)
	}
	t.Logf("transient error: %v", err)
}

func TestSink_Deliver(t *testing.T) {
	b := newBroker(t)
	ex, q, key := b.name("x"), b.name("q"), "hooks.github"
	b.exchange(ex)
	b.queue(q, ex, key)
	s := newSink(t, brokerURL, ex, key)

	m := message("{\"a\":1}\x00\xff binary")
	m.DedupeKey = "delivery-42"
	m.ReplayID = "replay-1"
	m.Flagged = true
	if err := deliver(t, s, m); err != nil {
		t.Fatalf("Deliver: %v", err)
	}

	d := b.get(q)
	if d.MessageId != m.ID.String() {
		t.Errorf("message_id = %q, want %q", d.MessageId, m.ID)
	}
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("delivery mode = %d, want persistent (%d)", d.DeliveryMode, amqp.Persistent)
	}
	if d.ContentType != "application/json" {
		t.Errorf("content type = %q", d.ContentType)
	}
	if !d.Timestamp.Equal(m.ReceivedAt.Truncate(time.Second)) {
		t.Errorf("timestamp = %v, want %v", d.Timestamp, m.ReceivedAt.Truncate(time.Second))
	}
	if d.Exchange != ex || d.RoutingKey != key {
		t.Errorf("routed via %q/%q", d.Exchange, d.RoutingKey)
	}

	var got struct {
		V              int     `json:"v"`
		ID             string  `json:"id"`
		SourceID       string  `json:"source_id"`
		TenantID       string  `json:"tenant_id"`
		ReceivedAt     string  `json:"received_at"`
		ContentType    string  `json:"content_type"`
		Size           int     `json:"size"`
		DedupeKey      *string `json:"dedupe_key"`
		ReplayID       *string `json:"replay_id"`
		IdempotencyKey string  `json:"idempotency_key"`
		Flagged        bool    `json:"flagged"`
		Headers        []struct{ Name, Value string }
		SHA256         string `json:"sha256"`
		BodyBase64     string `json:"body_base64"`
	}
	if err := json.Unmarshal(d.Body, &got); err != nil {
		t.Fatalf("body is not the message JSON: %v\n%s", err, d.Body)
	}
	body, err := base64.StdEncoding.DecodeString(got.BodyBase64)
	if err != nil {
		t.Fatalf("body_base64: %v", err)
	}
	if string(body) != string(m.Body) {
		t.Errorf("body = %q, want %q", body, m.Body)
	}
	if got.V != sink.MessageVersion || got.ID != m.ID.String() || got.SourceID != "github" ||
		got.TenantID != "acme" || got.ReceivedAt != "2026-03-04T05:06:07.89Z" ||
		got.ContentType != "application/json" || got.Size != len(m.Body) ||
		got.IdempotencyKey != "acme:github:delivery-42" || !got.Flagged ||
		got.SHA256 != hex.EncodeToString(m.SHA256[:]) {
		t.Errorf("message JSON fields wrong: %s", d.Body)
	}
	if got.DedupeKey == nil || *got.DedupeKey != "delivery-42" || got.ReplayID == nil || *got.ReplayID != "replay-1" {
		t.Errorf("dedupe_key/replay_id wrong: %s", d.Body)
	}
	if len(got.Headers) != 1 || got.Headers[0].Name != "x-github-event" || got.Headers[0].Value != "push" {
		t.Errorf("headers = %+v", got.Headers)
	}

	want := sink.BrokerHeaders(m)
	if len(want) != 8 {
		t.Fatalf("test message should carry every optional header, has %d", len(want))
	}
	for _, h := range want {
		if v, ok := d.Headers[h.Key]; !ok || v != h.Value {
			t.Errorf("header %s = %#v, want %q", h.Key, d.Headers[h.Key], h.Value)
		}
	}
	if len(d.Headers) != len(want) {
		t.Errorf("headers = %v, want exactly %v", d.Headers, want)
	}
	b.empty(q)

	// The channel is reused for a second message.
	m2 := message("second")
	if err := deliver(t, s, m2); err != nil {
		t.Fatalf("second Deliver: %v", err)
	}
	if d := b.get(q); d.MessageId != m2.ID.String() {
		t.Errorf("second message_id = %q, want %q", d.MessageId, m2.ID)
	}
}

func TestSink_DefaultExchange(t *testing.T) {
	b := newBroker(t)
	q := b.name("q")
	b.queue(q, "", "")
	s := newSink(t, brokerURL, "", q)
	m := message("to the default exchange")
	if err := deliver(t, s, m); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if d := b.get(q); d.MessageId != m.ID.String() {
		t.Errorf("message_id = %q, want %q", d.MessageId, m.ID)
	}
}

func TestSink_Unroutable(t *testing.T) {
	b := newBroker(t)
	ex, q := b.name("x"), b.name("q")
	b.exchange(ex)
	b.queue(q, ex, "bound.key")
	key := "no.binding.for.this.key"
	s := newSink(t, brokerURL, ex, key)

	err := deliver(t, s, message("lost"))
	requireTransient(t, err)
	if !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Errorf("error does not wrap ErrUnroutable: %v", err)
	}
	if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), ex) {
		t.Errorf("error should name the exchange and routing key: %v", err)
	}
	b.empty(q)

	// A return is per message: the same sink keeps failing, and a routable
	// sink on the same broker is unaffected.
	requireTransient(t, deliver(t, s, message("lost again")))
	ok := newSink(t, brokerURL, ex, "bound.key")
	if err := deliver(t, ok, message("found")); err != nil {
		t.Fatalf("routable Deliver: %v", err)
	}
	b.get(q)
}

func TestSink_NoExchange(t *testing.T) {
	b := newBroker(t)
	ex, q, key := b.name("x"), b.name("q"), "k"
	s := newSink(t, brokerURL, ex, key)

	err := deliver(t, s, message("nowhere"))
	requireTransient(t, err)
	if !errors.Is(err, rabbitmq.ErrNoExchange) {
		t.Errorf("error does not wrap ErrNoExchange: %v", err)
	}
	if !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), ex) {
		t.Errorf("error should say which exchange does not exist: %v", err)
	}

	// The operator creates the exchange: the same Sink recovers on a new channel.
	b.exchange(ex)
	b.queue(q, ex, key)
	m := message("somewhere")
	if err := deliver(t, s, m); err != nil {
		t.Fatalf("Deliver after the exchange exists: %v", err)
	}
	if d := b.get(q); d.MessageId != m.ID.String() {
		t.Errorf("message_id = %q, want %q", d.MessageId, m.ID)
	}
}

func TestSink_Concurrent(t *testing.T) {
	b := newBroker(t)
	ex, q, key := b.name("x"), b.name("q"), "k"
	b.exchange(ex)
	b.queue(q, ex, key)
	s := newSink(t, brokerURL, ex, key)

	const n = 50
	sent := make(map[string]bool, n)
	msgs := make([]*sink.Message, n)
	for i := range msgs {
		msgs[i] = message(fmt.Sprintf("hook %d", i))
		sent[msgs[i].ID.String()] = true
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() { errs[i] = deliver(t, s, m) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Deliver %d: %v", i, err)
		}
	}

	seen := make(map[string]bool, n)
	for range n {
		d := b.get(q)
		if !sent[d.MessageId] || seen[d.MessageId] {
			t.Errorf("unexpected or duplicate message_id %q", d.MessageId)
		}
		seen[d.MessageId] = true
	}
	b.empty(q)
}

func TestSink_ExpiredContext(t *testing.T) {
	b := newBroker(t)
	ex, q, key := b.name("x"), b.name("q"), "k"
	b.exchange(ex)
	b.queue(q, ex, key)
	s := newSink(t, brokerURL, ex, key)

	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	start := time.Now()
	err := s.Deliver(ctx, message("too late"))
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Deliver took %v with an expired ctx", elapsed)
	}
	requireTransient(t, err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error does not wrap context.DeadlineExceeded: %v", err)
	}
	b.empty(q)
}

func TestSink_BadCredentials(t *testing.T) {
	newBroker(t) // skip when there is no broker
	s := newSink(t, "amqp://guest:wrong-password@"+brokerAddr+"/", "", "k")
	err := deliver(t, s, message("x"))
	if permanent, _ := sink.Classify(err); !permanent {
		t.Fatalf("want a permanent error for refused credentials, got %v", err)
	}
	t.Logf("permanent error: %v", err)
	if strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("error leaks the password: %v", err)
	}
}

// TestSink_Redial: a broker down at boot does not stop New, Deliver fails
// transiently meanwhile, and the sink dials once the broker is up and
// redials after the connection is lost.
func TestSink_Redial(t *testing.T) {
	b := newBroker(t)
	ex, q, key := b.name("x"), b.name("q"), "k"
	b.exchange(ex)
	b.queue(q, ex, key)
	p := newProxy(t)
	s := newSink(t, "amqp://guest:guest@"+p.addr()+"/", ex, key)

	requireTransient(t, deliver(t, s, message("broker down")))

	p.setUp(true)
	m := message("broker up")
	if err := deliver(t, s, m); err != nil {
		t.Fatalf("Deliver once the broker is up: %v", err)
	}
	if d := b.get(q); d.MessageId != m.ID.String() {
		t.Errorf("message_id = %q, want %q", d.MessageId, m.ID)
	}

	// Cut the connection. The sink learns of it from a failed publish or
	// from the library's reader, whichever is first; no event tells the
	// test which, so it polls with a deadline.
	p.cut()
	var last *sink.Message
	var failures int
	deadline := time.Now().Add(10 * time.Second)
	for {
		last = message("after the cut")
		err := deliver(t, s, last)
		if err == nil {
			break
		}
		requireTransient(t, err)
		failures++
		if time.Now().After(deadline) {
			t.Fatalf("no successful Deliver within 10s of the cut; %d failures, last: %v", failures, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	found := false
	for {
		d, ok, err := b.ch.Get(q, true)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if !ok {
			break
		}
		found = found || d.MessageId == last.ID.String()
	}
	if !found {
		t.Errorf("the delivery after the redial is not in the queue")
	}
	if p.accepted() < 2 {
		t.Errorf("proxy accepted %d connections, want a redial", p.accepted())
	}
}

// TestSink_DeadlineWhileWaiting: a broker that stops answering mid-publish
// costs one attempt, ended by ctx, and the sink then goes on (on a fresh
// channel) once the broker answers again.
func TestSink_DeadlineWhileWaiting(t *testing.T) {
	b := newBroker(t)
	ex, q, key := b.name("x"), b.name("q"), "k"
	b.exchange(ex)
	b.queue(q, ex, key)
	p := newProxy(t)
	p.setUp(true)
	s := newSink(t, "amqp://guest:guest@"+p.addr()+"/", ex, key)
	if err := deliver(t, s, message("warm up")); err != nil {
		t.Fatalf("Deliver: %v", err)
	}

	p.stall()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Deliver(ctx, message("stalled"))
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Deliver took %v past a 200ms deadline", elapsed)
	}
	requireTransient(t, err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error does not wrap context.DeadlineExceeded: %v", err)
	}

	p.unstall()
	m := message("after the stall")
	if err := deliver(t, s, m); err != nil {
		t.Fatalf("Deliver after the stall: %v", err)
	}
	// The stalled message may have arrived too: at-least-once.
	found := false
	for {
		d, ok, err := b.ch.Get(q, true)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if !ok {
			break
		}
		found = found || d.MessageId == m.ID.String()
	}
	if !found {
		t.Errorf("the delivery after the stall is not in the queue")
	}
}

// TestSink_CloseLeavesNoGoroutines: Close ends the publish workers, the
// connection watcher and the library's reader and heartbeater.
func TestSink_CloseLeavesNoGoroutines(t *testing.T) {
	b := newBroker(t)
	ex, q, key := b.name("x"), b.name("q"), "k"
	b.exchange(ex)
	b.queue(q, ex, key)
	before := runtime.NumGoroutine()

	s, err := rabbitmq.New(rabbitmq.Options{URL: brokerURL, Exchange: ex, RoutingKey: key, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := deliver(t, s, message("x")); err != nil {
				t.Errorf("Deliver: %v", err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The library's goroutines end on their own after the socket closes;
	// nothing signals it, so poll with a deadline.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s",
				runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

func TestSink_Close(t *testing.T) {
	s, err := rabbitmq.New(rabbitmq.Options{URL: "amqp://guest:guest@127.0.0.1:1/", RoutingKey: "k"})
	if err != nil {
		t.Fatalf("New must not dial: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Deliver(context.Background(), message("x")); !errors.Is(err, rabbitmq.ErrClosed) {
		t.Fatalf("Deliver after Close = %v, want ErrClosed", err)
	}
}

func TestNew_InvalidURL(t *testing.T) {
	_, err := rabbitmq.New(rabbitmq.Options{URL: "amqp://user:s3cret@host:notaport/", RoutingKey: "k"})
	if err == nil {
		t.Fatal("New accepted an invalid URL")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the password: %v", err)
	}
}

// proxy forwards TCP connections to the broker while up; while down it
// closes every connection it accepts, as a broker that is not there yet.
// While stalled it holds every byte it reads, as a wedged broker.
type proxy struct {
	t  *testing.T
	ln net.Listener

	mu    sync.Mutex
	up    bool
	n     int
	conns []net.Conn
	hold  chan struct{} // non-nil while stalled; closed to release
	wg    sync.WaitGroup
}

func newProxy(t *testing.T) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &proxy{t: t, ln: ln}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = ln.Close()
		p.unstall()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) setUp(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = up
}

func (p *proxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		p.hold = make(chan struct{})
	}
}

func (p *proxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		close(p.hold)
		p.hold = nil
	}
}

// cut closes every forwarded connection, both sides.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.up
		p.mu.Unlock()
		if !up {
			_ = c.Close()
			continue
		}
		u, err := net.Dial("tcp", brokerAddr)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.n++
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer func() { _ = dst.Close(); _ = src.Close() }()
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				p.mu.Lock()
				hold := p.hold
				p.mu.Unlock()
				if hold != nil {
					<-hold
				}
				if n > 0 {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}
		p.wg.Go(func() { pipe(u, c) })
		p.wg.Go(func() { pipe(c, u) })
	}
}

// TestSink_DropHeaders: the sink's drop_headers reach its messages; []
// carries every header, authorization included.
func TestSink_DropHeaders(t *testing.T) {
	b := newBroker(t)
	ex, q, key := b.name("x"), b.name("q"), "hooks.drop"
	b.exchange(ex)
	b.queue(q, ex, key)
	for _, c := range []struct {
		drop     []string
		wantAuth bool
	}{{nil, false}, {[]string{}, true}} {
		s, err := rabbitmq.New(rabbitmq.Options{URL: brokerURL, Exchange: ex, RoutingKey: key, Timeout: 10_000 * time.Millisecond, DropHeaders: c.drop, Logger: testutil.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		m := message(`{"a":1}`)
		m.Headers = append(m.Headers, hook.Header{Name: "authorization", Value: "Bearer provider-token"})
		err = deliver(t, s, m)
		_ = s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(b.get(q).Body), `"authorization"`); has != c.wantAuth {
			t.Errorf("drop_headers %v: authorization carried = %v, want %v", c.drop, has, c.wantAuth)
		}
	}
}
