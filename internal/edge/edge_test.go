package edge_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

type nopObserver struct{}

func (nopObserver) Ingest(string, string, time.Duration) {}
func (nopObserver) IngestRefused(string)                 {}

type fixture struct {
	srv   *httptest.Server
	st    *store.Store
	q     *queue.Queue
	gate  *testutil.WALSyncGate
	limit int64
}

func newFixture(t *testing.T, routing string, qopts queue.Options) *fixture {
	t.Helper()
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	q := testutil.StartQueue(t, st, qopts)
	sinks := []queue.SinkRef{{Num: 0, ID: "log"}}
	h := edge.New(edge.Options{
		Routing: routing, Prefix: "/webhooks", MaxBodyBytes: 1000,
		Sources: edge.NewRegistry(map[string]*edge.Source{
			"demo":   {ID: "demo", Sinks: sinks},
			"github": {ID: "github", Tenant: "acme", Sinks: sinks, Dedupe: dedupe.New(&dedupe.Options{Preset: "github", TTL: 60 * time.Second})},
		}),
		Committer: q, Observer: nopObserver{}, Logger: testutil.Logger(t),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, st: st, q: q, gate: gate, limit: 1000}
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
}

func (f *fixture) post(t *testing.T, path string, body io.Reader, hdr map[string]string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, body)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return reply{resp.StatusCode, resp.Header, m}
}

func (f *fixture) stored(t *testing.T, id string) *store.Envelope {
	t.Helper()
	u, err := uuid.Parse(id)
	if err != nil {
		t.Fatalf("bad id %q: %v", id, err)
	}
	sv, err := f.st.Get(store.HookIDKey(u))
	if err != nil || sv == nil {
		t.Fatalf("hook %s not in store (%v)", id, err)
	}
	seq, _ := store.ParseU64(sv)
	hv, _ := f.st.Get(store.HookKey(seq))
	env, err := store.DecodeEnvelope(hv)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestIngest_Statuses(t *testing.T) {
	f := newFixture(t, "path", queue.Options{})
	tests := []struct {
		name   string
		path   string
		body   io.Reader
		hdr    map[string]string
		status int
		errKey string
	}{
		{"accepted", "/webhooks/demo", strings.NewReader(`{"a":1}`), nil, 201, ""},
		{"unknown source", "/webhooks/nope", strings.NewReader(`{}`), nil, 404, "unknown_source"},
		{"too many segments", "/webhooks/demo/extra", strings.NewReader(`{}`), nil, 404, "unknown_source"},
		{"empty source", "/webhooks/", strings.NewReader(`{}`), nil, 404, "unknown_source"},
		{"declared length over the limit", "/webhooks/demo", bytes.NewReader(make([]byte, 1001)), nil, 413, "payload_too_large"},
		{"chunked body over the limit", "/webhooks/demo", io.MultiReader(strings.NewReader(strings.Repeat("x", 600)), strings.NewReader(strings.Repeat("y", 600))), nil, 413, "payload_too_large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.post(t, tc.path, tc.body, tc.hdr)
			if r.status != tc.status {
				t.Fatalf("status = %d, want %d (body %v)", r.status, tc.status, r.body)
			}
			if tc.errKey != "" && r.body["error"] != tc.errKey {
				t.Fatalf("error = %v, want %q", r.body["error"], tc.errKey)
			}
			if tc.status == 413 && r.body["limit"] != float64(1000) {
				t.Fatalf("limit = %v, want 1000", r.body["limit"])
			}
			if tc.errKey == "invalid_header" && r.body["header"] != "x-odd" {
				t.Fatalf("header = %v, want x-odd", r.body["header"])
			}
		})
	}
	if n := f.q.Stats().Hooks; n != 1 {
		t.Fatalf("hooks stored = %d, want only the accepted one", n)
	}
}

// TestIngest_HeaderBytes: RFC 9110 allows obs-text (0x80–0xFF) in a field
// value and Go's server passes it through; a provider's request must not be
// refused for it, and the bytes are stored exactly as sent (not re-encoded).
// What stays refused is a control character (DEL, 0x7F) in a value, which a
// raw request can carry past the recorder-level handler.
func TestIngest_HeaderBytes(t *testing.T) {
	f := newFixture(t, "path", queue.Options{})
	for _, v := range []string{"caf\xc3\xa9", "\x80\xff latin-1 \xe9", "tab\tinside"} {
		r := f.post(t, "/webhooks/demo", strings.NewReader(`{}`), map[string]string{"X-Note": v})
		if r.status != 201 {
			t.Fatalf("X-Note %q: status %d %v, want 201", v, r.status, r.body)
		}
		var got []string
		for _, h := range f.stored(t, r.body["id"].(string)).Headers {
			if h.Name == "x-note" {
				got = append(got, h.Value)
			}
		}
		if len(got) != 1 || got[0] != v {
			t.Fatalf("stored x-note %q, want exactly %q", got, v)
		}
	}
	// DEL never reaches a handler through Go's server; called directly the
	// edge still refuses it, naming the header.
	h := edge.New(edge.Options{
		Routing: "path", Prefix: "/webhooks", MaxBodyBytes: 1000,
		Sources:   edge.NewRegistry(map[string]*edge.Source{"demo": {ID: "demo", Sinks: []queue.SinkRef{{ID: "log"}}}}),
		Committer: f.q, Observer: nopObserver{}, Logger: testutil.Logger(t),
	})
	for _, bad := range []string{"del\x7f", "nul\x00", "lf\n"} {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/demo", strings.NewReader(`{}`))
		req.Header["X-Odd"] = []string{bad}
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, req)
		if rw.Code != 400 || !strings.Contains(rw.Body.String(), `"header":"x-odd"`) {
			t.Fatalf("X-Odd %q: %d %s, want 400 invalid_header naming x-odd", bad, rw.Code, rw.Body.String())
		}
	}
}

