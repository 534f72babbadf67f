package httpsink_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/httpsink"
)

// rawReceiver accepts connections and hands over each request's bytes as
// they arrived (request line, headers, body), answering 200 to each.
func rawReceiver(t *testing.T) (addr string, reqs <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	ch := make(chan []byte, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var raw bytes.Buffer
					tp := textproto.NewReader(bufio.NewReader(io.TeeReader(br, &raw)))
					// Read line by line through the tee: the request line
					// and headers, then Content-Length bytes of body.
					if _, err := tp.ReadLine(); err != nil {
						return
					}
					hdr, err := tp.ReadMIMEHeader()
					if err != nil {
						return
					}
					n, _ := strconv.Atoi(hdr.Get("Content-Length"))
					if _, err := io.CopyN(io.Discard, tp.R, int64(n)); err != nil {
						return
					}
					ch <- raw.Bytes()
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// legacyDeliver is how the sink built and sent its request before issue
// 14's cuts (http.NewRequest and an http.Client): the reference for the
// bytes a receiver gets.
func legacyDeliver(t *testing.T, url string, headers map[string]string, secret []byte, now time.Time, m *sink.Message) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(m.Body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
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
	if secret != nil {
		ts := now.Unix()
		req.Header.Set("Webhook-Id", id)
		req.Header.Set("Webhook-Timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("Webhook-Signature", httpsink.Sign(secret, id, ts, m.Body))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// TestDeliver_WireBytesAsBefore: the request a receiver reads, byte for
// byte (request line, every header and its order, body), is the one the
// sink sent through http.Client before it called the transport itself.
func TestDeliver_WireBytesAsBefore(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		secret  []byte
		edit    func(m *sink.Message)
	}{
		{name: "plain", path: "/in"},
		{name: "every optional header, signed", path: "/in/orders?token=abc",
			headers: map[string]string{"x-team": "payments", "Content-Type": "text/ignored", "X-Ankusa-Id": "overridden"},
			secret:  []byte("0123456789abcdef0123456789abcdef"),
			edit: func(m *sink.Message) {
				m.DedupeKey, m.ReplayID, m.Flagged = "evt_1", "job-7", true
			}},
		{name: "user info becomes basic auth", path: "/in", headers: map[string]string{"X-Team": "a"}},
		{name: "user info loses to an Authorization header", path: "/in", headers: map[string]string{"authorization": "Bearer t0k3n"}},
		{name: "empty body, no content type, no tenant", path: "/in", edit: func(m *sink.Message) {
			m.Body, m.ContentType, m.Tenant = nil, "", ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, reqs := rawReceiver(t)
			url := "http://" + addr + tc.path
			if tc.name == "user info becomes basic auth" || tc.name == "user info loses to an Authorization header" {
				url = "http://operator:pa55@" + addr + tc.path
			}
			m := message(binaryBody())
			if tc.edit != nil {
				tc.edit(m)
			}
			legacyDeliver(t, url, tc.headers, tc.secret, now, m)
			want := <-reqs
			s := newSink(t, httpsink.Options{URL: url, Headers: tc.headers, Secret: tc.secret})
			httpsink.SetNow(s, func() time.Time { return now })
			if err := deliver(t, s, m); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			got := <-reqs
			if !bytes.Equal(got, want) {
				t.Errorf("the receiver read\n%q\nwant (as through http.Client)\n%q", got, want)
			}
		})
	}
}
