// Package edge is the ingest HTTP handler: the route, the limits checked
// before the body is read, the body read itself, and the mapping of the
// commit path's answer to the status a provider sees.
package edge

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/direct"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/ratelimit"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/verify"
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
	// OutcomeQuarantined: 202, held in the pen (not accepted for delivery).
	OutcomeQuarantined = "quarantined"
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
	// Verifier is nil for verify.type none.
	Verifier verify.Verifier
	// OnFailure is the verify failure policy: OnFailureReject (also "") |
	// OnFailureQuarantine | OnFailureAcceptFlag.
	OnFailure string
	// Handshake is the provider handshake the catch URL answers, nil for
	// none (handshake.go).
	Handshake *Handshake
	// Tenants, when not empty, are the only tenants an unbound source
	// answers under tenant_path (sources.<id>.tenants).
	Tenants map[string]bool
}

// The verify failure policies of Source.OnFailure, the values of
// sources.<id>.on_verify_failure.
const (
	OnFailureReject     = "reject"
	OnFailureQuarantine = "quarantine"
	OnFailureAcceptFlag = "accept_flag"
)

// Quarantine is the durable pen for hooks that failed verification under
// on_verify_failure: quarantine. Hold returns nil once the hook is durably
// held; ErrQuarantineFull, or an error with a RetryAfter() method for the
// per-source rate limit, otherwise.
type Quarantine interface {
	Hold(ctx context.Context, env *store.Envelope, reason string) error
}

// ErrQuarantineFull: the pen reached quarantine.max_bytes. It never evicts.
var ErrQuarantineFull = errors.New("quarantine full")

// Limiter is the per-tenant rate limiter (ratelimit.GCRA). Limit reports
// whether key has a limit of its own (configured or a runtime override).
type Limiter interface {
	Allow(key string) (bool, time.Duration)
	Limit(key string) (ratelimit.Limit, bool)
}

// Options configure a Handler.
type Options struct {
	Routing      string // "path" | "tenant_path"
	Prefix       string
	MaxBodyBytes int64
	// Budget bounds the bodies held across all requests (nil: a budget of
	// 256 MiB, or MaxBodyBytes if larger).
	Budget    *Budget
	Sources   *Registry
	Committer Committer
	Observer  Observer
	// Limiter, when set, rate-limits accepted and flag-accepted hooks per
	// tenant; forged traffic is never charged to a tenant.
	Limiter Limiter
	// OwnBucketPerTenant (rate_limits.unlisted_tenants: own) gives every
	// tenant named in a URL a bucket of its own even without a limit of its
	// own. By default such tenants share one bucket per source: see
	// limitKey.
	OwnBucketPerTenant bool
	// Quarantine holds hooks of sources with on_verify_failure: quarantine.
	Quarantine     Quarantine
	Logger         *slog.Logger
	Now            func() time.Time
	RetryAfterSecs int // for 503 overload / store_unavailable; default 1
	// IntakeRetryAfterSecs is the Retry-After of 503 intake_unavailable
	// (intake.retry_after_s); default 2.
	IntakeRetryAfterSecs int
	// Claims is the fleet dedupe claim store (dedupe.scope: fleet); nil
	// under node scope, where the writer's store rows are the dedupe.
	Claims dedupe.Claimer
	// Settler runs the settles of claims the queue holds; required with
	// Claims under wal.type: dual.
	Settler *dedupe.Settler
	// Holder is the queue's hold of a carried record's claim; nil outside dual.
	Holder Holder
}

// Holder hands a carried record's claim to the queue (queue.Queue.Hold):
// false means the record already completed, and the caller promotes.
type Holder interface {
	Hold(id [16]byte, h queue.ClaimHolder) bool
}

// BodyReleaser is a Committer's promise that lets the edge reuse body
// buffers (bodypool.go, B1): once Submit has returned, with no error or
// with any error but the context's, neither the committer nor anything it
// handed the record to still references rec.Body. queue.Queue makes it. A
// committer without it (wal.type none, whose sinks may still be reading
// after a timeout) leaves every body to the garbage collector.
type BodyReleaser interface {
	ReleasesBody()
}