func TestIngest_StoresRawBodyAndHeaders(t *testing.T) {
	f := newFixture(t, "path", queue.Options{})
	body := []byte("{\"b\": [1, 2 ,3]}\n\x00\xff trailing")
	r := f.post(t, "/webhooks/demo", bytes.NewReader(body), map[string]string{"Content-Type": "application/x-odd", "X-Sig": "abc"})
	if r.status != 201 || r.body["status"] != "accepted" {
		t.Fatalf("reply = %+v", r)
	}
	id := r.body["id"].(string)
	if u := uuid.MustParse(id); u.Version() != 7 {
		t.Fatalf("id %s is UUID v%d, want v7", id, u.Version())
	}
	env := f.stored(t, id)
	if !bytes.Equal(env.Body, body) {
		t.Fatalf("stored body %q, want %q", env.Body, body)
	}
	if env.ContentType != "application/x-odd" || env.Tenant != "default" || env.Source != "demo" {
		t.Fatalf("envelope = %+v", env)
	}
	found := false
	for _, h := range env.Headers {
		if h.Name == "x-sig" && h.Value == "abc" {
			found = true
		}
	}
	if !found {
		t.Fatalf("x-sig not kept: %+v", env.Headers)
	}
}

func TestIngest_DuplicateAnswersOriginalID(t *testing.T) {
	f := newFixture(t, "path", queue.Options{})
	h := map[string]string{"X-GitHub-Delivery": "d-1"}
	a := f.post(t, "/webhooks/github", strings.NewReader(`{"n":1}`), h)
	b := f.post(t, "/webhooks/github", strings.NewReader(`{"n":1}`), h)
	if a.status != 201 || b.status != 201 {
		t.Fatalf("statuses %d, %d", a.status, b.status)
	}
	if b.body["duplicate"] != true || b.body["id"] != a.body["id"] {
		t.Fatalf("duplicate reply %v, original %v", b.body, a.body)
	}
	if _, ok := a.body["duplicate"]; ok {
		t.Fatalf("original reply carries duplicate: %v", a.body)
	}
	if env := f.stored(t, a.body["id"].(string)); env.Tenant != "acme" || env.DedupeKey != "d-1" {
		t.Fatalf("tenant %q dedupe %q; want the source's tenant acme and key d-1", env.Tenant, env.DedupeKey)
	}
}

func TestIngest_TenantPath(t *testing.T) {
	f := newFixture(t, "tenant_path", queue.Options{})
	r := f.post(t, "/webhooks/t-1/demo", strings.NewReader(`{}`), nil)
	if r.status != 201 {
		t.Fatalf("status %d", r.status)
	}
	if env := f.stored(t, r.body["id"].(string)); env.Tenant != "t-1" {
		t.Fatalf("tenant = %q, want t-1", env.Tenant)
	}
	for _, p := range []string{"/webhooks/demo", "/webhooks/bad.tenant/demo", "/webhooks/" + strings.Repeat("t", 65) + "/demo"} {
		if r := f.post(t, p, strings.NewReader(`{}`), nil); r.status != 404 {
			t.Fatalf("%s: status %d, want 404", p, r.status)
		}
	}
}

func TestIngest_Unavailable(t *testing.T) {
	t.Run("store_unavailable when the fsync fails", func(t *testing.T) {
		f := newFixture(t, "path", queue.Options{})
		f.gate.FailNext(1)
		r := f.post(t, "/webhooks/demo", strings.NewReader(`{}`), nil)
		if r.status != 503 || r.body["error"] != "store_unavailable" || r.header.Get("Retry-After") != "1" {
			t.Fatalf("reply = %d %v Retry-After=%q", r.status, r.body, r.header.Get("Retry-After"))
		}
	})
	t.Run("overload when the batcher is full", func(t *testing.T) {
		f := newFixture(t, "path", queue.Options{MaxQueue: 1})
		f.gate.Hold()
		first := make(chan reply, 1)
		go func() { first <- f.post(t, "/webhooks/demo", strings.NewReader(`{}`), nil) }()
		release := f.gate.Held(t)
		r := f.post(t, "/webhooks/demo", strings.NewReader(`{}`), nil)
		if r.status != 503 || r.body["error"] != "overload" || r.header.Get("Retry-After") != "1" {
			t.Fatalf("reply = %d %v Retry-After=%q", r.status, r.body, r.header.Get("Retry-After"))
		}
		f.gate.Open()
		close(release)
		if r := <-first; r.status != 201 {
			t.Fatalf("first request: %d", r.status)
		}
	})
}
