package httpsink_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/httpsink"
)

// received is one request as the receiver saw it.
type received struct {
	method string
	path   string
	header http.Header
	body   []byte
}

// receiver is an httptest server that records every request and answers
// with status (and Retry-After when retryAfter is set).
func receiver(t *testing.T, status int, extra http.Header) (*httptest.Server, <-chan received) {
	t.Helper()
	ch := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("receiver: read body: %v", err)
		}
		ch <- received{method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), body: body}
		for k, vs := range extra {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

func newSink(t *testing.T, cfg httpsink.Options) *httpsink.Sink {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	s, err := httpsink.New(cfg)
	if err != nil {
		t.Fatalf("httpsink.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func message(body []byte) *sink.Message {
	return &sink.Message{
		ID:          uuid.Must(uuid.NewV7()),
		Seq:         42,
		Tenant:      "acme",
		Source:      "orders",
		ReceivedAt:  time.Now(),
		ContentType: "application/vnd.acme+json; charset=utf-8",
		Body:        body,
		SHA256:      sha256.Sum256(body),
		Attempt:     1,
	}
}

func deliver(t *testing.T, s *httpsink.Sink, m *sink.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Deliver(ctx, m)
}

func one(t *testing.T, ch <-chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	default:
		t.Fatal("the receiver got no request")
		return received{}
	}
}

// binaryBody has bytes a careless re-encoding would change: NUL, CR LF,
// invalid UTF-8, trailing white space.
func binaryBody() []byte {
	b := []byte("{\"k\": \"v\"}\r\n\x00\xff\xfe\x80 tail \t\n")
	for i := range 300 {
		b = append(b, byte(i))
	}
	return b
}

func TestDeliver_RequestCarriesRawBodyAndAnkusaHeaders(t *testing.T) {
	srv, ch := receiver(t, http.StatusOK, nil)
	s := newSink(t, httpsink.Options{
		URL:     srv.URL + "/in/orders?token=abc",
		Headers: map[string]string{"Authorization": "Bearer t0k3n", "X-Team": "payments"},
	})
	body := binaryBody()
	m := message(body)
	if err := deliver(t, s, m); err != nil {
		t.Fatalf("Deliver to a 200 receiver: %v", err)
	}
	r := one(t, ch)

	if r.method != http.MethodPost {
		t.Errorf("method = %s, want POST", r.method)
	}
	if r.path != "/in/orders?token=abc" {
		t.Errorf("request URI = %q, want the configured path and query", r.path)
	}
	if !bytes.Equal(r.body, body) {
		t.Errorf("body differs from the hook's raw body:\n got %q\nwant %q", r.body, body)
	}
	want := map[string]string{
		"Content-Type":             "application/vnd.acme+json; charset=utf-8",
		"X-Ankusa-Id":              m.ID.String(),
		"X-Ankusa-Idempotency-Key": m.ID.String(), // no dedupe key: the hook id
		"X-Ankusa-Source":          "orders",
		"X-Ankusa-Tenant":          "acme",
		"Authorization":            "Bearer t0k3n",
		"X-Team":                   "payments",
	}
	for k, v := range want {
		if got := r.header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want exactly [%q]", k, got, v)
		}
	}
	for _, k := range []string{
		"X-Ankusa-Dedupe-Key", "X-Ankusa-Replay-Id",
		"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature",
	} {
		if v, ok := r.header[k]; ok {
			t.Errorf("header %s = %q present, want absent (not set on the hook / no secret)", k, v)
		}
	}
}

func TestDeliver_OptionalHeadersWhenSet(t *testing.T) {
	srv, ch := receiver(t, http.StatusNoContent, nil)
	s := newSink(t, httpsink.Options{URL: srv.URL})

	t.Run("dedupe key and replay id", func(t *testing.T) {
		m := message([]byte(`{"event":"paid"}`))
		m.DedupeKey = "evt_123"
		m.ReplayID = uuid.Must(uuid.NewV7()).String()
		if err := deliver(t, s, m); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		r := one(t, ch)
		for k, v := range map[string]string{
			"X-Ankusa-Dedupe-Key":      "evt_123",
			"X-Ankusa-Replay-Id":       m.ReplayID,
			"X-Ankusa-Idempotency-Key": "acme:orders:evt_123",
			"X-Ankusa-Id":              m.ID.String(),
		} {
			if got := r.header.Get(k); got != v {
				t.Errorf("header %s = %q, want %q", k, got, v)
			}
		}
	})

	t.Run("no tenant", func(t *testing.T) {
		m := message([]byte(`{}`))
		m.Tenant = ""
		if err := deliver(t, s, m); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		r := one(t, ch)
		if v, ok := r.header["X-Ankusa-Tenant"]; ok {
			t.Errorf("X-Ankusa-Tenant = %q, want absent for a hook without tenant", v)
		}
		if got := r.header.Get("X-Ankusa-Source"); got != "orders" {
			t.Errorf("X-Ankusa-Source = %q, want orders", got)
		}
	})

	t.Run("empty body", func(t *testing.T) {
		m := message(nil)
		if err := deliver(t, s, m); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		r := one(t, ch)
		if len(r.body) != 0 {
			t.Errorf("body = %q, want empty", r.body)
		}
	})
}

// verifyStandardWebhooks is an independent check of a Standard Webhooks
// signature (https://www.standardwebhooks.com/): the key is the base64
// after "whsec_" or else the secret's bytes; the signed content is
// "<webhook-id>.<webhook-timestamp>.<body>"; webhook-signature is a space
// separated list of "v1,<base64 HMAC-SHA256>".
func verifyStandardWebhooks(secret string, h http.Header, body []byte) error {
	var key []byte
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		k, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return fmt.Errorf("test secret: %v", err)
		}
		key = k
	} else {
		key = []byte(secret)
	}
	id, ts, sigs := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("missing webhook-* headers: id=%q timestamp=%q signature=%q", id, ts, sigs)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not integer seconds", ts)
	}
	if d := time.Since(time.Unix(sec, 0)); d < -5*time.Minute || d > 5*time.Minute {
		return fmt.Errorf("webhook-timestamp %q is %s away from now", ts, d)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(sigs) {
		ver, b64, ok := strings.Cut(sig, ",")
		if !ok || ver != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no v1 signature in %q matches", sigs)
}

func TestDeliver_StandardWebhooksSignature(t *testing.T) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	// The configured secret and the key it decodes to (app translates one
	// into the other with config's SigningKey); the receiver's check below
	// decodes the configured form itself.
	secrets := map[string]struct {
		secret string
		key    []byte
	}{
		"whsec base64": {"whsec_" + base64.StdEncoding.EncodeToString(raw), raw},
		"raw":          {"a-raw-secret-of-at-least-16-bytes", []byte("a-raw-secret-of-at-least-16-bytes")},
	}
	for name, sc := range secrets {
		secret := sc.secret
		t.Run(name, func(t *testing.T) {
			srv, ch := receiver(t, http.StatusOK, nil)
			s := newSink(t, httpsink.Options{URL: srv.URL, Secret: sc.key})
			body := binaryBody()
			m := message(body)
			if err := deliver(t, s, m); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			r := one(t, ch)
			if err := verifyStandardWebhooks(secret, r.header, r.body); err != nil {
				t.Fatalf("signature does not verify: %v", err)
			}
			if got := r.header.Get("Webhook-Id"); got != m.ID.String() {
				t.Errorf("webhook-id = %q, want the hook id %s", got, m.ID)
			}
			// The signature covers the body: a different body must not verify.
			if err := verifyStandardWebhooks(secret, r.header, append(bytes.Clone(body), 'x')); err == nil {
				t.Error("signature also verifies a different body")
			}
			// And the key: another secret must not verify.
			if err := verifyStandardWebhooks("another-secret-of-16-bytes-or-more", r.header, r.body); err == nil {
				t.Error("signature also verifies under another secret")
			}
		})
	}
}

