// Package edge is the ingest HTTP handler: the route, the limits checked
// before the body is read, the body read itself, and the mapping of the
// commit path's answer to the status a provider sees.
package edge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// Committer is the commit path as the edge sees it (the queue).
type Committer interface {
	Submit(ctx context.Context, rec *queue.Record) (queue.Result, error)
}

// Observer receives the edge's measurements (the metrics package).
type Observer interface {
	Ingest(sourceID, outcome string, d time.Duration)
	IngestRefused(reason string)
}

// Outcome label values: a fixed set, never request input.
const (
	OutcomeAccepted  = "accepted"
	OutcomeDuplicate = "duplicate"
	OutcomeRefused   = "refused"  // 503: ask again later
	OutcomeRejected  = "rejected" // 4xx: the request itself is wrong
)

// unknownSourceLabel stands for every source id that is not configured, so
// a scanner cannot grow the metrics' series count.
const unknownSourceLabel = "_unknown"

var tenantRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Source is one configured catch URL as the edge needs it.
type Source struct {
	ID     string
	Tenant string // "" means "default" unless the URL names one
	Sinks  []queue.SinkRef
	Dedupe *dedupe.Extractor
}

// Options configure a Handler.
type Options struct {
	Routing        string // "path" | "tenant_path"
	Prefix         string
	MaxBodyBytes   int64
	Sources        map[string]*Source
	Committer      Committer
	Observer       Observer
	Logger         *slog.Logger
	Now            func() time.Time
	RetryAfterSecs int // for 503 overload / store_unavailable; default 1
	// IntakeRetryAfterSecs is the Retry-After of 503 intake_unavailable
	// (intake.retry_after_s); default 2.
	IntakeRetryAfterSecs int
}

// Handler serves POST {prefix}/{source} or {prefix}/{tenant}/{source}.
type Handler struct {
	o   Options
	log *slog.Logger
}

// New builds the ingest handler.
func New(o Options) *Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RetryAfterSecs <= 0 {
		o.RetryAfterSecs = 1
	}
	if o.IntakeRetryAfterSecs <= 0 {
		o.IntakeRetryAfterSecs = 2
	}
	return &Handler{o: o, log: o.Logger.With("component", "edge")}
}

// SourcesFromConfig builds the edge's view of the configured sources;
// sinkNums are the store's stable sink numbers.
func SourcesFromConfig(c *config.Config, sinkNums map[store.SinkRef]uint16) map[string]*Source {
	out := make(map[string]*Source, len(c.Sources))
	for id, sc := range c.Sources {
		s := &Source{ID: id, Tenant: sc.Tenant, Dedupe: dedupe.New(sc.Dedupe)}
		for _, sk := range sc.Sinks {
			s.Sinks = append(s.Sinks, queue.SinkRef{Num: sinkNums[store.SinkRef{Source: id, Sink: sk.ID}], ID: sk.ID})
		}
		out[id] = s
	}
	return out
}

