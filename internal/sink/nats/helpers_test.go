package natssink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/hook"
	"github.com/ankusa/ankusa/internal/sink"
	natssink "github.com/ankusa/ankusa/internal/sink/nats"
	"github.com/ankusa/ankusa/internal/testutil"
)

// liveURL is the machine's NATS server; ANKUSA_TEST_NATS_URL overrides it.
func liveURL() string {
	if u := os.Getenv("ANKUSA_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// liveJetStream connects the test's own admin client to the machine's
// server, skipping the test when nothing listens there.
func liveJetStream(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	url := liveURL()
	nc, err := nats.Connect(url, nats.Name("ankusa-sink-test"), nats.Timeout(2*time.Second))
	if err != nil {
		t.Skipf("no NATS server at %s (%v): start one with JetStream enabled (nats-server -js) or set ANKUSA_TEST_NATS_URL", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return url, js
}

// embeddedJetStream is the test's admin client to an embedded server.
func embeddedJetStream(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("ankusa-sink-test")}, opts...)...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// uniqueName is "ankusa_test_<random hex>": a stream name and a subject no
// other test run shares.
func uniqueName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "ankusa_test_" + hex.EncodeToString(b[:])
}

// createStream creates a stream named and capturing a unique subject (the
// test, never the sink, creates streams) and deletes it when the test ends.
func createStream(t *testing.T, js jetstream.JetStream, edit func(*jetstream.StreamConfig)) jetstream.Stream {
	t.Helper()
	st := makeStream(t, js, edit)
	name := st.CachedInfo().Config.Name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Errorf("delete stream %s: %v", name, err)
		}
	})
	return st
}

// makeStream creates the stream without deleting it: for embedded servers,
// which are thrown away whole.
func makeStream(t *testing.T, js jetstream.JetStream, edit func(*jetstream.StreamConfig)) jetstream.Stream {
	t.Helper()
	name := uniqueName()
	cfg := jetstream.StreamConfig{
		Name:       name,
		Subjects:   []string{name},
		Storage:    jetstream.MemoryStorage,
		Duplicates: 2 * time.Minute,
		MaxAge:     time.Hour,
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	return st
}

// newSink builds a sink and closes it when the test ends.
func newSink(t *testing.T, cfg natssink.Options) *natssink.Sink {
	t.Helper()
	s, err := natssink.New(withLogger(t, cfg))
	if err != nil {
		t.Fatalf("new sink: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close sink: %v", err)
		}
	})
	return s
}

// newMessage is a hook with every optional field set, so every broker
// header appears, and a body that is not valid UTF-8.
func newMessage(body []byte) *sink.Message {
	if body == nil {
		body = []byte("{\"event\":\"paid\"}\x00\xff\xfe")
	}
	return &sink.Message{
		ID:          uuid.New(),
		Seq:         42,
		Tenant:      "acme",
		Source:      "stripe",
		ReceivedAt:  time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		ContentType: "application/json",
		Headers:     []hook.Header{{Name: "stripe-signature", Value: "t=1,v1=abc"}},
		Body:        body,
		DedupeKey:   "evt_123",
		ReplayID:    "replay_7",
		Flagged:     true,
		Attempt:     1,
	}
}

// deliver calls Deliver with a fresh deadline.
func deliver(s *natssink.Sink, m *sink.Message, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.Deliver(ctx, m)
}

// streamMsgs is how many messages the stream holds.
func streamMsgs(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

// runServer starts an embedded JetStream server on port (-1: any free
// port) storing in dir, and shuts it down when the test ends.
func runServer(t *testing.T, port int, dir string, edit func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     os.Getenv("NATS_TEST_LOG") == "",
		NoSigs:    true,
	}
	if edit != nil {
		edit(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	if !opts.NoLog {
		srv.ConfigureLogger()
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatalf("embedded server on port %d not ready", port)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

// serverPort is the port an embedded server listens on.
func serverPort(t *testing.T, srv *server.Server) int {
	t.Helper()
	_, p, err := net.SplitHostPort(srv.Addr().String())
	if err != nil {
		t.Fatalf("server addr: %v", err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("server port: %v", err)
	}
	return n
}

// freePort is a port nothing listens on (free at the time of the call).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// eventuallyDelivered retries Deliver until it succeeds or the deadline
// passes: a reconnect has no event the test can wait on, so this polls
// (through testutil.Eventually, the one polling helper).
func eventuallyDelivered(t *testing.T, s *natssink.Sink, m *sink.Message) {
	t.Helper()
	var last error
	defer func() {
		if t.Failed() {
			t.Logf("last Deliver error: %v", last)
		}
	}()
	testutil.Eventually(t, 20*time.Second, "a successful Deliver after the server came back", func() bool {
		last = deliver(s, m, 500*time.Millisecond)
		return last == nil
	})
}

// assertTransient fails unless err is a non-nil, non-permanent error.
func assertTransient(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Deliver returned nil, want a transient error")
	}
	if perm, _ := sink.Classify(err); perm {
		t.Fatalf("Deliver error %q is permanent, want transient", err)
	}
}

// assertPermanent fails unless err is classified permanent.
func assertPermanent(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Deliver returned nil, want a permanent error")
	}
	if perm, _ := sink.Classify(err); !perm {
		t.Fatalf("Deliver error %q is transient, want permanent", err)
	}
}

// withLogger is o logging to the test.
func withLogger(t *testing.T, o natssink.Options) natssink.Options {
	o.Logger = testutil.Logger(t)
	return o
}
