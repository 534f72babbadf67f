package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/store"
)

// wal.type: none end to end through a real instance and a real HTTP sink:
// a 201 only once every sink confirmed; a failing sink is 503 + Retry-After
// and nothing is kept; /v1/wal answers 409 wal_disabled; the startup line
// states the promise; no hook is ever written to the store.
func TestWALNone_AckOnlyOnceEverySinkConfirmed(t *testing.T) {
	var fail atomic.Bool
	var mu sync.Mutex
	got := map[string]int{} // x-ankusa-id -> deliveries, per target
	target := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if name == "b" && fail.Load() {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			mu.Lock()
			got[name+"/"+r.Header.Get("X-Ankusa-Id")]++
			mu.Unlock()
			w.WriteHeader(http.StatusOK)
		}))
	}
	a, b := target("a"), target("b")
	defer a.Close()
	defer b.Close()

	cfg := config.Default()
	cfg.Node.Instance = "app-none"
	cfg.Node.DataDir = t.TempDir()
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	cfg.WAL.Type = "none"
	cfg.Sources["demo"] = config.SourceConfig{
		Verify: config.VerifyConfig{Type: "none"},
		Sinks: []config.SinkConfig{
			{ID: "a", Type: "http", HTTP: &config.HTTPSink{URL: a.URL, TimeoutMs: 2000}},
			{ID: "b", Type: "http", HTTP: &config.HTTPSink{URL: b.URL, TimeoutMs: 2000}},
		},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	in := startForTest(t, cfg)
	if line := in.DurabilityLine(); !strings.Contains(line, "wal.type=none") || !strings.Contains(line, "every sink of the hook confirmed") {
		t.Fatalf("startup line %q does not state the mode's promise", line)
	}
	url := "http://" + in.IngestAddr() + "/webhooks/demo"

	ok := call(t, http.MethodPost, url)
	if ok.status != http.StatusCreated {
		t.Fatalf("post: %d %s", ok.status, ok.raw)
	}
	id := ok.body["id"].(string)
	// Already at both sinks when the 201 is read: no later delivery exists.
	mu.Lock()
	na, nb := got["a/"+id], got["b/"+id]
	mu.Unlock()
	if na != 1 || nb != 1 {
		t.Fatalf("at the 201: deliveries a=%d b=%d, want 1 and 1", na, nb)
	}

	fail.Store(true)
	bad := call(t, http.MethodPost, url)
	if bad.status != http.StatusServiceUnavailable || bad.retryAfter == "" || bad.body["error"] != "sink_unavailable" {
		t.Fatalf("failing sink: %d Retry-After %q %s, want 503 sink_unavailable", bad.status, bad.retryAfter, bad.raw)
	}

	wal := call(t, http.MethodGet, "http://"+in.AdminAddr()+"/v1/wal")
	if wal.status != http.StatusConflict || wal.body["error"] != "wal_disabled" {
		t.Fatalf("/v1/wal: %d %s, want 409 wal_disabled", wal.status, wal.raw)
	}
	if n, err := in.Store().Count([]byte{store.PrefixHook}); err != nil || n != 0 {
		t.Fatalf("hooks in the store = %d (%v), want 0: none keeps no hook", n, err)
	}
}
