package edge_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ankusa/ankusa/internal/edge"
)

// TestRefuseWhile: while boot recovery runs every request is 503
// intake_unavailable "recovering" with Retry-After (at least 1 s) and
// never reaches the handler; afterwards the handler answers.
func TestRefuseWhile(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter int
		wantRA     string
	}{
		{"intake.retry_after_s", 7, "7"},
		{"unset is 1 s", 0, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var recovering atomic.Bool
			recovering.Store(true)
			var served atomic.Int32
			h := edge.RefuseWhile(recovering.Load, tc.retryAfter, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				served.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			rr := httptest.NewRecorder()
			h.ServeHTTP(rr, httptest.NewRequest(http.MethodPost, "/webhooks/demo", strings.NewReader("{}")))
			if rr.Code != http.StatusServiceUnavailable || rr.Header().Get("Retry-After") != tc.wantRA ||
				rr.Header().Get("Content-Type") != "application/json" ||
				rr.Body.String() != `{"error":"intake_unavailable","reason":"recovering"}`+"\n" || served.Load() != 0 {
				t.Fatalf("recovering: %d Retry-After %q %q served %d", rr.Code, rr.Header().Get("Retry-After"), rr.Body.String(), served.Load())
			}
			recovering.Store(false)
			rr = httptest.NewRecorder()
			h.ServeHTTP(rr, httptest.NewRequest(http.MethodPost, "/webhooks/demo", strings.NewReader("{}")))
			if rr.Code != http.StatusCreated || served.Load() != 1 {
				t.Fatalf("recovered: %d served %d, want the handler's 201", rr.Code, served.Load())
			}
		})
	}
}
