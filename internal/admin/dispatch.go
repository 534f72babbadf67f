package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
)

func routeDispatch(mux *http.ServeMux, a *api) {
	mux.HandleFunc("GET /v1/dlq", a.dlq)
	mux.HandleFunc("POST /v1/replays", a.createReplay)
	mux.HandleFunc("GET /v1/replays", a.listReplays)
	mux.HandleFunc("GET /v1/replays/{id}", a.getReplay)
	mux.HandleFunc("PATCH /v1/replays/{id}", a.patchReplay)
	mux.HandleFunc("GET /v1/hooks", a.listHooks)
	mux.HandleFunc("POST /v1/hooks/{id}/resend", a.resend)
}

// dlq serves GET /v1/dlq?source_id&since&limit.
func (a *api) dlq(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := dispatch.DLQFilter{SourceID: q.Get("source_id")}
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_since", "message": "since must be RFC 3339"})
			return
		}
		f.Since = t
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_limit", "message": "limit must be 1..1000"})
			return
		}
		f.Limit = n
	}
	total, entries, err := a.d.Dispatch.DLQ(f)
	if err != nil {
		a.unavailable(w, err)
		return
	}
	if entries == nil {
		entries = []dispatch.DeadEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"total": total, "entries": entries})
}

func (a *api) createReplay(w http.ResponseWriter, r *http.Request) {
	var spec dispatch.JobSpec
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_replay", "message": err.Error()})
		return
	}
	j, err := a.d.Dispatch.CreateJob(r.Context(), spec)
	if err != nil {
		a.jobError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, j)
}

func (a *api) listReplays(w http.ResponseWriter, r *http.Request) {
	js, err := a.d.Dispatch.Jobs(r.Context())
	if err != nil {
		a.unavailable(w, err)
		return
	}
	if js == nil {
		js = []dispatch.Job{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"replays": js})
}

func (a *api) getReplay(w http.ResponseWriter, r *http.Request) {
	j, err := a.d.Dispatch.GetJob(r.Context(), r.PathValue("id"))
	if err != nil {
		a.jobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (a *api) patchReplay(w http.ResponseWriter, r *http.Request) {
	var body struct {
		State string `json:"state"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_replay", "message": err.Error()})
		return
	}
	j, err := a.d.Dispatch.SetJobState(r.Context(), r.PathValue("id"), body.State)
	if err != nil {
		a.jobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (a *api) jobError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, dispatch.ErrNoJob):
		writeJSON(w, http.StatusNotFound, errorBody(errNotFound))
	case errors.Is(err, dispatch.ErrBadJob):
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_replay", "message": err.Error()})
	case errors.Is(err, dispatch.ErrTooManyJobs):
		writeJSON(w, http.StatusConflict, map[string]any{"error": "too_many_replays", "message": err.Error()})
	default:
		a.unavailable(w, err)
	}
}

func (a *api) unavailable(w http.ResponseWriter, err error) {
	a.log.Warn("operator request failed", "err", err)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, errorBody(errStoreUnavailable))
}
