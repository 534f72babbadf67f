// Package sourcestest runs API-managed sources end to end for tests: a real
// store, queue and dispatcher, the real edge handler over httptest with the
// Manager's Registry, and recording sinks built through BuildSink. It can
// restart the whole stack on the same store.
package sourcestest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sources"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// Options shape an Env.
type Options struct {
	// Schema makes the Manager's source rules over build, the constructor
	// of the recording sinks (a sink's id in, its recorder out). Required;
	// tests pass the app's (app.SourceSchema over a config whose
	// source_store.type is persistent), so that the rules are the binary's.
	Schema func(build func(sinkID string) (sink.Sink, error)) sources.Schema
	// Routing is http.routing: path (default) or tenant_path.
	Routing string
	// Prefix is http.prefix ("/webhooks" if empty).
	Prefix string
	// MaxBodyBytes is http.max_body_bytes (8 000 000 if 0).
	MaxBodyBytes int64
	// Dispatch starts the dispatcher. Without it every committed hook
	// stays due, which makes pending deliveries deterministic.
	Dispatch bool
}

// Env is one running instance around a Manager.
type Env struct {
	Dir      string
	Store    *store.Store
	Queue    *queue.Queue
	Dispatch *dispatch.Dispatcher
	Registry *edge.Registry
	Manager  *sources.Manager
	// Ingest serves the edge handler; post hooks to Ingest.URL + catch_url.
	Ingest *httptest.Server
	// Sinks is shared by every generation (restarts included).
	Sinks *Sinks

	o    Options
	disp atomic.Pointer[dispatch.Dispatcher]
	stop func()
}

// New starts an Env in a fresh directory; it stops when the test ends.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	if o.Schema == nil {
		t.Fatal("sourcestest: Options.Schema is required")
	}
	if o.Routing == "" {
		o.Routing = "path"
	}
	if o.Prefix == "" {
		o.Prefix = "/webhooks"
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 8_000_000
	}
	e := &Env{Dir: filepath.Join(t.TempDir(), "store"), Sinks: newSinks(), o: o}
	e.start(t)
	t.Cleanup(func() { e.stop() })
	return e
}

// Restart stops every component, closes the store, and starts them again
// on the same directory with a new Manager, which Loads the stored sources.
func (e *Env) Restart(t testing.TB) {
	t.Helper()
	e.stop()
	e.start(t)
}

func (e *Env) start(t testing.TB) {
	t.Helper()
	log := testutil.Logger(t)
	st, err := store.Open(store.Options{Dir: e.Dir, Logger: log})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	e.disp.Store(nil)
	q, err := queue.New(st, queue.Options{
		Logger: log, FenceRetry: 10 * time.Millisecond,
		OnFatal: func(err error) { t.Errorf("queue fatal: %v", err) },
		OnDurable: func() {
			if d := e.disp.Load(); d != nil {
				d.Wake()
			}
		},
	})
	if err != nil {
		_ = st.Close()
		t.Fatalf("new queue: %v", err)
	}
	q.Start()
	d := dispatch.New(st, dispatch.Options{
		Concurrency: 4, Poll: 20 * time.Millisecond,
		Retry:   dispatch.RetryPolicy{Base: time.Hour, Max: time.Hour, MaxAttempts: 100},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Logger: log,
	})
	reg := edge.NewRegistry(nil)
	m := sources.New(sources.Options{
		Store: st, Registry: reg, Dispatch: d, Schema: e.o.Schema(e.Sinks.build),
		Routing: e.o.Routing, Prefix: e.o.Prefix, Logger: log,
	})
	srv := httptest.NewServer(edge.New(edge.Options{
		Routing: e.o.Routing, Prefix: e.o.Prefix, MaxBodyBytes: e.o.MaxBodyBytes,
		Sources: reg, Committer: q, Observer: nopObserver{}, Logger: log,
	}))
	started := false
	e.stop = func() {
		srv.Close()
		e.Sinks.Unblock() // a blocked attempt must not hold up Stop
		if started {
			d.Stop()
		}
		q.Close()
		m.Close()
		_ = st.Close()
		e.stop = func() {}
	}
	if err := m.Load(); err != nil {
		e.stop()
		t.Fatalf("load API sources: %v", err)
	}
	if e.o.Dispatch {
		if err := d.Start(); err != nil {
			e.stop()
			t.Fatalf("start dispatch: %v", err)
		}
		started = true
		e.disp.Store(d)
	}
	e.Store, e.Queue, e.Dispatch, e.Registry, e.Manager, e.Ingest = st, q, d, reg, m, srv
}

