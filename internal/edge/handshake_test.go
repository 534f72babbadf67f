package edge_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// handshakeLog counts what the edge reports, handshakes included.
type handshakeLog struct {
	mu         sync.Mutex
	handshakes map[string]int // "source/provider"
}

func (*handshakeLog) Ingest(string, string, time.Duration) {}
func (*handshakeLog) IngestRefused(string)                 {}
func (o *handshakeLog) Handshake(sourceID, provider string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handshakes[sourceID+"/"+provider]++
}

func (o *handshakeLog) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.handshakes[key]
}

var _ edge.HandshakeObserver = (*handshakeLog)(nil)

const (
	slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	zoomSecret  = "zoom-secret-token"
)

// handshakeServer runs the edge for sources built from a config, as the
// binary builds them (app.EdgeSources).
func handshakeServer(t *testing.T, yml string) (*httptest.Server, *queue.Queue, *handshakeLog) {
	t.Helper()
	h, q, obs := handshakeHandler(t, yml)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, q, obs
}

// handshakeHandler is the handler of handshakeServer, without a listener.
func handshakeHandler(t testing.TB, yml string) (http.Handler, *queue.Queue, *handshakeLog) {
	t.Helper()
	c, err := config.LoadBytes([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	var refs []store.SinkRef
	for id, s := range c.Sources {
		for _, k := range s.Sinks {
			refs = append(refs, store.SinkRef{Source: id, Sink: k.ID})
		}
	}
	nums, err := st.SinkNumbers(refs)
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := app.EdgeSources(c.Sources, nums)
	if err != nil {
		t.Fatal(err)
	}
	obs := &handshakeLog{handshakes: map[string]int{}}
	h := edge.New(edge.Options{
		Routing: "path", Prefix: "/webhooks", MaxBodyBytes: 1 << 20,
		Sources: edge.NewRegistry(srcs), Committer: q, Observer: obs, Logger: testutil.Logger(t),
	})
	return h, q, obs
}

type rawReply struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, u string, body []byte, hdr http.Header) rawReply {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawReply{resp.StatusCode, resp.Header, string(b)}
}

func hexMAC(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// TestHandshakes: each provider's handshake, in exactly the request shape
// its docs give, is answered as those docs say, stores nothing and is
// counted; a forged signed one is 401; a GET elsewhere stays 405.
func TestHandshakes(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	srv, q, obs := handshakeServer(t, `
sources:
  slack:
    verify: {type: slack, secret: "`+slackSecret+`"}
    sinks: [{type: log}]
  zoom:
    verify: {type: zoom, secret: "`+zoomSecret+`"}
    sinks: [{type: log}]
  meta:
    verify: {type: meta, secret: app-secret, verify_token: meatyhamhock}
    sinks: [{type: log}]
  discord:
    verify: {type: discord, public_key: "`+hex.EncodeToString(pub)+`"}
    sinks: [{type: log}]
  graph:
    handshake: msgraph
    sinks: [{type: log}]
  dropbox:
    verify: {type: dropbox, secret: dropbox-app-secret}
    sinks: [{type: log}]
  plain:
    sinks: [{type: log}]
`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)

	t.Run("slack url_verification", func(t *testing.T) {
		// Slack Events API docs: the url_verification event.
		body := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
		h := http.Header{"Content-Type": {"application/json"}, "X-Slack-Request-Timestamp": {ts},
			"X-Slack-Signature": {"v0=" + hexMAC(slackSecret, "v0:"+ts+":"+string(body))}}
		r := do(t, "POST", srv.URL+"/webhooks/slack", body, h)
		if r.status != 200 || r.body != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
			t.Fatalf("reply %d %q %v", r.status, r.body, r.header)
		}
		h.Set("X-Slack-Signature", "v0="+hexMAC("forged", "v0:"+ts+":"+string(body)))
		if r := do(t, "POST", srv.URL+"/webhooks/slack", body, h); r.status != 401 || !strings.Contains(r.body, "no_match") {
			t.Fatalf("forged: %d %s", r.status, r.body)
		}
	})

	t.Run("zoom endpoint.url_validation", func(t *testing.T) {
		// Zoom docs ("Using webhooks", validate your webhook endpoint).
		body := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
		h := http.Header{"Content-Type": {"application/json"}, "X-Zm-Request-Timestamp": {ts},
			"X-Zm-Signature": {"v0=" + hexMAC(zoomSecret, "v0:"+ts+":"+string(body))}}
		r := do(t, "POST", srv.URL+"/webhooks/zoom", body, h)
		var got map[string]string
		_ = json.Unmarshal([]byte(r.body), &got)
		want := map[string]string{"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": hexMAC(zoomSecret, "qgg8vlvZRS6UYooatFL8Aw")}
		if r.status != 200 || got["plainToken"] != want["plainToken"] || got["encryptedToken"] != want["encryptedToken"] || len(got) != 2 {
			t.Fatalf("reply %d %s, want %v", r.status, r.body, want)
		}
		h.Del("X-Zm-Signature")
		if r := do(t, "POST", srv.URL+"/webhooks/zoom", body, h); r.status != 401 {
			t.Fatalf("unsigned: %d %s", r.status, r.body)
		}
	})

	t.Run("meta hub.challenge", func(t *testing.T) {
		// Meta docs ("Webhooks — Verification requests").
		u := srv.URL + "/webhooks/meta?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhock"
		r := do(t, "GET", u, nil, nil)
		if r.status != 200 || r.body != "1158201444" {
			t.Fatalf("reply %d %q", r.status, r.body)
		}
		if r := do(t, "GET", strings.Replace(u, "meatyhamhock", "wrong", 1), nil, nil); r.status != 403 {
			t.Fatalf("wrong token: %d %s", r.status, r.body)
		}
		if r := do(t, "GET", strings.Replace(u, "subscribe", "other", 1), nil, nil); r.status != 400 {
			t.Fatalf("other mode: %d %s", r.status, r.body)
		}
	})

	t.Run("discord PING", func(t *testing.T) {
		// Discord docs ("Interactions — Receiving an interaction"): PING is
		// type 1; the answer is {"type":1}, after Ed25519 verification.
		body := []byte(`{"application_id":"1234567890","id":"987654321","token":"tok","type":1,"version":1}`)
		sign := func(k ed25519.PrivateKey) http.Header {
			return http.Header{"Content-Type": {"application/json"}, "X-Signature-Timestamp": {ts},
				"X-Signature-Ed25519": {hex.EncodeToString(ed25519.Sign(k, append([]byte(ts), body...)))}}
		}
		r := do(t, "POST", srv.URL+"/webhooks/discord", body, sign(priv))
		if r.status != 200 || strings.TrimSpace(r.body) != `{"type":1}` {
			t.Fatalf("reply %d %s", r.status, r.body)
		}
		_, stranger, _ := ed25519.GenerateKey(rand.Reader)
		if r := do(t, "POST", srv.URL+"/webhooks/discord", body, sign(stranger)); r.status != 401 {
			t.Fatalf("bad signature: %d %s", r.status, r.body)
		}
	})

	t.Run("msgraph validationToken", func(t *testing.T) {
		// Microsoft Graph docs ("Receive change notifications — notification
		// endpoint validation"): a POST with the token in the query, text/plain.
		token := "Validation: Testing client application reachability for subscription Request-Id: 7a7e4c5c-8e5f-4c7a-9e3a-6f1c2b0d9a11"
		h := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
		r := do(t, "POST", srv.URL+"/webhooks/graph?validationToken="+url.QueryEscape(token), nil, h)
		if r.status != 200 || r.body != token || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("reply %d %q %v", r.status, r.body, r.header)
		}
	})

	t.Run("dropbox challenge", func(t *testing.T) {
		// Dropbox docs ("Webhooks"): GET ?challenge=…, echoed with
		// Content-Type text/plain and X-Content-Type-Options: nosniff.
		r := do(t, "GET", srv.URL+"/webhooks/dropbox?challenge=hQy7ZTvWdD0", nil, nil)
		if r.status != 200 || r.body != "hQy7ZTvWdD0" || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("reply %d %q %v", r.status, r.body, r.header)
		}
	})

	if n := q.Stats().Hooks; n != 0 {
		t.Fatalf("handshakes stored %d hooks, want 0", n)
	}
	for _, k := range []string{"slack/slack", "zoom/zoom", "meta/meta", "discord/discord", "graph/msgraph", "dropbox/dropbox"} {
		if obs.count(k) != 1 {
			t.Errorf("handshakes counted for %s: %d, want 1", k, obs.count(k))
		}
	}

	t.Run("not a handshake", func(t *testing.T) {
		for _, p := range []string{"/webhooks/plain", "/webhooks/slack", "/webhooks/graph"} {
			if r := do(t, "GET", srv.URL+p+"?challenge=x&hub.challenge=x", nil, nil); r.status != 405 {
				t.Errorf("GET %s: %d, want 405", p, r.status)
			}
		}
		// A Slack event that is not url_verification is an ordinary hook.
		body := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention"}}`)
		h := http.Header{"X-Slack-Request-Timestamp": {ts}, "X-Slack-Signature": {"v0=" + hexMAC(slackSecret, "v0:"+ts+":"+string(body))}}
		if r := do(t, "POST", srv.URL+"/webhooks/slack", body, h); r.status != 201 {
			t.Fatalf("slack event: %d %s", r.status, r.body)
		}
		if r := do(t, "POST", srv.URL+"/webhooks/graph", []byte(`{"value":[]}`), nil); r.status != 201 {
			t.Fatalf("graph notification: %d %s", r.status, r.body)
		}
		if n := q.Stats().Hooks; n != 2 {
			t.Fatalf("hooks = %d, want the two ordinary ones", n)
		}
	})
}