// Handler serves POST {prefix}/{source} or {prefix}/{tenant}/{source}.
type Handler struct {
	o   Options
	log *slog.Logger
	hso HandshakeObserver // o.Observer's optional ability, or nil
	// bodies are the pooled body buffers; releases is whether the committer
	// is a BodyReleaser (B1).
	bodies   *bodyPool
	states   sync.Pool // *reqState, under B1 like the bodies
	releases bool
	// jsonCT is the Content-Type value of every JSON answer. Assigned, not
	// Set, so an answer does not allocate it: net/http copies a handler's
	// header map when the status is written and never writes into it.
	jsonCT []string
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
	if o.Budget == nil {
		o.Budget = NewBudget(max(256<<20, o.MaxBodyBytes))
	}
	hso, _ := o.Observer.(HandshakeObserver)
	_, releases := o.Committer.(BodyReleaser)
	return &Handler{o: o, log: o.Logger.With("component", "edge"), hso: hso,
		bodies: newBodyPool(), releases: releases, jsonCT: []string{"application/json"}}
}

// route splits the path after the prefix into tenant and source.
func (h *Handler) route(path string) (tenant, source string, ok bool) {
	rest, found := strings.CutPrefix(path, h.o.Prefix+"/")
	if !found || rest == "" {
		return "", "", false
	}
	// Cut, not Split: the hot path allocates no slice for two segments.
	first, second, two := strings.Cut(rest, "/")
	switch {
	case h.o.Routing == "tenant_path" && two && !strings.Contains(second, "/"):
		if !tenantRE.MatchString(first) {
			return "", "", false
		}
		return first, second, second != ""
	case h.o.Routing != "tenant_path" && !two:
		return "", first, true
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
		// A provider whose handshake is a GET (Meta, Dropbox) gets one on
		// its source's catch URL; every other GET stays 405.
		if r.Method == http.MethodGet {
			if src, ok := h.o.Sources.Get(sourceID); ok && src.Handshake.get() && tenantMatches(tenant, src) {
				h.serveGETHandshake(w, r, start, src)
				return
			}
		}
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
	src, found := h.o.Sources.Get(sourceID)
	if !found {
		h.reject(w, start, unknownSourceLabel, http.StatusNotFound, "unknown_source", map[string]any{"error": "unknown_source"})
		return
	}
	var held int64
	// shared: the body may be read by someone else after this request
	// (B1), so its pooled buffer is not given back, nor the request state
	// whose record and headers name it.
	var pb *bodyBuf
	shared := false
	st := h.getState()
	defer func() {
		h.o.Budget.Release(held)
		if !shared {
			if pb != nil {
				h.bodies.put(pb)
			}
			h.putState(st)
		}
	}()
	headers, bad := captureHeaders(st.headers[:0], r.Header)
	if bad != "" {
		h.reject(w, start, src.ID, http.StatusBadRequest, "invalid_header", map[string]any{"error": "invalid_header", "header": bad})
		return
	}
	// A source bound to a tenant answers only its own tenant's URL, and one
	// with an allowlist only the listed tenants: refused before the body
	// is read.
	if !tenantMatches(tenant, src) {
		h.reject(w, start, unknownSourceLabel, http.StatusNotFound, "unknown_source", map[string]any{"error": "unknown_source"})
		return
	}
	body, pb, err := readBody(w, r, h.o.Budget, h.bodies, h.o.MaxBodyBytes, &held)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.Is(err, errBudget) {
			// Refused before the body is read (declared length) or as soon
			// as it stops fitting (chunked): the provider retries later.
			h.refuseUnread(w, r, start, src.ID)
			return
		}
		if errors.As(err, &mbe) {
			h.tooLarge(w, start, src.ID)
			return
		}
		h.reject(w, start, src.ID, http.StatusBadRequest, "body_read_failed", map[string]any{"error": "body_read_failed"})
		return
	}
	// fromURL: the tenant is request input (tenant_path, unbound source).
	fromURL := tenant != "" && src.Tenant == ""
	if tenant == "" {
		tenant = src.Tenant
	}
	if tenant == "" {
		tenant = "default"
	}
	if src.Handshake != nil && h.postHandshake(w, r, start, src, body) {
		return
	}
	flagged := false
	if src.Verifier != nil {
		if verr := verifyRequest(src.Verifier, r, body, start); verr != nil {
			reason := string(verify.ReasonOf(verr))
			switch src.OnFailure {
			case OnFailureQuarantine:
				if h.o.Quarantine != nil {
					shared = true // the pen is not a BodyReleaser
					h.quarantine(w, r, start, src, tenant, headers, body, reason)
					return
				}
				h.reject(w, start, src.ID, http.StatusUnauthorized, "verification_failed",
					map[string]any{"error": "verification_failed", "reason": reason})
				return
			case OnFailureAcceptFlag:
				// Committed, marked, and never deduped: a forged request must
				// not be able to claim a real hook's dedupe key.
				flagged = true
			default:
				h.reject(w, start, src.ID, http.StatusUnauthorized, "verification_failed",
					map[string]any{"error": "verification_failed", "reason": reason})
				return
			}
		}
	}
	if h.o.Limiter != nil {
		if ok, wait := h.o.Limiter.Allow(h.limitKey(tenant, src, fromURL)); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(wait)))
			h.reject(w, start, src.ID, http.StatusTooManyRequests, "rate_limited", map[string]any{"error": "rate_limited"})
			return
		}
	}
	st.headers = headers[:0]
	rec := &st.rec
	*rec = queue.Record{
		ReceivedAt:  start,
		Tenant:      tenant,
		Source:      src.ID,
		ContentType: r.Header.Get("Content-Type"),
		Headers:     headers,
		Body:        body,
		Sinks:       src.Sinks,
		Flagged:     flagged,
		// Hashed here, on this request's goroutine, not on the queue's one
		// writer goroutine (queue.Record.BodySHA256).
		BodySHA256: sha256.Sum256(body), HasBodySHA256: true,
	}
	if k := src.Dedupe.Key(r.Header, body); k != "" && !flagged {
		rec.DedupeKey, rec.DedupeTTL = k, src.Dedupe.TTL()
	}
	var res queue.Result
	shared = true // B1: the committer holds rec from here on
	if h.o.Claims != nil && rec.DedupeKey != "" {
		var done bool
		if res, done, err = h.submitClaimed(w, r, start, rec); done {
			return
		}
	} else {
		res, err = h.o.Committer.Submit(r.Context(), rec)
	}
	if h.releases && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		// B1: Submit returned from the committer's answer, not because the
		// client left while the record may still be queued.
		shared = false
	}
	switch {
	case err == nil:
		outcome := OutcomeAccepted
		if res.Duplicate {
			outcome = OutcomeDuplicate
		}
		h.writeAccepted(w, st, res)
		h.o.Observer.Ingest(src.ID, outcome, h.o.Now().Sub(start))
	case errors.Is(err, queue.ErrOverload):
		h.unavailable(w, start, src.ID, "overload", h.o.RetryAfterSecs)
	case errors.Is(err, queue.ErrIntakeUnavailable):
		h.unavailable(w, start, src.ID, "intake_unavailable", h.o.IntakeRetryAfterSecs)
	case errors.Is(err, direct.ErrSinkUnavailable):
		// wal.type: none: a sink did not confirm, so nothing was accepted.
		h.log.Warn("direct delivery failed", "source", src.ID, "err", err)
		h.unavailable(w, start, src.ID, "sink_unavailable", h.o.RetryAfterSecs)
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

// unlistedPrefix keys the shared bucket of a source's unlisted tenants; a
// tenant id cannot contain ':', so it never collides with one.
const unlistedPrefix = "_unlisted:"

// limitKey is the rate-limit bucket a hook is charged to. A tenant named in
// the URL of an unbound source is request input: anyone can make up a new
// one per request, so giving each a fresh bucket would make the limit free
// to bypass. Such a tenant is charged to its own bucket only if it has a
// limit of its own (rate_limits.tenants or a runtime override); every
// other one shares one bucket per source at the default limit, unless
// OwnBucketPerTenant.
func (h *Handler) limitKey(tenant string, src *Source, fromURL bool) string {
	if !fromURL || h.o.OwnBucketPerTenant {
		return tenant
	}
	if _, own := h.o.Limiter.Limit(tenant); own {
		return tenant
	}
	return unlistedPrefix + src.ID
}

// tenantMatches: a source bound to a tenant answers only its own tenant's
// URL, and an unbound one with an allowlist (sources.<id>.tenants) only the
// listed tenants (tenant is the URL's, "" under path routing).
func tenantMatches(tenant string, src *Source) bool {
	switch {
	case tenant == "":
		return true
	case src.Tenant != "":
		return tenant == src.Tenant
	case len(src.Tenants) > 0:
		return src.Tenants[tenant]
	}
	return true
}

// verifyRequest runs v on r; a scheme that signs the URL (Twilio, a
// verify.URLVerifier) also gets the request's query string.
func verifyRequest(v verify.Verifier, r *http.Request, body []byte, now time.Time) error {
	if uv, ok := v.(verify.URLVerifier); ok {
		return uv.VerifyURL(r.Header, r.URL.RawQuery, body, now)
	}
	return v.Verify(r.Header, body, now)
}

// overloadBody is what writeJSON writes for {"error":"overload"}.
const overloadBody = `{"error":"overload"}` + "\n"

// refuseUnread answers 503 overload to a request whose body was not
// admitted, then reads the rest of that body into nothing (at most
// MaxBodyBytes, within the server's read timeout): the answer goes out at
// once, and the client, still sending, reads it instead of having its
// connection reset under it. Nothing is held: the body is never kept.
func (h *Handler) refuseUnread(w http.ResponseWriter, r *http.Request, start time.Time, label string) {
	rc := http.NewResponseController(w)
	duplex := rc.EnableFullDuplex() == nil
	// A length, so the answer is complete when flushed, not when the
	// discard below ends.
	w.Header().Set("Content-Length", strconv.Itoa(len(overloadBody)))
	w.Header().Set("Connection", "close")
	h.unavailable(w, start, label, "overload", h.o.RetryAfterSecs)
	if duplex && rc.Flush() == nil {
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes))
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

// submitClaimed is the fleet scope's commit (ADR section 3): claim the key,
// commit, then settle the claim from the answer. done means the request
// was already answered (a claim refusal or a committed duplicate).
func (h *Handler) submitClaimed(w http.ResponseWriter, r *http.Request, start time.Time, rec *queue.Record) (queue.Result, bool, error) {
	c, err := h.o.Claims.Claim(r.Context(), rec.Tenant, rec.Source, rec.DedupeKey)
	switch {
	case errors.Is(err, dedupe.ErrPending):
		w.Header().Set("Retry-After", "1")
		h.reject(w, start, rec.Source, http.StatusConflict, "dedupe_pending", map[string]any{"error": "dedupe_pending"})
		return queue.Result{}, true, nil
	case err != nil:
		h.log.Warn("fleet claim failed; refusing", "source", rec.Source, "err", err)
		h.unavailable(w, start, rec.Source, "dedupe_unavailable", h.o.RetryAfterSecs)
		return queue.Result{}, true, nil
	case c.Committed:
		// The key names a hook another node acked: promote ran only after
		// that hook was durable, so this duplicate never precedes it.
		h.writeAccepted(w, nil, queue.Result{ID: c.ID, Duplicate: true})
		h.o.Observer.Ingest(rec.Source, OutcomeDuplicate, h.o.Now().Sub(start))
		return queue.Result{}, true, nil
	}
	// The commit is not cut short by a vanished client: the claim must be
	// settled from the real outcome (the batcher's deadline bounds it).
	ctx := context.WithoutCancel(r.Context())
	res, err := h.o.Committer.Submit(ctx, rec)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err == nil {
		if perr := h.o.Claims.Promote(sctx, c, res.ID, rec.DedupeTTL); perr != nil {
			// The 201 stands: the hook is durable. The key stays pending until
			// fleet.pending_ttl_ms — retries meanwhile get 409, later at worst
			// a duplicate hook.
			h.log.Warn("fleet claim promote failed", "source", rec.Source, "err", perr)
		}
		return res, false, nil
	}
	if id, carried := queue.Carried(err); carried && h.o.Holder != nil && h.o.Settler != nil {
		// One half holds the record: the claim stays pending, held by the
		// reconciler, which promotes it once both halves are confirmed.
		hc := heldClaim{s: h.o.Settler, c: c, ttl: rec.DedupeTTL}
		if !h.o.Holder.Hold(id, hc) {
			hc.Promote(id) // the reconciler already finished (the ADR's "completed")
		}
		return res, false, err
	}
	// Refused before either half: nothing exists, so the key is free again.
	if rerr := h.o.Claims.Release(sctx, c); rerr != nil {
		h.log.Warn("fleet claim release failed", "source", rec.Source, "err", rerr)
	}
	return res, false, err
}

// heldClaim adapts a claim to queue.ClaimHolder through the settler, which
// never blocks the queue's lock holder.
type heldClaim struct {
	s   *dedupe.Settler
	c   dedupe.Claim
	ttl time.Duration
}

func (hc heldClaim) Promote(id [16]byte) { hc.s.Promote(hc.c, id, hc.ttl) }
func (hc heldClaim) Release()            { hc.s.Release(hc.c) }

// captureHeaders keeps every request header for the stored hook (sorted,
// lower-case names, values byte for byte) and reports the first header with
// a byte outside RFC 9110: names 0x21–0x7E, values tab, 0x20–0x7E or obs-text
// 0x80–0xFF. Go's server already refuses control characters; the check here
// keeps the rule true for a handler reached some other way.
//
// Deviation from CONTRACTS.md (values 0x20–0x7E or tab): obs-text is
// accepted, because RFC 9110 allows it, Go's server passes it, and
// providers send it (a Latin-1 or UTF-8 name in a header); refusing it
// refused real requests with 400 invalid_header. The bytes are stored and
// forwarded exactly; the queue sinks' JSON carries a value that is not
// valid UTF-8 with U+FFFD in place of the invalid bytes (encoding/json), the
// HTTP sink forwards no provider headers.
//
// The headers are appended to dst (the pooled request state's). Allocations:
// the sorted names (on the stack for up to 32 names), dst's growth, and
// one string that every lower-case name not in commonLower is cut from;
// the values are the request's own strings.
func captureHeaders(dst []store.Header, hdr http.Header) ([]store.Header, string) {
	var nbuf [32]string
	names := nbuf[:0]
	for n := range hdr {
		names = append(names, n)
	}
	sort.Strings(names)
	// First pass, in sorted order: check every name and value (the first
	// bad one is reported) and lower-case the names not in commonLower
	// into one buffer.
	var lower strings.Builder
	for _, n := range names {
		if !validName(n) {
			return nil, n
		}
		for _, v := range hdr[n] {
			if !validValue(v) {
				return nil, strings.ToLower(n)
			}
		}
		if _, ok := commonLower[n]; ok {
			continue
		}
		if lower.Cap() == 0 {
			lower.Grow(len(n) * (len(names) + 1))
		}
		for i := 0; i < len(n); i++ { // ASCII only: validName holds
			c := n[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower.WriteByte(c)
		}
	}
	all := lower.String()
	for _, n := range names {
		ln, ok := commonLower[n]
		if !ok {
			ln = all[:len(n)]
			all = all[len(n):]
		}
		for _, v := range hdr[n] {
			dst = append(dst, store.Header{Name: ln, Value: v})
		}
	}
	return dst, ""
}

// commonLower maps the canonical form of names most requests carry to
// their lower-case form, so that a request with only these allocates no
// names (read only).
var commonLower = func() map[string]string {
	m := make(map[string]string)
	for _, n := range []string{
		"Accept", "Accept-Encoding", "Connection", "Content-Length", "Content-Type", "User-Agent",
		"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Real-Ip", "X-Request-Id", "Traceparent",
		"X-Github-Delivery", "X-Github-Event", "X-Github-Hook-Id", "X-Github-Hook-Installation-Target-Id",
		"X-Github-Hook-Installation-Target-Type", "X-Hub-Signature", "X-Hub-Signature-256",
		"Stripe-Signature", "Webhook-Id", "Webhook-Signature", "Webhook-Timestamp",
		"X-Shopify-Hmac-Sha256", "X-Shopify-Topic", "X-Shopify-Shop-Domain", "X-Shopify-Webhook-Id",
		"X-Slack-Signature", "X-Slack-Request-Timestamp",
	} {
		m[n] = strings.ToLower(n)
	}
	return m
}()

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
		if c := s[i]; c != '\t' && (c < 0x20 || c == 0x7f) {
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
// answer, and a map through encoding/json cost measurably more. Its
// Content-Length is net/http's: a handler that returns without flushing an
// answer this short gets the length computed from the buffered bytes.
//
// st, when not nil, lends its buffer for the bytes: a buffer of the
// function's own escapes to the heap through the Write (an allocation per
// 201).
func (h *Handler) writeAccepted(w http.ResponseWriter, st *reqState, res queue.Result) {
	var b []byte
	if st != nil {
		b = st.answer[:0]
	} else {
		b = make([]byte, 0, answerCap)
	}
	b = append(b, `{"id":"`...)
	b = appendUUID(b, res.ID)
	b = append(b, `","status":"accepted"`...)
	if res.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	b = append(b, "}\n"...)
	w.Header()["Content-Type"] = h.jsonCT
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(b)
}

// answerCap holds the longest 201 body writeAccepted writes.
const answerCap = 96

// reqState is the memory of one request that the edge reuses: the record
// handed to the committer, the captured headers' backing array, and the
// 201's bytes. It is pooled under B1, exactly as the body buffer is: the
// record names the body, and the committer's promise covers both.
type reqState struct {
	rec     queue.Record
	headers []store.Header
	answer  [answerCap]byte
}

func (h *Handler) getState() *reqState {
	if st, ok := h.states.Get().(*reqState); ok {
		return st
	}
	return &reqState{}
}

// putState gives st back once nothing reads it (B1, the caller's); it
// keeps no reference to the request's strings or body.
func (h *Handler) putState(st *reqState) {
	if cap(st.headers) > 64 {
		st.headers = nil // an unusual request's array is not kept for good
	}
	clear(st.headers[:cap(st.headers)])
	st.headers = st.headers[:0]
	st.rec = queue.Record{}
	h.states.Put(st)
}

// appendUUID appends id in the canonical 8-4-4-4-12 form, as
// uuid.UUID.String does, without allocating a string.
func appendUUID(b []byte, id [16]byte) []byte {
	const digits = "0123456789abcdef"
	for i, c := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	return b
}

// quarantine holds a hook that failed verification: 202 once it is durably
// in the pen; 429 past the source's pen rate; 503 when the pen is full. A
// forged flood costs the pen's budget, never a real hook's slot.
func (h *Handler) quarantine(w http.ResponseWriter, r *http.Request, start time.Time, src *Source, tenant string, headers []store.Header, body []byte, reason string) {
	id, err := uuid.NewV7()
	if err != nil {
		h.unavailable(w, start, src.ID, "store_unavailable", h.o.RetryAfterSecs)
		return
	}
	env := &store.Envelope{
		ID: id, ReceivedAt: start.UnixNano(), Tenant: tenant, Source: src.ID,
		ContentType: r.Header.Get("Content-Type"), Headers: headers, Body: body,
		SHA256: sha256.Sum256(body),
	}
	err = h.o.Quarantine.Hold(r.Context(), env, reason)
	var ra interface{ RetryAfter() time.Duration }
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, map[string]any{"status": "quarantined", "reason": reason})
		h.o.Observer.Ingest(src.ID, OutcomeQuarantined, h.o.Now().Sub(start))
	case errors.As(err, &ra):
		w.Header().Set("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(ra.RetryAfter())))
		h.reject(w, start, src.ID, http.StatusTooManyRequests, "quarantine_rate_limited", map[string]any{"error": "quarantine_rate_limited"})
	case errors.Is(err, ErrQuarantineFull):
		h.unavailable(w, start, src.ID, "quarantine_full", 60)
	default:
		h.log.Error("quarantine hold failed", "source", src.ID, "err", err)
		h.unavailable(w, start, src.ID, "store_unavailable", h.o.RetryAfterSecs)
	}
}