// route splits the path after the prefix into tenant and source.
func (h *Handler) route(path string) (tenant, source string, ok bool) {
	rest, found := strings.CutPrefix(path, h.o.Prefix+"/")
	if !found || rest == "" {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	switch {
	case h.o.Routing == "tenant_path" && len(parts) == 2:
		if !tenantRE.MatchString(parts[0]) {
			return "", "", false
		}
		return parts[0], parts[1], parts[1] != ""
	case h.o.Routing != "tenant_path" && len(parts) == 1:
		return "", parts[0], true
	}
	return "", "", false
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.o.Now()
	tenant, sourceID, ok := h.route(r.URL.Path)
	if !ok {
		h.reject(w, start, unknownSourceLabel, http.StatusNotFound, "unknown_source", map[string]any{"error": "unknown_source"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reject(w, start, unknownSourceLabel, http.StatusMethodNotAllowed, "", map[string]any{"error": "method_not_allowed"})
		return
	}
	// The declared length is checked before anything else is read, so an
	// oversized upload is refused without spending the bandwidth.
	if r.ContentLength > h.o.MaxBodyBytes {
		h.tooLarge(w, start, unknownSourceLabel)
		return
	}
	src, found := h.o.Sources[sourceID]
	if !found {
		h.reject(w, start, unknownSourceLabel, http.StatusNotFound, "unknown_source", map[string]any{"error": "unknown_source"})
		return
	}
	headers, bad := captureHeaders(r.Header)
	if bad != "" {
		h.reject(w, start, src.ID, http.StatusBadRequest, "invalid_header", map[string]any{"error": "invalid_header", "header": bad})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.tooLarge(w, start, src.ID)
			return
		}
		h.reject(w, start, src.ID, http.StatusBadRequest, "body_read_failed", map[string]any{"error": "body_read_failed"})
		return
	}
	if tenant == "" {
		tenant = src.Tenant
	}
	if tenant == "" {
		tenant = "default"
	}
	rec := &queue.Record{
		ReceivedAt:  start,
		Tenant:      tenant,
		Source:      src.ID,
		ContentType: r.Header.Get("Content-Type"),
		Headers:     headers,
		Body:        body,
		Sinks:       src.Sinks,
	}
	if k := src.Dedupe.Key(r.Header, body); k != "" {
		rec.DedupeKey, rec.DedupeTTL = k, src.Dedupe.TTL()
	}
	res, err := h.o.Committer.Submit(r.Context(), rec)
	switch {
	case err == nil:
		outcome := OutcomeAccepted
		if res.Duplicate {
			outcome = OutcomeDuplicate
		}
		writeAccepted(w, res)
		h.o.Observer.Ingest(src.ID, outcome, h.o.Now().Sub(start))
	case errors.Is(err, queue.ErrOverload):
		h.unavailable(w, start, src.ID, "overload", h.o.RetryAfterSecs)
	case errors.Is(err, queue.ErrIntakeUnavailable):
		h.unavailable(w, start, src.ID, "intake_unavailable", h.o.IntakeRetryAfterSecs)
	case errors.Is(err, queue.ErrIntakePending):
		h.unavailable(w, start, src.ID, "intake_pending", 1)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client is gone; nobody reads an answer. The hook may still be
		// committed, exactly as if the connection dropped after the 201.
		h.o.Observer.Ingest(src.ID, OutcomeRefused, h.o.Now().Sub(start))
	default:
		if !errors.Is(err, queue.ErrStoreUnavailable) && !errors.Is(err, queue.ErrClosed) {
			h.log.Error("commit failed", "source", src.ID, "err", err)
		}
		h.unavailable(w, start, src.ID, "store_unavailable", h.o.RetryAfterSecs)
	}
}

func (h *Handler) tooLarge(w http.ResponseWriter, start time.Time, label string) {
	h.reject(w, start, label, http.StatusRequestEntityTooLarge, "payload_too_large",
		map[string]any{"error": "payload_too_large", "limit": h.o.MaxBodyBytes})
}

func (h *Handler) reject(w http.ResponseWriter, start time.Time, label string, status int, reason string, body map[string]any) {
	if reason != "" {
		h.o.Observer.IngestRefused(reason)
	}
	writeJSON(w, status, body)
	h.o.Observer.Ingest(label, OutcomeRejected, h.o.Now().Sub(start))
}

// unavailable answers 503 with Retry-After: the provider will retry, and
// nothing was stored that a retry could collide with.
func (h *Handler) unavailable(w http.ResponseWriter, start time.Time, label, reason string, retryAfter int) {
	h.o.Observer.IngestRefused(reason)
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": reason})
	h.o.Observer.Ingest(label, OutcomeRefused, h.o.Now().Sub(start))
}

// captureHeaders keeps every request header for the stored hook (sorted,
// lower-case names) and reports the first header with a byte outside the
// contract: names 0x21–0x7E, values 0x20–0x7E or tab. Go's server already
// refuses control characters; this also refuses bytes ≥ 0x80, which Go lets
// through and a downstream consumer could mangle.
func captureHeaders(hdr http.Header) ([]store.Header, string) {
	names := make([]string, 0, len(hdr))
	for n := range hdr {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]store.Header, 0, len(names))
	for _, n := range names {
		if !validName(n) {
			return nil, n
		}
		ln := strings.ToLower(n)
		for _, v := range hdr[n] {
			if !validValue(v) {
				return nil, ln
			}
			out = append(out, store.Header{Name: ln, Value: v})
		}
	}
	return out, ""
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '\t' && (c < 0x20 || c > 0x7e) {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeAccepted writes the 201 body by hand: it is the hot path's only
// answer, and a map through encoding/json cost measurably more.
func writeAccepted(w http.ResponseWriter, res queue.Result) {
	var buf [96]byte
	b := append(buf[:0], `{"id":"`...)
	b = append(b, uuid.UUID(res.ID).String()...)
	b = append(b, `","status":"accepted"`...)
	if res.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(b)
}
