package edge_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/testutil"
)

// FuzzIngest drives the ingest handler with arbitrary paths, headers and
// bodies. Invariants: no panic; the status is one the contract lists; every
// 4xx/5xx has a JSON body naming an error; a 201 names an id; a 201 is only
// given for a request that reached a configured source.
func FuzzIngest(f *testing.F) {
	f.Add("/webhooks/demo", "X-Event-Id", "e1", []byte(`{"id":"evt_1"}`))
	f.Add("/webhooks/stripe", "Content-Type", "application/json", []byte(`{"id":42}`))
	f.Add("/webhooks/", "", "", []byte{})
	f.Add("/webhooks/demo/x", "X-Odd", "caf\xc3\xa9", []byte{0, 1, 2})
	f.Add("/webhooks/nope", "X-Event-Id", strings.Repeat("k", 300), []byte(strings.Repeat("x", 2000)))
	st := testutil.OpenStore(f, testutil.TempStoreDir(f), nil)
	q := testutil.StartQueue(f, st, queue.Options{})
	sinks := []queue.SinkRef{{Num: 0, ID: "log"}}
	h := edge.New(edge.Options{
		Routing: "path", Prefix: "/webhooks", MaxBodyBytes: 1024,
		Sources: edge.NewRegistry(map[string]*edge.Source{
			"demo":   {ID: "demo", Sinks: sinks, Dedupe: dedupe.New(&dedupe.Options{Header: "X-Event-Id", TTL: 60 * time.Second})},
			"stripe": {ID: "stripe", Sinks: sinks, Dedupe: dedupe.New(&dedupe.Options{Preset: "stripe", TTL: 60 * time.Second})},
		}),
		Committer: q, Observer: nopObserver{}, Logger: testutil.Logger(f),
	})
	allowed := map[int]bool{201: true, 400: true, 404: true, 405: true, 413: true, 503: true}
	f.Fuzz(func(t *testing.T, path, hname, hval string, body []byte) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req := httptest.NewRequest(http.MethodPost, "http://x/", bytes.NewReader(body))
		req.URL.Path = path
		if hname != "" {
			req.Header[hname] = []string{hval}
		}
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, req)
		if !allowed[rw.Code] {
			t.Fatalf("status %d is not in the contract (path %q)", rw.Code, path)
		}
		var m map[string]any
		if err := json.Unmarshal(rw.Body.Bytes(), &m); err != nil {
			t.Fatalf("status %d body %q is not JSON", rw.Code, rw.Body.String())
		}
		if rw.Code == 201 {
			if _, ok := m["id"].(string); !ok {
				t.Fatalf("201 without an id: %v", m)
			}
			if path != "/webhooks/demo" && path != "/webhooks/stripe" {
				t.Fatalf("201 for path %q, which names no configured source", path)
			}
		} else if _, ok := m["error"].(string); !ok {
			t.Fatalf("status %d without an error: %v", rw.Code, m)
		}
	})
}
