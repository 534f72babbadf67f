// Package admin is the operator API (port 4002, bound to admin.ip): health,
// readiness, metrics and read-only views of the WAL, the config and single
// hooks. The ingest listener serves the same /health and /ready through
// HealthHandler, so a load balancer and an operator see one answer.
//
// Every answer is JSON, errors included: {"error":"<code>"}.
//
// With admin.tokens set, every route but those in admin.open needs a bearer
// token whose role covers it (auth.go, routeRoles), and every mutating call
// is written to the store's audit trail before it runs (GET /v1/audit).
package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/ratelimit"
	"github.com/ankusa/ankusa/internal/sources"
	"github.com/ankusa/ankusa/internal/store"
)

// Deps is what the operator API reads. Config, Store and Queue are
// required; a nil Registry leaves /metrics unrouted.
type Deps struct {
	// Recovering, when set and true, makes /ready answer 503 with intake
	// "recovering" (boot recovery is replaying the intake log).
	Recovering func() bool
	Config     *config.Config
	Store      *store.Store
	Queue      *queue.Queue
	// Dispatch, when set, serves /v1/dlq and /v1/replays.
	Dispatch *dispatch.Dispatcher
	// Sources, when set (source_store.type: persistent), serves
	// /v1/tenants/{t}/sources[/{name}].
	Sources *sources.Manager
	// Quarantine, when set, serves GET/DELETE /v1/quarantine.
	Quarantine *quarantine.Pen
	// RateLimits, when set, serves /v1/rate-limits and /v1/tenants/{t}/rate-limit.
	RateLimits *ratelimit.Overrides
	Registry   *prometheus.Registry
	Version    string
	Commit     string // the build's VCS revision (-ldflags), shown by /health
	Logger     *slog.Logger
	Now        func() time.Time // nil = time.Now
	// Fleet, when set (dedupe.scope: fleet), is pinged by /ready: a node
	// whose claim store does not answer cannot take dedupe-keyed hooks.
	Fleet interface{ Ping(context.Context) error }
	// Readiness, when set, is the check New serves /ready with. Pass the
	// one given to HealthHandler so both ports share one probe cache (at
	// most one probe write per second in all); nil builds a new one.
	Readiness *Readiness
}

func (d *Deps) fill() {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
}

// Error codes of the JSON error bodies.
const (
	errNotFound         = "not_found"
	errMethodNotAllowed = "method_not_allowed"
	errInvalidID        = "invalid_id"
	errStoreUnavailable = "store_unavailable"
	errCorrupt          = "corrupt_record"
	errWALDisabled      = "wal_disabled"
)

// New returns the operator API handler.
func New(d Deps) http.Handler {
	d.fill()
	a := &api{d: d, log: d.Logger.With("component", "admin")}
	mux := http.NewServeMux()
	rd := d.Readiness
	if rd == nil {
		rd = NewReadiness(d)
	}
	routeHealth(mux, d, rd)
	if d.Registry != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /v1/wal", a.wal)
	mux.HandleFunc("GET /v1/config", a.config)
	mux.HandleFunc("GET /v1/hooks/{id}", a.hook)
	mux.HandleFunc("GET /v1/audit", a.audit)
	if d.Dispatch != nil {
		routeDispatch(mux, a)
	}
	if d.RateLimits != nil {
		routeRateLimits(mux, a)
	}
	QuarantineRoutes(mux, d.Quarantine, d.Logger) // a nil pen routes nothing
	if d.Sources != nil {
		SourceRoutes(mux, d.Sources, d.Logger)
	}
	ac := newAccess(a)
	routeConsole(mux, ac, d.Registry)
	return ac.wrap(mux, jsonErrors(mux))
}

type api struct {
	d   Deps
	log *slog.Logger
}

// config serves the effective configuration with every secret redacted
// (config.Config.Redacted is an allowlist: unknown keys are hidden).
func (a *api) config(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.d.Config.Redacted())
}

// jsonErrors answers the mux's own 404 and 405 (no route, wrong method)
// with JSON bodies instead of Go's plain text, keeping the status and the
// Allow header the mux sets. Matched routes are served as they are.
func jsonErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // ServeHTTP, not h: it sets the path values
			return
		}
		h.ServeHTTP(&errorRewriter{ResponseWriter: w}, r)
	})
}

// errorRewriter replaces the body of an error the mux writes with
// {"error":…}; the mux's text is dropped.
type errorRewriter struct {
	http.ResponseWriter
	wrote bool
}

func (e *errorRewriter) WriteHeader(code int) {
	if e.wrote {
		return
	}
	e.wrote = true
	e.Header().Del("X-Content-Type-Options")
	e.Header().Del("Content-Length")
	msg := errNotFound
	if code == http.StatusMethodNotAllowed {
		msg = errMethodNotAllowed
	}
	writeJSON(e.ResponseWriter, code, errorBody(msg))
}

func (e *errorRewriter) Write(p []byte) (int, error) {
	if !e.wrote {
		e.WriteHeader(http.StatusOK)
	}
	return len(p), nil
}

func errorBody(code string) map[string]any { return map[string]any{"error": code} }

// writeJSON writes v as the whole answer. Operator answers describe the
// present moment, so nothing may cache them.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