func TestNew_RefusesEmptyURL(t *testing.T) {
	if s, err := httpsink.New(httpsink.Options{}); err == nil {
		_ = s.Close()
		t.Fatal("New accepted options without a URL")
	}
}

func TestDeliver_StatusClassification(t *testing.T) {
	type want int
	const (
		ok want = iota
		permanent
		transient
	)
	httpDate := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(http.TimeFormat) }
	tests := []struct {
		status     int
		retryAfter string
		want       want
		// for transient: the Retry-After the error must carry, in [minRA, maxRA]
		minRA, maxRA time.Duration
	}{
		{status: 200, want: ok},
		{status: 201, want: ok},
		{status: 202, want: ok},
		{status: 204, want: ok},
		{status: 299, want: ok},
		{status: 200, retryAfter: "30", want: ok},

		{status: 400, want: permanent},
		{status: 401, want: permanent},
		{status: 403, want: permanent},
		{status: 404, want: permanent},
		{status: 410, want: permanent},
		{status: 413, want: permanent},
		{status: 422, want: permanent},
		{status: 410, retryAfter: "5", want: permanent}, // a Retry-After does not make a 410 retryable

		{status: 408, want: transient},
		{status: 429, want: transient},
		{status: 500, want: transient},
		{status: 502, want: transient},
		{status: 503, want: transient},
		{status: 504, want: transient},
		{status: 599, want: transient},
		{status: 408, retryAfter: "3", want: transient, minRA: 3 * time.Second, maxRA: 3 * time.Second},
		{status: 429, retryAfter: "7", want: transient, minRA: 7 * time.Second, maxRA: 7 * time.Second},
		{status: 503, retryAfter: "120", want: transient, minRA: 2 * time.Minute, maxRA: 2 * time.Minute},
		{status: 500, retryAfter: " 2 ", want: transient, minRA: 2 * time.Second, maxRA: 2 * time.Second},
		// HTTP-date: 30 s ahead, at one-second resolution.
		{status: 503, retryAfter: httpDate(30 * time.Second), want: transient, minRA: 25 * time.Second, maxRA: 31 * time.Second},
		{status: 429, retryAfter: httpDate(2 * time.Hour), want: transient, minRA: time.Hour, maxRA: time.Hour},
		// Capped at one hour.
		{status: 429, retryAfter: "86400", want: transient, minRA: time.Hour, maxRA: time.Hour},
		// Absent, past, negative or unparseable: no requested delay.
		{status: 503, retryAfter: httpDate(-time.Hour), want: transient},
		{status: 503, retryAfter: "-5", want: transient},
		{status: 503, retryAfter: "soon", want: transient},

		// Other 4xx: transient, Retry-After not honoured.
		{status: 402, want: transient},
		{status: 405, want: transient},
		{status: 409, want: transient},
		{status: 418, want: transient},
		{status: 451, want: transient},
		{status: 409, retryAfter: "9", want: transient},
	}
	for _, tc := range tests {
		name := strconv.Itoa(tc.status)
		if tc.retryAfter != "" {
			name += " Retry-After " + tc.retryAfter
		}
		t.Run(name, func(t *testing.T) {
			var extra http.Header
			if tc.retryAfter != "" {
				extra = http.Header{"Retry-After": {tc.retryAfter}}
			}
			srv, ch := receiver(t, tc.status, extra)
			s := newSink(t, httpsink.Options{URL: srv.URL})
			err := deliver(t, s, message([]byte(`{}`)))
			one(t, ch)
			perm, ra := sink.Classify(err)
			switch tc.want {
			case ok:
				if err != nil {
					t.Fatalf("Deliver = %v, want nil", err)
				}
			case permanent:
				if err == nil || !perm {
					t.Fatalf("Deliver = %v (permanent %v), want a permanent error", err, perm)
				}
				if !strings.Contains(err.Error(), strconv.Itoa(tc.status)) {
					t.Errorf("error %q does not name the status %d", err, tc.status)
				}
			case transient:
				if err == nil || perm {
					t.Fatalf("Deliver = %v (permanent %v), want a transient error", err, perm)
				}
				if ra < tc.minRA || ra > tc.maxRA {
					t.Errorf("Retry-After = %s, want in [%s, %s]", ra, tc.minRA, tc.maxRA)
				}
				if !strings.Contains(err.Error(), strconv.Itoa(tc.status)) {
					t.Errorf("error %q does not name the status %d", err, tc.status)
				}
			}
		})
	}
}

