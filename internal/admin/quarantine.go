package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/quarantine"
)

// QuarantineRoutes serves the quarantine pen on mux:
//
//	GET    /v1/quarantine?source_id&since&until&limit → {"total","entries":[…]}
//	DELETE /v1/quarantine?source_id|id|since&until|all=true → {"purged":n}
//
// since and until are RFC 3339 and bound received_at, both inclusive.
// A DELETE needs at least one of source_id, id, since, until (they combine:
// every one given must match), or all=true alone; unknown parameters are
// refused, since a misspelt filter must not widen a purge. A nil pen
// leaves the routes unset (404).
func QuarantineRoutes(mux *http.ServeMux, pen *quarantine.Pen, log *slog.Logger) {
	if pen == nil {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	h := &quarantineAPI{pen: pen, log: log.With("component", "admin")}
	mux.HandleFunc("GET /v1/quarantine", h.list)
	mux.HandleFunc("DELETE /v1/quarantine", h.purge)
}

type quarantineAPI struct {
	pen *quarantine.Pen
	log *slog.Logger
}

func badRequest(w http.ResponseWriter, code, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": code, "message": msg})
}

// timeRange parses since and until; ok false means an answer was written.
func timeRange(w http.ResponseWriter, q url.Values) (since, until time.Time, ok bool) {
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &since}, {"until", &until}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			badRequest(w, "invalid_"+p.name, p.name+" must be RFC 3339")
			return since, until, false
		}
		*p.dst = t
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		badRequest(w, "invalid_range", "until must not be before since")
		return since, until, false
	}
	return since, until, true
}

// list serves GET /v1/quarantine.
func (a *quarantineAPI) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := quarantine.Filter{SourceID: q.Get("source_id")}
	var ok bool
	if f.Since, f.Until, ok = timeRange(w, q); !ok {
		return
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > quarantine.MaxListLimit {
			badRequest(w, "invalid_limit", "limit must be 1..1000")
			return
		}
		f.Limit = n
	}
	total, entries, err := a.pen.List(f)
	if err != nil {
		a.unavailable(w, err)
		return
	}
	if entries == nil {
		entries = []quarantine.Held{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"total": total, "entries": entries})
}

var purgeParams = map[string]bool{"source_id": true, "id": true, "since": true, "until": true, "all": true}

// purge serves DELETE /v1/quarantine.
func (a *quarantineAPI) purge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, vs := range q {
		if !purgeParams[k] {
			badRequest(w, "invalid_parameter", "unknown parameter "+strconv.Quote(k))
			return
		}
		if len(vs) > 1 {
			badRequest(w, "invalid_parameter", "parameter "+strconv.Quote(k)+" given more than once")
			return
		}
	}
	var f quarantine.PurgeFilter
	if q.Has("source_id") {
		if f.SourceID = q.Get("source_id"); f.SourceID == "" {
			badRequest(w, "invalid_source_id", "source_id must not be empty")
			return
		}
	}
	if q.Has("id") {
		id, err := uuid.Parse(q.Get("id"))
		if err != nil || id == (uuid.UUID{}) {
			badRequest(w, errInvalidID, "id must be a hook id (UUID)")
			return
		}
		f.ID = id
	}
	var ok bool
	if f.Since, f.Until, ok = timeRange(w, q); !ok {
		return
	}
	if q.Has("all") {
		if q.Get("all") != "true" {
			badRequest(w, "invalid_all", "all must be true")
			return
		}
		if len(q) > 1 {
			badRequest(w, "invalid_parameter", "all=true purges everything and takes no other filter")
			return
		}
		f.All = true
	}
	n, err := a.pen.Purge(f)
	switch {
	case errors.Is(err, quarantine.ErrUnfiltered):
		badRequest(w, "unfiltered_purge", "give source_id, id, since or until, or all=true to purge everything")
		return
	case err != nil:
		a.unavailable(w, err)
		return
	}
	a.log.Info("quarantine purge", "purged", n, "query", r.URL.RawQuery)
	writeJSON(w, http.StatusOK, map[string]any{"purged": n})
}

func (a *quarantineAPI) unavailable(w http.ResponseWriter, err error) {
	a.log.Warn("operator request failed", "err", err)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, errorBody(errStoreUnavailable))
}
