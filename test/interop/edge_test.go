package interop

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-github/v72/github"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
	svix "github.com/svix/svix-webhooks/go"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/verify"
)

// edgeSources builds the edge's sources from c as app.EdgeSources does,
// for what this test exercises (verifier, dedupe, sinks). Not app itself:
// it would link every adapter (S3, Kafka, NATS…) into this module.
func edgeSources(c *config.Config, nums map[store.SinkRef]uint16) (map[string]*edge.Source, error) {
	out := map[string]*edge.Source{}
	for id, sc := range c.Sources {
		v, err := verify.New(sc.Verify.Spec())
		if err != nil {
			return nil, err
		}
		s := &edge.Source{ID: id, Verifier: v}
		if d := sc.Dedupe; d != nil {
			s.Dedupe = dedupe.New(&dedupe.Options{Preset: d.Preset, Header: d.Header, JSON: d.JSON, TTL: time.Duration(d.TTLSeconds) * time.Second})
		}
		for _, k := range sc.Sinks {
			s.Sinks = append(s.Sinks, queue.SinkRef{Num: nums[store.SinkRef{Source: id, Sink: k.ID}], ID: k.ID})
		}
		out[id] = s
	}
	return out, nil
}

type nopObserver struct{}

func (nopObserver) Ingest(string, string, time.Duration) {}
func (nopObserver) IngestRefused(string)                 {}

// TestOracle_ThroughTheEdge: requests signed by the official libraries,
// sent to the ingest handler built from a config as the binary builds it,
// are answered 201 and stored; the same requests with the body changed are
// 401.
func TestOracle_ThroughTheEdge(t *testing.T) {
	const (
		stripeSecret = "whsec_stripe_endpoint"
		githubSecret = "github-webhook-secret"
		twilioToken  = "twilio-auth-token"
	)
	c, err := config.LoadBytes([]byte(`
sources:
  stripe:
    verify: {type: stripe, secret: "`+stripeSecret+`"}
    dedupe: {preset: stripe}
    sinks: [{type: log}]
  sw:
    verify: {type: standard_webhooks, secret: "`+whsec+`"}
    dedupe: {preset: standard_webhooks}
    sinks: [{type: log}]
  svix:
    verify: {type: svix, secret: "`+whsec+`"}
    dedupe: {preset: svix}
    sinks: [{type: log}]
  github:
    verify: {type: github, secret: "`+githubSecret+`"}
    dedupe: {preset: github}
    sinks: [{type: log}]
  twilio:
    verify: {type: twilio, secret: "`+twilioToken+`", public_url: "https://hooks.example.com/webhooks/twilio"}
    sinks: [{type: log}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	var refs []store.SinkRef
	for id := range c.Sources {
		refs = append(refs, store.SinkRef{Source: id, Sink: "log"})
	}
	nums, err := st.SinkNumbers(refs)
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := edgeSources(c, nums)
	if err != nil {
		t.Fatal(err)
	}
	h := edge.New(edge.Options{Routing: "path", Prefix: "/webhooks", MaxBodyBytes: 1 << 20,
		Sources: edge.NewRegistry(srcs), Committer: q, Observer: nopObserver{}, Logger: testutil.Logger(t)})

	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	body := []byte(`{"id":"evt_interop","type":"ping"}`)
	type req struct {
		name, url string
		body      []byte
		h         http.Header
	}
	var reqs []req

	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: now})
	reqs = append(reqs, req{"stripe-go", "/webhooks/stripe", body, http.Header{"Stripe-Signature": {sp.Header}}})

	sw, _ := standardwebhooks.NewWebhook(whsec)
	swSig, _ := sw.Sign("msg_interop_sw", now, body)
	reqs = append(reqs, req{"standard-webhooks", "/webhooks/sw", body, http.Header{
		"Webhook-Id": {"msg_interop_sw"}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {swSig}}})

	sx, _ := svix.NewWebhook(whsec)
	sxSig, _ := sx.Sign("msg_interop_sx", now, body)
	reqs = append(reqs, req{"svix", "/webhooks/svix", body, http.Header{
		"Svix-Id": {"msg_interop_sx"}, "Svix-Timestamp": {ts}, "Svix-Signature": {sxSig}}})

	m := hmac.New(sha256.New, []byte(githubSecret))
	m.Write(body)
	ghSig := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if github.ValidateSignature(ghSig, body, []byte(githubSecret)) != nil {
		t.Fatal("go-github refuses the test's GitHub signature")
	}
	reqs = append(reqs, req{"github (go-github validates)", "/webhooks/github", body, http.Header{
		"X-Hub-Signature-256": {ghSig}, "X-Github-Delivery": {"d-interop"}}})

	form := url.Values{"CallSid": {"CA9"}, "Body": {"hi"}}
	reqs = append(reqs, req{"twilio (twilio-go validates)", "/webhooks/twilio?tenant=acme", []byte(form.Encode()), http.Header{
		"Content-Type":       {"application/x-www-form-urlencoded"},
		"X-Twilio-Signature": {twilioSign(twilioToken, "https://hooks.example.com/webhooks/twilio?tenant=acme", form)}}})

	for _, r := range reqs {
		for _, tamper := range []bool{false, true} {
			b := r.body
			if tamper {
				b = append(append([]byte{}, b...), ' ')
			}
			hr := httptest.NewRequest(http.MethodPost, "http://ankusa.internal"+r.url, bytes.NewReader(b))
			for k, vs := range r.h {
				hr.Header[k] = vs
			}
			rw := httptest.NewRecorder()
			h.ServeHTTP(rw, hr)
			want := http.StatusCreated
			if tamper {
				want = http.StatusUnauthorized
			}
			if rw.Code != want {
				t.Errorf("%s (body changed: %v): %d %s, want %d", r.name, tamper, rw.Code, rw.Body.String(), want)
			}
		}
	}
	if n := q.Stats().Hooks; n != uint64(len(reqs)) {
		t.Fatalf("stored %d hooks, want %d", n, len(reqs))
	}
}