// TestDeliver_HugeRetryAfterIsCapped: delta-seconds too large for a
// time.Duration must still be capped at one hour, not wrap around.
func TestDeliver_HugeRetryAfterIsCapped(t *testing.T) {
	for _, v := range []string{"9999999999", "18446744074", "99999999999999999999"} {
		t.Run(v, func(t *testing.T) {
			srv, ch := receiver(t, http.StatusServiceUnavailable, http.Header{"Retry-After": {v}})
			s := newSink(t, httpsink.Options{URL: srv.URL})
			err := deliver(t, s, message([]byte(`{}`)))
			one(t, ch)
			perm, ra := sink.Classify(err)
			if err == nil || perm {
				t.Fatalf("Deliver = %v, want a transient error", err)
			}
			if ra != time.Hour {
				t.Errorf("Retry-After %s gave a requested delay of %s, want the 1h cap", v, ra)
			}
		})
	}
}

func TestDeliver_RedirectsAreNotFollowed(t *testing.T) {
	var targetHits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		targetHits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(target.Close)

	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			srv, ch := receiver(t, code, http.Header{"Location": {target.URL + "/elsewhere"}})
			s := newSink(t, httpsink.Options{URL: srv.URL})
			err := deliver(t, s, message([]byte(`{"a":1}`)))
			one(t, ch)
			if err == nil {
				t.Fatalf("Deliver after a %d = nil, want a failed attempt", code)
			}
			if perm, ra := sink.Classify(err); perm || ra != 0 {
				t.Errorf("a %d classified permanent=%v retryAfter=%s, want plain transient", code, perm, ra)
			}
			if n := targetHits.Load(); n != 0 {
				t.Fatalf("the redirect target received %d requests, want none", n)
			}
		})
	}
}

