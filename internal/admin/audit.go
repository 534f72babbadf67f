package admin

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ankusa/ankusa/internal/store"
)

// auditView is one row of GET /v1/audit.
type auditView struct {
	At     string         `json:"at"`
	Actor  string         `json:"actor"`
	Action string         `json:"action"`
	Method string         `json:"method,omitempty"`
	Path   string         `json:"path,omitempty"`
	Remote string         `json:"remote,omitempty"`
	Status int            `json:"status"`
	Detail map[string]any `json:"detail,omitempty"`
}

// audit serves GET /v1/audit?since&limit&cursor: the trail, newest first,
// limit rows a page (default 100, at most 1000); next_cursor is set when
// older rows remain.
func (a *api) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			badRequest(w, "invalid_limit", "limit must be 1..1000")
			return
		}
		limit = n
	}
	var since time.Time
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			badRequest(w, "invalid_since", "since must be RFC 3339")
			return
		}
		since = t
	}
	page, err := a.d.Store.Audit(q.Get("cursor"), since, limit)
	switch {
	case errors.Is(err, store.ErrBadCursor):
		badRequest(w, "invalid_cursor", "cursor must be a next_cursor this API returned")
		return
	case err != nil:
		a.unavailable(w, err)
		return
	}
	out := make([]auditView, 0, len(page.Entries))
	for _, e := range page.Entries {
		out = append(out, auditView{
			At: e.At.Format(time.RFC3339Nano), Actor: e.Actor, Action: e.Action, Method: e.Method,
			Path: e.Path, Remote: e.Remote, Status: e.Status, Detail: e.Detail,
		})
	}
	resp := map[string]any{"entries": out, "next_cursor": nil}
	if page.Next != "" {
		resp["next_cursor"] = page.Next
	}
	writeJSON(w, http.StatusOK, resp)
}
