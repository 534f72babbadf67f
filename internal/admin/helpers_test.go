package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ankusa/ankusa/internal/admin"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/metrics"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	testInstance = "node-a"
	testVersion  = "1.2.3-test"
	testCommit   = "0123abcd"
	testSecret   = "whsec_do_not_show_me"
)

// env is one instance: a real store in a temp dir, a running queue with
// the metrics observer, and the operator API over them.
type env struct {
	cfg  *config.Config
	st   *store.Store
	q    *queue.Queue
	reg  *prometheus.Registry
	deps admin.Deps
	h    http.Handler
	// offset is added to the clock; tests move time with it.
	offset atomic.Int64
	// frozen, when not zero, replaces the real clock as the base.
	frozen time.Time
}

type envOptions struct {
	fs vfs.FS // nil: the real disk
	// frozenClock stops the readiness clock (it moves only by advance), for
	// tests of time windows that must not depend on how fast they run.
	frozenClock bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{cfg: config.Default()}
	if o.frozenClock {
		e.frozen = time.Now()
	}
	e.cfg.Node.Instance = testInstance
	demo := e.cfg.Sources["demo"]
	demo.Verify.Secret = []string{testSecret}
	e.cfg.Sources["demo"] = demo

	e.st = testutil.OpenStore(t, testutil.TempStoreDir(t), o.fs)
	e.reg = prometheus.NewRegistry()
	m := metrics.New(e.reg)
	e.q = testutil.StartQueue(t, e.st, queue.Options{Observer: m})
	m.WatchQueue(e.q.Stats, e.st.DiskBytes)
	e.deps = admin.Deps{
		Config: e.cfg, Store: e.st, Queue: e.q, Registry: e.reg,
		Version: testVersion, Commit: testCommit, Logger: testutil.Logger(t), Now: e.now,
	}
	e.h = admin.New(e.deps)
	return e
}

// now is the real clock (or the frozen one) moved by offset. It starts at
// the real time because the queue stamps failures with the real clock, and
// the readiness clock must stay comparable to it.
func (e *env) now() time.Time {
	base := e.frozen
	if base.IsZero() {
		base = time.Now()
	}
	return base.Add(time.Duration(e.offset.Load()))
}

func (e *env) advance(d time.Duration) { e.offset.Add(int64(d)) }

type response struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

func do(t *testing.T, h http.Handler, method, path string) response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	res := response{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(rec.Body.Bytes(), &res.body); err != nil {
			t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, res.raw, err)
		}
	}
	return res
}

func (e *env) get(t *testing.T, path string) response {
	t.Helper()
	return do(t, e.h, http.MethodGet, path)
}

// wantJSON checks the status and that the answer is JSON.
func wantJSON(t *testing.T, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.raw)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", ct)
	}
}

// field walks a dotted path through a decoded JSON object.
func field(t *testing.T, v map[string]any, path string) any {
	t.Helper()
	var cur any = v
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: %v is not an object", path, cur)
		}
		if cur, ok = m[k]; !ok {
			t.Fatalf("%s: no key %q in %v", path, k, m)
		}
	}
	return cur
}

func wantField(t *testing.T, v map[string]any, path string, want any) {
	t.Helper()
	if got := field(t, v, path); got != want {
		t.Errorf("%s = %#v, want %#v", path, got, want)
	}
}

func record(body []byte, dedupe string, headers ...store.Header) *queue.Record {
	r := &queue.Record{
		ReceivedAt: time.Now(), Tenant: "default", Source: "demo",
		ContentType: "application/json", Headers: headers, Body: body,
		Sinks: []queue.SinkRef{{Num: 0, ID: "log"}},
	}
	if dedupe != "" {
		r.DedupeKey, r.DedupeTTL = dedupe, time.Hour
	}
	return r
}

func (e *env) submit(t *testing.T, r *queue.Record) queue.Result {
	t.Helper()
	res, err := e.q.Submit(context.Background(), r)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return res
}

// probeStamp is the value of the readiness probe key (unix ns), 0 if unset.
func (e *env) probeStamp(t *testing.T) int64 {
	t.Helper()
	v, err := e.st.Get(store.KeyProbe)
	if err != nil {
		t.Fatalf("get probe: %v", err)
	}
	if v == nil {
		return 0
	}
	n, ok := store.ParseU64(v)
	if !ok {
		t.Fatalf("probe value %x is not a u64", v)
	}
	return int64(n)
}
