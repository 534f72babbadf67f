package admin_test

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/admin"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// penAPI is the quarantine routes over a real pen holding six hooks of
// sources a and b, one second apart from penBase: a0 b1 a2 b3 a4 b5.
type penAPI struct {
	pen *quarantine.Pen
	h   http.Handler
	ids []string
}

var penBase = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func newPenAPI(t *testing.T) *penAPI {
	t.Helper()
	st := testutil.OpenStore(t, "/data/store", vfs.NewMem())
	pen, err := quarantine.New(st, quarantine.Options{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	a := &penAPI{pen: pen}
	for i := range 6 {
		src := "a"
		if i%2 == 1 {
			src = "b"
		}
		id := uuid.Must(uuid.NewV7())
		body := []byte(`{"secret_body":` + strings.Repeat("1", i+1) + `}`)
		env := &store.Envelope{
			ID: id, ReceivedAt: penBase.Add(time.Duration(i) * time.Second).UnixNano(),
			Tenant: "default", Source: src, ContentType: "application/json",
			Body: body, SHA256: sha256.Sum256(body),
		}
		if err := pen.Hold(t.Context(), env, "no_match"); err != nil {
			t.Fatal(err)
		}
		a.ids = append(a.ids, id.String())
	}
	mux := http.NewServeMux()
	admin.QuarantineRoutes(mux, pen, testutil.Logger(t))
	a.h = mux
	return a
}

func (a *penAPI) do(t *testing.T, method, query string) (int, map[string]any, *httptest.ResponseRecorder) {
	t.Helper()
	req := httptest.NewRequest(method, "/v1/quarantine"+query, nil)
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, req)
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q, body %s", method, query, ct, w.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, query, w.Body, err)
	}
	return w.Code, m, w
}

func ts(i int) string {
	return url.QueryEscape(penBase.Add(time.Duration(i) * time.Second).Format(time.RFC3339))
}

func entryIDs(t *testing.T, m map[string]any) []string {
	t.Helper()
	es, ok := m["entries"].([]any)
	if !ok {
		t.Fatalf("no entries array: %v", m)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.(map[string]any)["id"].(string))
	}
	return out
}

func TestQuarantineList(t *testing.T) {
	a := newPenAPI(t)
	id := func(i ...int) string {
		var out []string
		for _, x := range i {
			out = append(out, a.ids[x])
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		query string
		total float64
		want  string
	}{
		{"", 6, id(5, 4, 3, 2, 1, 0)},
		{"?source_id=a", 3, id(4, 2, 0)},
		{"?limit=2", 6, id(5, 4)},
		{"?since=" + ts(2) + "&until=" + ts(4), 3, id(4, 3, 2)},
		{"?source_id=b&since=" + ts(2), 2, id(5, 3)},
		{"?source_id=nobody", 0, ""},
	}
	for _, tt := range tests {
		code, m, _ := a.do(t, http.MethodGet, tt.query)
		if code != http.StatusOK || m["total"] != tt.total || strings.Join(entryIDs(t, m), ",") != tt.want {
			t.Errorf("GET %q = %d total %v %v; want total %v %v", tt.query, code, m["total"], entryIDs(t, m), tt.total, tt.want)
		}
	}

	_, _, w := a.do(t, http.MethodGet, "?limit=1")
	if strings.Contains(w.Body.String(), "secret_body") {
		t.Fatalf("the listing carries a body: %s", w.Body)
	}
	var got struct {
		Entries []map[string]any `json:"entries"`
	}
	_ = json.Unmarshal(w.Body.Bytes(), &got)
	e := got.Entries[0]
	if e["source_id"] != "b" || e["tenant_id"] != "default" || e["reason"] != "no_match" ||
		e["content_type"] != "application/json" || e["size"] != float64(len(`{"secret_body":111111}`)) ||
		e["received_at"] != penBase.Add(5*time.Second).Format(time.RFC3339Nano) {
		t.Fatalf("entry = %v", e)
	}

	for _, q := range []string{"?since=yesterday", "?until=1714564800", "?limit=0", "?limit=1001", "?limit=x",
		"?since=" + ts(4) + "&until=" + ts(2)} {
		code, m, _ := a.do(t, http.MethodGet, q)
		if code != http.StatusBadRequest || !strings.HasPrefix(m["error"].(string), "invalid_") {
			t.Errorf("GET %q = %d %v, want 400 invalid_*", q, code, m)
		}
	}
}

func TestQuarantinePurge(t *testing.T) {
	a := newPenAPI(t)
	bad := []struct{ query, code string }{
		{"", "unfiltered_purge"},
		{"?all=false", "invalid_all"},
		{"?all=1", "invalid_all"},
		{"?all=true&source_id=a", "invalid_parameter"},
		{"?sourceid=a", "invalid_parameter"},
		{"?source_id=a&source_id=b", "invalid_parameter"},
		{"?source_id=", "invalid_source_id"},
		{"?id=nope", "invalid_id"},
		{"?since=" + ts(3) + "&until=" + ts(1), "invalid_range"},
		{"?since=soon", "invalid_since"},
	}
	for _, tt := range bad {
		code, m, _ := a.do(t, http.MethodDelete, tt.query)
		if code != http.StatusBadRequest || m["error"] != tt.code {
			t.Errorf("DELETE %q = %d %v, want 400 %s", tt.query, code, m, tt.code)
		}
	}
	if n, _ := a.pen.Stats(); n != 6 {
		t.Fatalf("refused purges deleted rows: %d left", n)
	}

	steps := []struct {
		query  string
		purged float64
		left   int
	}{
		{"?id=" + a.ids[0], 1, 5},
		{"?id=" + a.ids[0], 0, 5},
		{"?source_id=b&since=" + ts(3), 2, 3}, // b3, b5
		{"?since=" + ts(1) + "&until=" + ts(2), 2, 1},
		{"?all=true", 1, 0},
	}
	for _, s := range steps {
		code, m, _ := a.do(t, http.MethodDelete, s.query)
		if code != http.StatusOK || m["purged"] != s.purged {
			t.Fatalf("DELETE %q = %d %v, want purged %v", s.query, code, m, s.purged)
		}
		if n, _ := a.pen.Stats(); n != s.left {
			t.Fatalf("after DELETE %q: %d held, want %d", s.query, n, s.left)
		}
	}
	code, m, _ := a.do(t, http.MethodGet, "")
	if code != http.StatusOK || m["total"] != float64(0) || len(m["entries"].([]any)) != 0 {
		t.Fatalf("GET after purging all = %d %v", code, m)
	}
}

func TestQuarantineRoutesNilPen(t *testing.T) {
	mux := http.NewServeMux()
	admin.QuarantineRoutes(mux, nil, nil)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/quarantine", nil))
	if w.Code != http.StatusNotFound {
		t.Fatalf("GET without a pen = %d", w.Code)
	}
}
