package admin_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/admin"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	readToken    = "read_0123456789abcdef"
	operateToken = "operate_0123456789abcdef"
)

// authEnv is newEnv with a quarantine pen holding one hook and two tokens:
// "grafana" (read, given as its SHA-256) and "alice" (operate).
type authEnv struct {
	*env
	pen  *quarantine.Pen
	gate *testutil.WALSyncGate
}

func newAuthEnv(t *testing.T, tokens bool, open []string) *authEnv {
	t.Helper()
	gate := testutil.NewWALSyncGate()
	e := newEnv(t, envOptions{fs: gate.Wrap(vfs.Default)})
	if tokens {
		sum := sha256.Sum256([]byte(readToken))
		e.cfg.Admin.Tokens = []config.AdminToken{
			{Name: "grafana", TokenSHA256: hex.EncodeToString(sum[:]), Role: config.AdminRoleRead},
			{Name: "alice", Token: operateToken, Role: config.AdminRoleOperate},
		}
	}
	if open != nil {
		e.cfg.Admin.Open = open
	}
	pen, err := quarantine.New(e.st, quarantine.Options{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"held":true}`)
	if err := pen.Hold(t.Context(), &store.Envelope{
		ID: uuid.Must(uuid.NewV7()), ReceivedAt: 1, Tenant: "default", Source: "demo",
		Body: body, SHA256: sha256.Sum256(body),
	}, "no_match"); err != nil {
		t.Fatal(err)
	}
	e.deps.Quarantine = pen
	e.h = admin.New(e.deps)
	return &authEnv{env: e, pen: pen, gate: gate}
}

func (e *authEnv) call(t *testing.T, method, path, authz string) response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	res := response{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(rec.Body.Bytes(), &res.body)
	}
	return res
}

func TestOperatorAuth(t *testing.T) {
	e := newAuthEnv(t, true, nil)
	hook := e.submit(t, record([]byte(`{"n":1}`), ""))
	hookPath := "/v1/hooks/" + uuid.UUID(hook.ID).String()
	read, operate := "Bearer "+readToken, "Bearer "+operateToken
	tests := []struct {
		name, method, path, authz string
		status                    int
		errCode                   string
	}{
		{"health open", "GET", "/health", "", 200, ""},
		{"ready open", "GET", "/ready", "", 200, ""},
		{"metrics open", "GET", "/metrics", "", 200, ""},
		{"wal needs a token", "GET", "/v1/wal", "", 401, "unauthorized"},
		{"config needs a token", "GET", "/v1/config", "", 401, "unauthorized"},
		{"unknown route needs a token", "GET", "/v1/nope", "", 401, "unauthorized"},
		{"wrong token", "GET", "/v1/wal", "Bearer " + readToken + "x", 401, "unauthorized"},
		{"token prefix", "GET", "/v1/wal", "Bearer " + readToken[:8], 401, "unauthorized"},
		{"basic scheme", "GET", "/v1/wal", "Basic " + readToken, 401, "unauthorized"},
		{"read: wal", "GET", "/v1/wal", read, 200, ""},
		{"read: lower-case scheme", "GET", "/v1/wal", "bearer " + readToken, 200, ""},
		{"read: hook", "GET", hookPath, read, 200, ""},
		{"read: hook body", "GET", hookPath + "?body=1", read, 403, "forbidden"},
		{"read: quarantine list", "GET", "/v1/quarantine", read, 200, ""},
		{"read: purge", "DELETE", "/v1/quarantine?all=true", read, 403, "forbidden"},
		{"read: audit", "GET", "/v1/audit", read, 200, ""},
		{"read: unknown route", "GET", "/v1/nope", read, 404, "not_found"},
		{"operate: hook body", "GET", hookPath + "?body=1", operate, 200, ""},
		{"operate: wal", "GET", "/v1/wal", operate, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(t, tt.method, tt.path, tt.authz)
			if r.status != tt.status {
				t.Fatalf("%s %s = %d, want %d; body %s", tt.method, tt.path, r.status, tt.status, r.raw)
			}
			if tt.errCode != "" {
				wantJSON(t, r, tt.status)
				wantField(t, r.body, "error", tt.errCode)
			}
			if tt.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if n, _ := e.pen.Stats(); n != 1 {
		t.Fatalf("a refused purge changed the pen: %d held, want 1", n)
	}

	// The operate token purges, and the purge is in the audit trail with
	// who, what and how it ended; refused calls are not.
	if r := e.call(t, "DELETE", "/v1/quarantine?all=true", operate); r.status != 200 {
		t.Fatalf("purge = %d %s", r.status, r.raw)
	}
	r := e.call(t, "GET", "/v1/audit", read)
	wantJSON(t, r, 200)
	entries := field(t, r.body, "entries").([]any)
	if len(entries) != 1 {
		t.Fatalf("audit = %s, want one row", r.raw)
	}
	row := entries[0].(map[string]any)
	for k, want := range map[string]any{
		"actor": "alice", "action": "DELETE /v1/quarantine", "method": "DELETE",
		"path": "/v1/quarantine", "status": float64(200),
	} {
		if row[k] != want {
			t.Errorf("audit %s = %#v, want %#v (row %v)", k, row[k], want, row)
		}
	}
	if q := field(t, row, "detail.query.all"); q.([]any)[0] != "true" {
		t.Errorf("audit detail.query.all = %v", q)
	}
}

// admin.open: [] closes the probes too; admin.open: [metrics] opens only it.
func TestOperatorAuthOpenRoutes(t *testing.T) {
	e := newAuthEnv(t, true, []string{})
	if r := e.call(t, "GET", "/health", ""); r.status != 401 {
		t.Fatalf("closed /health = %d", r.status)
	}
	e = newAuthEnv(t, true, []string{"metrics"})
	if r := e.call(t, "GET", "/metrics", ""); r.status != 200 {
		t.Fatalf("open /metrics = %d", r.status)
	}
	if r := e.call(t, "GET", "/ready", ""); r.status != 401 {
		t.Fatalf("closed /ready = %d", r.status)
	}
}

// With no tokens (a loopback admin.ip) every route answers as before
// authentication existed, and mutating calls are audited as anonymous.
func TestOperatorAuthNoTokens(t *testing.T) {
	e := newAuthEnv(t, false, nil)
	if r := e.call(t, "GET", "/v1/wal", ""); r.status != 200 {
		t.Fatalf("/v1/wal = %d", r.status)
	}
	if r := e.call(t, "DELETE", "/v1/quarantine?all=true", ""); r.status != 200 {
		t.Fatalf("purge = %d %s", r.status, r.raw)
	}
	r := e.call(t, "GET", "/v1/audit", "")
	wantField(t, field(t, r.body, "entries").([]any)[0].(map[string]any), "actor", "anonymous")
}

// A mutating call whose audit row cannot be made durable does not run.
func TestOperatorAuthAuditFailureRefusesTheCall(t *testing.T) {
	e := newAuthEnv(t, true, nil)
	e.gate.FailNext(1)
	r := e.call(t, "DELETE", "/v1/quarantine?all=true", "Bearer "+operateToken)
	wantJSON(t, r, http.StatusServiceUnavailable)
	wantField(t, r.body, "error", "store_unavailable")
	if n, _ := e.pen.Stats(); n != 1 {
		t.Fatalf("pen holds %d after a refused purge, want 1", n)
	}
}

// Every route this package registers has a role in the table, and the
// table is the one docs/operations.md shows: a route missing from it would
// need operate (safe, but undocumented). The routes are read from the
// package's source, so one added later cannot be forgotten.
func TestEveryRouteHasARole(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`mux\.Handle(?:Func)?\("([A-Z]+ [^"]+)"`)
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			n++
			role, ok := admin.RouteRole(m[1])
			if !ok {
				t.Errorf("%s: route %q has no role in routeRoles", f, m[1])
				continue
			}
			method, path, _ := strings.Cut(m[1], " ")
			row := "| `" + method + "` | `" + path + "` | " + role + " |"
			if !strings.Contains(string(doc), row) {
				t.Errorf("docs/operations.md has no row %q", row)
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d routes in the source: the pattern no longer matches how routes are registered", n)
	}
}