type nopObserver struct{}

func (nopObserver) Ingest(string, string, time.Duration) {}
func (nopObserver) IngestRefused(string)                 {}

// Reply is an HTTP answer with its JSON body decoded.
type Reply struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

// Post sends body to the ingest path, with headers.
func (e *Env) Post(t testing.TB, path string, body []byte, headers map[string]string) Reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.Ingest.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	r := Reply{Status: resp.StatusCode, Header: resp.Header, Raw: buf.String()}
	_ = json.Unmarshal(buf.Bytes(), &r.Body)
	return r
}

// GitHubSignature is the X-Hub-Signature-256 of body under secret.
func GitHubSignature(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Count is how many keys of one family the store holds.
func (e *Env) Count(t testing.TB, prefix byte) uint64 {
	t.Helper()
	n, err := e.Store.Count([]byte{prefix})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Delivery is one attempt a recording sink saw.
type Delivery struct {
	SinkID string
	Msg    *sink.Message
}

// Sinks builds recording sinks (every sink type records) and sees every
// attempt they get.
type Sinks struct {
	mu       sync.Mutex
	block    chan struct{} // non-nil: attempts wait for it (or their ctx)
	failErr  error         // non-nil: attempts fail with it (a retryable error)
	buildErr error
	built    int
	closed   int

	started   chan Delivery // an attempt began (before any block)
	delivered chan Delivery // an attempt succeeded
}

func newSinks() *Sinks {
	return &Sinks{started: make(chan Delivery, 1024), delivered: make(chan Delivery, 1024)}
}

// FailBuild makes the next builds fail with err (nil: succeed again).
func (s *Sinks) FailBuild(err error) {
	s.mu.Lock()
	s.buildErr = err
	s.mu.Unlock()
}

// FailAttempts makes every later attempt fail with err (nil: succeed again).
func (s *Sinks) FailAttempts(err error) {
	s.mu.Lock()
	s.failErr = err
	s.mu.Unlock()
}

// Block holds every later attempt until Unblock.
func (s *Sinks) Block() {
	s.mu.Lock()
	if s.block == nil {
		s.block = make(chan struct{})
	}
	s.mu.Unlock()
}

// Unblock releases held attempts.
func (s *Sinks) Unblock() {
	s.mu.Lock()
	if s.block != nil {
		close(s.block)
		s.block = nil
	}
	s.mu.Unlock()
}

// Built and Closed count the sinks built and closed so far.
func (s *Sinks) Built() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.built
}

func (s *Sinks) Closed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Started waits for the next attempt to begin.
func (s *Sinks) Started(t testing.TB) Delivery {
	t.Helper()
	return wait(t, s.started, "an attempt to start")
}

// Delivered waits for the next successful attempt.
func (s *Sinks) Delivered(t testing.TB) Delivery {
	t.Helper()
	return wait(t, s.delivered, "a delivery")
}

func wait(t testing.TB, ch chan Delivery, what string) Delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return Delivery{}
	}
}

func (s *Sinks) build(id string) (sink.Sink, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buildErr != nil {
		return nil, s.buildErr
	}
	s.built++
	return &recorder{id: id, s: s}, nil
}

type recorder struct {
	id     string
	s      *Sinks
	closed atomic.Bool
}

var errClosed = errors.New("recorder: Deliver after Close")

func (r *recorder) Deliver(ctx context.Context, m *sink.Message) error {
	if r.closed.Load() {
		return errClosed
	}
	mc := *m // the dispatcher reuses m after Deliver returns (sink.Sink)
	r.s.started <- Delivery{r.id, &mc}
	r.s.mu.Lock()
	block, fail := r.s.block, r.s.failErr
	r.s.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		return fail
	}
	r.s.delivered <- Delivery{r.id, m}
	return nil
}

func (r *recorder) Close() error {
	if !r.closed.Swap(true) {
		r.s.mu.Lock()
		r.s.closed++
		r.s.mu.Unlock()
	}
	return nil
}
