package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/sources"
)

// Error codes of the API-managed sources routes.
const (
	errInvalidSource       = "invalid_source"
	errSourceExists        = "source_exists"
	errSourceNotFound      = "source_not_found"
	errSourceHasDeliveries = "source_has_deliveries"
	errInvalidDeliveries   = "invalid_deliveries"
)

// maxSourceBody bounds a source block in a request.
const maxSourceBody = 1 << 20

// sourceBody is what POST and PUT take: the source block of the config
// file, in JSON (the yaml keys), plus its name. POST requires the name; a
// PUT may repeat the one in its path.
type sourceBody struct {
	Name string `json:"name"`
	config.SourceConfig
	// block is SourceConfig as the Manager takes it (JSON), set by decode.
	block json.RawMessage
}

type sourcesAPI struct {
	m   *sources.Manager
	log *slog.Logger
}

// SourceRoutes serves the API-managed sources (source_store.type:
// persistent) on mux:
//
//	GET    /v1/tenants/{tenant}/sources         list, by name
//	POST   /v1/tenants/{tenant}/sources         create: 201
//	GET    /v1/tenants/{tenant}/sources/{name}
//	PUT    /v1/tenants/{tenant}/sources/{name}  replace the block; secrets left out are kept
//	DELETE /v1/tenants/{tenant}/sources/{name}[?deliveries=dead_letter]
//
// A source's id is "<tenant>.<name>" and answers at its catch_url from the
// next request on. Answers show the block with secrets "[REDACTED]".
// Errors: 400 invalid_source {message}, 404 source_not_found, 409
// source_exists, 409 source_has_deliveries {message, due, inflight}, 503
// store_unavailable.
func SourceRoutes(mux *http.ServeMux, m *sources.Manager, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	s := &sourcesAPI{m: m, log: log.With("component", "admin")}
	mux.HandleFunc("GET /v1/tenants/{tenant}/sources", s.list)
	mux.HandleFunc("POST /v1/tenants/{tenant}/sources", s.create)
	mux.HandleFunc("GET /v1/tenants/{tenant}/sources/{name}", s.get)
	mux.HandleFunc("PUT /v1/tenants/{tenant}/sources/{name}", s.update)
	mux.HandleFunc("DELETE /v1/tenants/{tenant}/sources/{name}", s.delete)
}

func (s *sourcesAPI) list(w http.ResponseWriter, r *http.Request) {
	vs, err := s.m.List(r.PathValue("tenant"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sources": vs})
}

func (s *sourcesAPI) create(w http.ResponseWriter, r *http.Request) {
	body, ok := s.decode(w, r)
	if !ok {
		return
	}
	if body.Name == "" {
		invalidSource(w, "name: required (the source id is <tenant>.<name>)")
		return
	}
	v, err := s.m.Create(r.PathValue("tenant"), body.Name, body.block)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Location", "/v1/tenants/"+v.Tenant+"/sources/"+v.Name)
	writeJSON(w, http.StatusCreated, v)
}

func (s *sourcesAPI) get(w http.ResponseWriter, r *http.Request) {
	v, err := s.m.Get(r.PathValue("tenant"), r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *sourcesAPI) update(w http.ResponseWriter, r *http.Request) {
	body, ok := s.decode(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if body.Name != "" && body.Name != name {
		invalidSource(w, fmt.Sprintf("name: %q differs from the path's %q (a source cannot be renamed)", body.Name, name))
		return
	}
	v, err := s.m.Update(r.PathValue("tenant"), name, body.block)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *sourcesAPI) delete(w http.ResponseWriter, r *http.Request) {
	deadLetter := false
	switch d := r.URL.Query().Get("deliveries"); d {
	case "":
	case "dead_letter":
		deadLetter = true
	default:
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": errInvalidDeliveries,
			"message": fmt.Sprintf("deliveries must be dead_letter, got %q", d)})
		return
	}
	res, err := s.m.Delete(r.PathValue("tenant"), r.PathValue("name"), deadLetter)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// decode reads a source block; unknown keys and trailing data are refused.
func (s *sourcesAPI) decode(w http.ResponseWriter, r *http.Request) (sourceBody, bool) {
	var body sourceBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSourceBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&body)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("unexpected data after the JSON object")
	}
	if err == nil {
		body.block, err = json.Marshal(body.SourceConfig)
	}
	if err != nil {
		invalidSource(w, "body: "+err.Error())
		return body, false
	}
	return body, true
}

func invalidSource(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": errInvalidSource, "message": msg})
}

func (s *sourcesAPI) fail(w http.ResponseWriter, err error) {
	var de *sources.DeliveriesError
	switch {
	case errors.Is(err, sources.ErrInvalid):
		invalidSource(w, err.Error())
	case errors.Is(err, sources.ErrNotFound):
		writeJSON(w, http.StatusNotFound, errorBody(errSourceNotFound))
	case errors.Is(err, sources.ErrExists):
		writeJSON(w, http.StatusConflict, errorBody(errSourceExists))
	case errors.As(err, &de):
		if de.Inflight > 0 {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, http.StatusConflict, map[string]any{"error": errSourceHasDeliveries, "message": de.Error(),
			"due": de.Due, "inflight": de.Inflight})
	default:
		s.log.Warn("operator request failed", "err", err)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorBody(errStoreUnavailable))
	}
}