func TestDeliver_HangingReceiverIsCutByContext(t *testing.T) {
	stop := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs before srv.Close

	// The sink's own timeout is long: only the attempt's ctx can end it.
	s := newSink(t, httpsink.Options{URL: srv.URL, Timeout: 60_000 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.Deliver(ctx, message([]byte(`{}`))) }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Deliver did not return after its context's deadline")
	}
	select {
	case <-arrived:
	default:
		t.Fatal("the request never reached the receiver")
	}
	if err == nil {
		t.Fatal("Deliver to a hanging receiver = nil, want an error")
	}
	if perm, _ := sink.Classify(err); perm {
		t.Errorf("a cut attempt is permanent (%v), want transient", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
}

func TestDeliver_SinkTimeoutCutsHangingReceiver(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })

	s := newSink(t, httpsink.Options{URL: srv.URL, Timeout: 200 * time.Millisecond})
	err := deliver(t, s, message([]byte(`{}`))) // ctx allows 10 s
	if err == nil {
		t.Fatal("Deliver past timeout_ms = nil, want an error")
	}
	if perm, _ := sink.Classify(err); perm {
		t.Errorf("a timed-out attempt is permanent (%v), want transient", err)
	}
}

// closedAddr is a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestDeliver_UnreachableIsTransient(t *testing.T) {
	s := newSink(t, httpsink.Options{URL: "http://" + closedAddr(t) + "/in"})
	err := deliver(t, s, message([]byte(`{}`)))
	if err == nil {
		t.Fatal("Deliver to a closed port = nil")
	}
	if perm, ra := sink.Classify(err); perm || ra != 0 {
		t.Errorf("connection refused classified permanent=%v retryAfter=%s, want plain transient (%v)", perm, ra, err)
	}
}

// TestDeliver_ErrorDoesNotLeakURLSecrets: a failed attempt's error ends up
// in the delivery row (last_error, shown by GET /v1/hooks) and in logs, so
// it must not carry the URL's password, user or query values.
func TestDeliver_ErrorDoesNotLeakURLSecrets(t *testing.T) {
	s := newSink(t, httpsink.Options{URL: "http://operator:pa55word@" + closedAddr(t) + "/in?key=s3cret"})
	err := deliver(t, s, message([]byte(`{}`)))
	if err == nil {
		t.Fatal("Deliver to a closed port = nil")
	}
	for _, secret := range []string{"pa55word", "s3cret", "operator"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q leaks %q from the URL", err, secret)
		}
	}
}

// TestDeliver_ConnectionsAreReusedAtHighConcurrency: the dispatcher runs up
// to dispatch.concurrency attempts at once toward one receiver; every one
// of them must find its keep-alive connection again on the next round, or
// each round past the pool's size dials (and the receiver accepts) new
// connections. n concurrent deliveries, held until all n are in the
// receiver so they use n connections, twice: the second round must dial
// none.
func TestDeliver_ConnectionsAreReusedAtHighConcurrency(t *testing.T) {
	const n = 150 // above net/http's DefaultTransport MaxIdleConns (100)
	var conns atomic.Int64
	var inside atomic.Int64
	release := make(chan struct{})
	var releaseOnce atomic.Bool
	gate := make(chan chan struct{}, 1)
	gate <- release
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rel := <-gate
		gate <- rel
		if inside.Add(1) == n && releaseOnce.CompareAndSwap(false, true) {
			close(rel)
		}
		<-rel
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := newSink(t, httpsink.Options{URL: srv.URL + "/in"})

	round := func() {
		t.Helper()
		errc := make(chan error, n)
		for range n {
			go func() { errc <- deliver(t, s, message([]byte(`{}`))) }()
		}
		for range n {
			if err := <-errc; err != nil {
				t.Fatalf("Deliver: %v", err)
			}
		}
	}
	round()
	if got := conns.Load(); got != n {
		t.Fatalf("first round opened %d connections, want %d (one per concurrent delivery)", got, n)
	}
	// The next round: a fresh gate.
	inside.Store(0)
	releaseOnce.Store(false)
	<-gate
	gate <- make(chan struct{})
	round()
	if got := conns.Load() - n; got != 0 {
		t.Errorf("second round of %d concurrent deliveries opened %d new connections, want 0 (idle keep-alive connections were closed)", n, got)
	}
}
