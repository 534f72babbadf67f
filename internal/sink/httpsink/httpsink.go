// Package httpsink POSTs each hook's raw body to an operator's HTTP
// endpoint, with Ankusa's headers and an optional Standard Webhooks
// signature, and classifies the answer for the dispatcher.
package httpsink

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ankusa/ankusa/internal/sink"
)

// maxRetryAfter caps a receiver's Retry-After: a typo'd header must not
// park a row for a week.
const maxRetryAfter = time.Hour

// Sink is one HTTP endpoint.
type Sink struct {
	url string
	// req is the request every delivery copies (WithContext): its URL is
	// parsed once, in New, not per attempt.
	req       *http.Request
	headers   []header // the operator's, canonical names, sorted
	basicAuth string   // "Basic …" from the URL's user info; "" for none
	secret    []byte   // nil: no outgoing signature
	timeout   time.Duration
	rt        *http.Transport
	now       func() time.Time
}

// header is one operator header, its name in canonical form.
type header struct{ name, value string }

var (
	_ sink.Sink    = (*Sink)(nil)
	_ sink.Bounded = (*Sink)(nil)
)

// AttemptBound is the sink's timeout (0: none): the dispatcher's attempt
// deadline honours it, so Deliver need not add its own (sink.Bounded).
func (s *Sink) AttemptBound() time.Duration { return s.timeout }

// Options configures New. config validates the operator's settings (the
// URL's scheme, the secret's encoding and length); New checks only what it
// cannot work without.
type Options struct {
	// URL is the endpoint POSTed to. Required.
	URL string
	// Timeout bounds one attempt on top of the caller's ctx; 0 leaves only
	// the ctx.
	Timeout time.Duration
	// Headers are set on every request, before Ankusa's own.
	Headers map[string]string
	// Secret is the decoded Standard Webhooks signing key (config's
	// HTTPSink.SigningKey); nil sends no signature.
	Secret []byte
}

// New builds the sink. It fails on an empty or unparsable URL. It never
// follows redirects: a 3xx is a misconfigured URL, and following it could
// send hooks somewhere the operator did not name.
//
// Deliver calls the transport itself, not an http.Client: the client's
// per-request work (a copy of the headers for redirects it would not
// follow, a second deadline and request copy for its Timeout) was a fifth
// of the sink's allocations (issue 14). What the client did that a
// receiver can see, New and Deliver do: the URL's user info becomes Basic
// authorization unless the operator set an Authorization header, and the
// 3xx is returned as it came.
func New(cfg Options) (*Sink, error) {
	if cfg.URL == "" {
		return nil, errors.New("http sink: url is required")
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, cfg.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("http sink: url %s: %w", redactURL(cfg.URL), err)
	}
	s := &Sink{url: cfg.URL, req: req, secret: cfg.Secret, timeout: cfg.Timeout, now: time.Now}
	// Set's semantics, once: canonical names, and one value per name.
	hs := make(map[string]string, len(cfg.Headers))
	for k, v := range cfg.Headers {
		hs[http.CanonicalHeaderKey(k)] = v
	}
	for k, v := range hs {
		s.headers = append(s.headers, header{k, v})
	}
	slices.SortFunc(s.headers, func(a, b header) int { return strings.Compare(a.name, b.name) })
	if u := req.URL.User; u != nil {
		if hs["Authorization"] == "" {
			// As http.Client.send does for a URL with user info.
			pw, _ := u.Password()
			s.basicAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw))
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Enough idle connections for every dispatch worker to reuse one: the
	// pool, not dispatch.concurrency, would otherwise cap keep-alive reuse.
	// MaxIdleConns too (DefaultTransport's 100 is for all hosts together):
	// past it every returned connection closed another, and a round of
	// more than 100 concurrent attempts redialled the difference.
	tr.MaxIdleConnsPerHost = 1024
	tr.MaxIdleConns = 0
	s.rt = tr
	return s, nil
}

