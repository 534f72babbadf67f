package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ankusa/ankusa/internal/admin"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/testutil"
)

// TestReady_ReportsRecovering: while boot recovery replays the intake log,
// /ready is 503 with intake "recovering"; after it, ready again.
func TestReady_ReportsRecovering(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	var recovering atomic.Bool
	recovering.Store(true)
	h := admin.New(admin.Deps{Config: config.Default(), Store: st, Queue: q, Recovering: recovering.Load})
	get := func() (int, map[string]any) {
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, httptest.NewRequest(http.MethodGet, "/ready", nil))
		var m map[string]any
		_ = json.Unmarshal(rw.Body.Bytes(), &m)
		return rw.Code, m
	}
	if code, m := get(); code != 503 || m["intake"] != "recovering" || m["reason"] != "recovering" {
		t.Fatalf("during recovery: %d %v", code, m)
	}
	recovering.Store(false)
	if code, m := get(); code != 200 || m["intake"] != "up" {
		t.Fatalf("after recovery: %d %v", code, m)
	}
}