// FuzzHandshakes drives the handshake sources with arbitrary methods,
// queries and bodies, unsigned. Invariants: no panic; the status is 200 (a
// handshake answered), 201 (an ordinary hook, only on the unsigned msgraph
// source), 400/401/403/405 with a JSON error; a 200 only for a request
// carrying its provider's marker; nothing on a signed source is ever
// stored or answered 200 without a signature.
func FuzzHandshakes(f *testing.F) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	h, _, _ := handshakeHandler(f, `
sources:
  slack: {verify: {type: slack, secret: s}, sinks: [{type: log}]}
  zoom: {verify: {type: zoom, secret: z}, sinks: [{type: log}]}
  meta: {verify: {type: meta, secret: m, verify_token: tok}, sinks: [{type: log}]}
  discord: {verify: {type: discord, public_key: "`+hex.EncodeToString(pub)+`"}, sinks: [{type: log}]}
  graph: {handshake: msgraph, sinks: [{type: log}]}
  dropbox: {verify: {type: dropbox, secret: d}, sinks: [{type: log}]}
`)
	names := []string{"slack", "zoom", "meta", "discord", "graph", "dropbox"}
	f.Add(uint8(0), true, "", []byte(`{"type":"url_verification","challenge":"c"}`))
	f.Add(uint8(1), true, "", []byte(`{"event":"endpoint.url_validation","payload":{"plainToken":"p"}}`))
	f.Add(uint8(2), false, "hub.mode=subscribe&hub.challenge=1&hub.verify_token=tok", []byte{})
	f.Add(uint8(3), true, "", []byte(`{"type":1}`))
	f.Add(uint8(4), true, "validationToken=abc", []byte{})
	f.Add(uint8(5), false, "challenge=xyz", []byte{})
	f.Fuzz(func(t *testing.T, which uint8, post bool, query string, body []byte) {
		name := names[int(which)%len(names)]
		method := http.MethodGet
		if post {
			method = http.MethodPost
		}
		req := httptest.NewRequest(method, "/webhooks/"+name, bytes.NewReader(body))
		req.URL.RawQuery = query
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, req)
		switch rw.Code {
		case 200:
			ok := false
			switch name {
			case "meta":
				ok = !post && req.URL.Query().Get("hub.verify_token") == "tok"
			case "graph":
				ok = post && req.URL.Query().Get("validationToken") != ""
			case "dropbox":
				ok = !post && req.URL.Query().Get("challenge") != ""
			}
			if !ok {
				t.Fatalf("200 for %s %s ?%q body %q", method, name, query, body)
			}
		case 201:
			if name != "graph" {
				t.Fatalf("201 for an unsigned request to %s", name)
			}
		case 400, 401, 403, 405:
			var m map[string]any
			if err := json.Unmarshal(rw.Body.Bytes(), &m); err != nil || m["error"] == nil {
				t.Fatalf("%d without a JSON error: %q", rw.Code, rw.Body.String())
			}
		default:
			t.Fatalf("status %d for %s %s", rw.Code, method, name)
		}
	})
}
