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
	"net/url"
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
	url     string
	headers map[string]string
	secret  []byte // nil: no outgoing signature
	client  *http.Client
	now     func() time.Time
}

var _ sink.Sink = (*Sink)(nil)

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

// New builds the sink. It fails only on an empty URL. The client never
// follows redirects: a 3xx is a misconfigured URL, and following it could
// send hooks somewhere the operator did not name.
func New(cfg Options) (*Sink, error) {
	if cfg.URL == "" {
		return nil, errors.New("http sink: url is required")
	}
	s := &Sink{url: cfg.URL, headers: cfg.Headers, secret: cfg.Secret, now: time.Now}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Enough idle connections for every dispatch worker to reuse one: the
	// pool, not dispatch.concurrency, would otherwise cap keep-alive reuse.
	tr.MaxIdleConnsPerHost = 1024
	s.client = &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(m.Body))
	if err != nil {
		return sink.Permanent(fmt.Errorf("build request: %w", err))
	}
	for k, v := range s.headers {
		req.Header.Set(k, v)
	}
	ct := m.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	req.Header.Set("Content-Type", ct)
	id := m.ID.String()
	req.Header.Set("X-Ankusa-Id", id)
	req.Header.Set("X-Ankusa-Idempotency-Key", m.IdempotencyKey())
	req.Header.Set("X-Ankusa-Source", m.Source)
	if m.Tenant != "" {
		req.Header.Set("X-Ankusa-Tenant", m.Tenant)
	}
	if m.DedupeKey != "" {
		req.Header.Set("X-Ankusa-Dedupe-Key", m.DedupeKey)
	}
	if m.ReplayID != "" {
		req.Header.Set("X-Ankusa-Replay-Id", m.ReplayID)
	}
	if m.Flagged {
		req.Header.Set("X-Ankusa-Flagged", "true")
	}
	if s.secret != nil {
		ts := s.now().Unix()
		req.Header.Set("Webhook-Id", id)
		req.Header.Set("Webhook-Timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("Webhook-Signature", Sign(s.secret, id, ts, m.Body))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// The client's *url.Error repeats the whole URL (credentials, query
		// tokens); the error ends up in delivery rows and the API, so keep
		// only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("post %s: %w", redactURL(s.url), err)
	}
	// Drain a little so the connection can be reused; never read an
	// unbounded answer.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return classify(resp, s.now())
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
	s.client.CloseIdleConnections()
	return nil
}
