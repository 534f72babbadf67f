package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"

	"github.com/ankusa/ankusa/internal/ratelimit"
)

var tenantRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

type limitView struct {
	Tenant string  `json:"tenant,omitempty"`
	Rate   float64 `json:"rate"`
	Burst  int     `json:"burst"`
	Source string  `json:"source,omitempty"` // override | config | default | unlimited
}

func routeRateLimits(mux *http.ServeMux, a *api) {
	mux.HandleFunc("GET /v1/rate-limits", a.listRateLimits)
	mux.HandleFunc("GET /v1/tenants/{tenant}/rate-limit", a.getRateLimit)
	mux.HandleFunc("PUT /v1/tenants/{tenant}/rate-limit", a.putRateLimit)
	mux.HandleFunc("DELETE /v1/tenants/{tenant}/rate-limit", a.deleteRateLimit)
}

func (a *api) listRateLimits(w http.ResponseWriter, _ *http.Request) {
	rl := a.d.Config.RateLimits
	out := map[string]any{"default": nil, "tenants": map[string]limitView{}, "overrides": map[string]limitView{}}
	if rl.Default != nil {
		out["default"] = limitView{Rate: rl.Default.Rate, Burst: rl.Default.Burst}
	}
	for t, l := range rl.Tenants {
		out["tenants"].(map[string]limitView)[t] = limitView{Rate: l.Rate, Burst: l.Burst}
	}
	for t, l := range a.d.RateLimits.List() {
		out["overrides"].(map[string]limitView)[t] = limitView{Rate: l.Rate, Burst: l.Burst}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) tenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	t := r.PathValue("tenant")
	if !tenantRE.MatchString(t) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_tenant", "message": "tenant ids match [A-Za-z0-9_-]{1,64}"})
		return "", false
	}
	return t, true
}

func (a *api) getRateLimit(w http.ResponseWriter, r *http.Request) {
	t, ok := a.tenant(w, r)
	if !ok {
		return
	}
	l, src := a.d.RateLimits.Effective(t)
	writeJSON(w, http.StatusOK, limitView{Tenant: t, Rate: l.Rate, Burst: l.Burst, Source: src})
}

func (a *api) putRateLimit(w http.ResponseWriter, r *http.Request) {
	t, ok := a.tenant(w, r)
	if !ok {
		return
	}
	var body struct {
		Rate  float64 `json:"rate"`
		Burst int     `json:"burst"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_rate_limit", "message": err.Error()})
		return
	}
	l, err := a.d.RateLimits.Put(t, ratelimit.Limit{Rate: body.Rate, Burst: body.Burst})
	switch {
	case errors.Is(err, ratelimit.ErrBadLimit):
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_rate_limit", "message": err.Error()})
	case err != nil:
		a.unavailable(w, err)
	default:
		writeJSON(w, http.StatusOK, limitView{Tenant: t, Rate: l.Rate, Burst: l.Burst, Source: "override"})
	}
}

func (a *api) deleteRateLimit(w http.ResponseWriter, r *http.Request) {
	t, ok := a.tenant(w, r)
	if !ok {
		return
	}
	found, err := a.d.RateLimits.Delete(t)
	switch {
	case err != nil:
		a.unavailable(w, err)
	case !found:
		writeJSON(w, http.StatusNotFound, errorBody(errNotFound))
	default:
		l, src := a.d.RateLimits.Effective(t)
		writeJSON(w, http.StatusOK, limitView{Tenant: t, Rate: l.Rate, Burst: l.Burst, Source: src})
	}
}
