package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/admin"
)

func TestAdmin_Health(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.get(t, "/health")
	wantJSON(t, r, http.StatusOK)
	wantField(t, r.body, "status", "ok")
	wantField(t, r.body, "instance", testInstance)
	wantField(t, r.body, "version", testVersion)
	wantField(t, r.body, "commit", testCommit)
	roles, _ := field(t, r.body, "roles").([]any)
	if len(roles) != 2 || roles[0] != "ingest" || roles[1] != "dispatch" {
		t.Errorf("roles = %v, want [ingest dispatch]", roles)
	}
}

func TestAdmin_Routing(t *testing.T) {
	e := newEnv(t, envOptions{})
	t.Run("unknown route", func(t *testing.T) {
		// "/" is the web console (console.go); only it, not what is below it.
		for _, p := range []string{"/nope", "/v1/hooks", "/v1/wal/extra", "/console/", "/console/nope.js"} {
			r := e.get(t, p)
			wantJSON(t, r, http.StatusNotFound)
			wantField(t, r.body, "error", "not_found")
		}
	})
	t.Run("wrong method", func(t *testing.T) {
		for _, p := range []string{"/health", "/ready", "/v1/wal", "/v1/config", "/v1/hooks/0190c6f5-0000-7000-8000-000000000000", "/metrics"} {
			r := do(t, e.h, http.MethodPost, p)
			wantJSON(t, r, http.StatusMethodNotAllowed)
			wantField(t, r.body, "error", "method_not_allowed")
			if !strings.Contains(r.header.Get("Allow"), "GET") {
				t.Errorf("POST %s: Allow = %q, want GET listed", p, r.header.Get("Allow"))
			}
		}
	})
}

func TestAdmin_WAL(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.submit(t, record([]byte(`{"n":1}`), ""))
	e.submit(t, record([]byte(`{"n":2}`), ""))

	r := e.get(t, "/v1/wal")
	wantJSON(t, r, http.StatusOK)
	wantField(t, r.body, "instance", testInstance)
	wantField(t, r.body, "wal.type", "disk")
	wantField(t, r.body, "wal.next_seq", 3.0)
	wantField(t, r.body, "wal.durable_seq", 2.0)
	wantField(t, r.body, "wal.hooks", 2.0)
	wantField(t, r.body, "wal.deliveries", 2.0)
	wantField(t, r.body, "wal.store_id", e.st.ID())
	if n, _ := field(t, r.body, "wal.disk_bytes").(float64); n <= 0 {
		t.Errorf("wal.disk_bytes = %v, want > 0", n)
	}
	if v, ok := r.body["intake"]; !ok || v != nil {
		t.Errorf("intake = %v (present %v), want null in disk mode", v, ok)
	}
}

func TestAdmin_Config(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.get(t, "/v1/config")
	wantJSON(t, r, http.StatusOK)
	if strings.Contains(r.raw, testSecret) {
		t.Fatalf("/v1/config shows the verify secret: %s", r.raw)
	}
	secrets, _ := field(t, r.body, "sources.demo.verify.secret").([]any)
	if len(secrets) != 1 || secrets[0] != "[REDACTED]" {
		t.Errorf("sources.demo.verify.secret = %v, want [\"[REDACTED]\"]", secrets)
	}
	wantField(t, r.body, "node.instance", testInstance)
	wantField(t, r.body, "wal.type", "disk")
	wantField(t, r.body, "sources.demo.verify.type", "none")
}

func TestAdmin_Metrics(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.submit(t, record([]byte(`{}`), ""))
	r := e.get(t, "/metrics")
	if r.status != http.StatusOK {
		t.Fatalf("status = %d", r.status)
	}
	for _, want := range []string{
		"ankusa_wal_sync_duration_seconds_count",
		"ankusa_wal_commit_batch_size_bucket",
		"ankusa_store_hooks 1",
		"ankusa_wal_durable_seq 1",
	} {
		if !strings.Contains(r.raw, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestHealthHandler(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := admin.HealthHandler(e.deps, admin.NewReadiness(e.deps))
	r := do(t, h, http.MethodGet, "/health")
	wantJSON(t, r, http.StatusOK)
	wantField(t, r.body, "instance", testInstance)
	r = do(t, h, http.MethodGet, "/ready")
	wantJSON(t, r, http.StatusOK)
	wantField(t, r.body, "status", "ready")
	// Only the two probes: the operator views stay on the admin port.
	for _, p := range []string{"/v1/wal", "/v1/config", "/metrics"} {
		r = do(t, h, http.MethodGet, p)
		wantJSON(t, r, http.StatusNotFound)
	}
}