// Sign is the Standard Webhooks signature "v1,<base64 hmac-sha256 of
// id.timestamp.body>".
func Sign(secret []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Deliver POSTs the raw body.
func (s *Sink) Deliver(ctx context.Context, m *sink.Message) error {
	if s.timeout > 0 {
		// One deadline: the sink's, when it ends before the caller's (the
		// dispatcher's already honours it: AttemptBound).
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.timeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.timeout)
			defer cancel()
		}
	}
	req := s.req.WithContext(ctx)
	// As http.NewRequest sets them for a *bytes.Reader: the transport
	// knows the length, writes headers and body in one write (it flushes
	// early for readers it does not know), and can rewind the body to
	// retry on a kept-alive connection the receiver had closed.
	body := m.Body
	req.ContentLength = int64(len(body))
	if len(body) == 0 {
		req.Body, req.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	} else {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	h := newHeader(len(s.headers) + s.ownHeaders(m))
	for _, kv := range s.headers {
		h.set(kv.name, kv.value)
	}
	ct := m.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.set("Content-Type", ct)
	id := m.ID.String()
	h.set("X-Ankusa-Id", id)
	if m.DedupeKey != "" {
		h.set("X-Ankusa-Idempotency-Key", m.IdempotencyKey())
	} else {
		h.set("X-Ankusa-Idempotency-Key", id) // IdempotencyKey without the dedupe key
	}
	h.set("X-Ankusa-Source", m.Source)
	if m.Tenant != "" {
		h.set("X-Ankusa-Tenant", m.Tenant)
	}
	if m.DedupeKey != "" {
		h.set("X-Ankusa-Dedupe-Key", m.DedupeKey)
	}
	if m.ReplayID != "" {
		h.set("X-Ankusa-Replay-Id", m.ReplayID)
	}
	if m.Flagged {
		h.set("X-Ankusa-Flagged", "true")
	}
	if s.secret != nil {
		ts := s.now().Unix()
		h.set("Webhook-Id", id)
		h.set("Webhook-Timestamp", strconv.FormatInt(ts, 10))
		h.set("Webhook-Signature", Sign(s.secret, id, ts, m.Body))
	}
	if s.basicAuth != "" {
		h.set("Authorization", s.basicAuth)
	}
	req.Header = h.h
	resp, err := s.rt.RoundTrip(req)
	if err != nil {
		// The error ends up in delivery rows and the API: name the URL
		// without its credentials or query tokens.
		return fmt.Errorf("post %s: %w", redactURL(s.url), err)
	}
	// Drain a little so the connection can be reused; never read an
	// unbounded answer. An answer without a body (Content-Length: 0, the
	// common 200) has nothing to drain.
	if resp.Body != http.NoBody {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	}
	_ = resp.Body.Close()
	return classify(resp, s.now())
}

// ownHeaders is how many headers Deliver sets on top of the operator's:
// sized exactly, the map of a plain delivery fits one group of eight
// slots (a hint above eight allocates a table of several).
func (s *Sink) ownHeaders(m *sink.Message) int {
	n := 4 // Content-Type, X-Ankusa-Id, -Idempotency-Key, -Source
	for _, set := range []bool{m.Tenant != "", m.DedupeKey != "", m.ReplayID != "", m.Flagged, s.basicAuth != ""} {
		if set {
			n++
		}
	}
	if s.secret != nil {
		n += 3
	}
	return n
}

// headerSet builds a request's header map with one value slice for all
// names, instead of one per Set.
type headerSet struct {
	h    http.Header
	vals []string
}

func newHeader(n int) headerSet {
	return headerSet{h: make(http.Header, n), vals: make([]string, 0, n)}
}

// set is http.Header.Set for a name already in canonical form.
func (hs *headerSet) set(name, value string) {
	if len(hs.vals) == cap(hs.vals) {
		hs.h[name] = []string{value}
		return
	}
	hs.vals = append(hs.vals, value)
	hs.h[name] = hs.vals[len(hs.vals)-1 : len(hs.vals) : len(hs.vals)]
}

// classify maps a status to the dispatcher's classes (CONTRACTS "Delivery").
func classify(resp *http.Response, now time.Time) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err := fmt.Errorf("receiver answered %d", code)
	switch code {
	case 400, 401, 403, 404, 410, 413, 422:
		return sink.Permanent(err)
	case 408, 429:
		return sink.Retry(err, retryAfter(resp.Header.Get("Retry-After"), now))
	}
	if code >= 500 {
		return sink.Retry(err, retryAfter(resp.Header.Get("Retry-After"), now))
	}
	return err // 1xx/3xx/other 4xx: transient
}

// retryAfter parses delta-seconds or an HTTP date; 0 when absent or invalid.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// Compare before multiplying: a huge value must cap, not wrap.
		if err != nil || n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	if d < 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}

// redactURL hides credentials and query values from error messages, which
// end up in delivery rows and logs.
func redactURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if p := strings.Index(u, "://"); p >= 0 && p < at {
			u = u[:p+3] + "[REDACTED]@" + u[at+1:]
		}
	}
	return u
}

// Close releases idle connections.
func (s *Sink) Close() error {
	s.rt.CloseIdleConnections()
	return nil
}
