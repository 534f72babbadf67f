package admin

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/store"
)

// listHooks serves GET /v1/hooks?source&tenant&state&since&until&dedupe_key&limit&cursor:
// hooks newest first, limit a page (1..200, default 50); next_cursor,
// when not null, continues. A page reads at most 1000 hooks whatever the
// filters match, so a page can hold fewer than limit with a cursor.
func (a *api) listHooks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "source", "tenant", "state", "since", "until", "dedupe_key", "limit", "cursor":
		default:
			badRequest(w, "invalid_parameter", "unknown parameter "+strconv.Quote(k))
			return
		}
	}
	f := dispatch.HookFilter{Source: q.Get("source"), Tenant: q.Get("tenant"), DedupeKey: q.Get("dedupe_key"), State: q.Get("state"), Limit: 50}
	switch f.State {
	case "", "pending", "delivered", "dead":
	default:
		badRequest(w, "invalid_state", "state must be pending, delivered or dead")
		return
	}
	var ok bool
	if f.Since, f.Until, ok = timeRange(w, q); !ok {
		return
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 200 {
			badRequest(w, "invalid_limit", "limit must be 1..200")
			return
		}
		f.Limit = n
	}
	if c := q.Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		seq, okSeq := store.ParseU64(b)
		if err != nil || !okSeq || seq == 0 {
			badRequest(w, "invalid_cursor", "cursor must be a next_cursor this API returned")
			return
		}
		f.Before = seq
	}
	hooks, next, err := a.d.Dispatch.Hooks(f)
	if err != nil {
		a.unavailable(w, err)
		return
	}
	if hooks == nil {
		hooks = []dispatch.HookSummary{}
	}
	resp := map[string]any{"hooks": hooks, "next_cursor": nil}
	if next != 0 {
		resp["next_cursor"] = base64.RawURLEncoding.EncodeToString(store.U64(next))
	}
	writeJSON(w, http.StatusOK, resp)
}

// resend serves POST /v1/hooks/{id}/resend with an optional body
// {"sink":"<id>"}: 202 {"resend_id","sinks"}. 404 not_found (no such hook),
// 404 unknown_sink, 409 delivery_pending (a chosen delivery is still due
// or in flight), 409 not_durable.
func (a *api) resend(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(errInvalidID))
		return
	}
	var body struct {
		Sink string `json:"sink"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		badRequest(w, "invalid_resend", err.Error())
		return
	}
	res, err := a.d.Dispatch.Resend(r.Context(), id, body.Sink)
	switch {
	case errors.Is(err, dispatch.ErrNoHook):
		writeJSON(w, http.StatusNotFound, errorBody(errNotFound))
	case errors.Is(err, dispatch.ErrNoSink):
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "unknown_sink", "sink": body.Sink})
	case errors.Is(err, dispatch.ErrPending):
		writeJSON(w, http.StatusConflict, map[string]any{"error": "delivery_pending", "message": err.Error()})
	case errors.Is(err, dispatch.ErrNotDurable):
		writeJSON(w, http.StatusConflict, map[string]any{"error": "not_durable", "message": err.Error()})
	case err != nil:
		a.unavailable(w, err)
	default:
		writeJSON(w, http.StatusAccepted, res)
	}
}
