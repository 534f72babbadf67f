package interop

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
	svix "github.com/svix/svix-webhooks/go"
	"github.com/twilio/twilio-go/client"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/httpsink"
	"github.com/ankusa/ankusa/internal/verify"
)

// The providers' official libraries sign; Ankusa's verifier must accept.
// Every test uses the real clock: the libraries read it themselves.

const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func mustVerifier(t testing.TB, s verify.Spec) verify.Verifier {
	t.Helper()
	v, err := verify.New(s)
	if err != nil {
		t.Fatalf("verify.New(%s): %v", s.Type, err)
	}
	return v
}

// TestOracle_StripeSigns: stripe-go's GenerateTestSignedPayload, the
// library's own helper for signing test events, with the newest and an
// older endpoint secret.
func TestOracle_StripeSigns(t *testing.T) {
	v := mustVerifier(t, verify.Spec{Type: "stripe", Secrets: []string{"whsec_new", "whsec_old"}})
	body := []byte(`{"id":"evt_1","object":"event","type":"invoice.paid"}`)
	for _, secret := range []string{"whsec_new", "whsec_old"} {
		p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: time.Now()})
		if err := v.Verify(http.Header{"Stripe-Signature": {p.Header}}, p.Payload, time.Now()); err != nil {
			t.Fatalf("stripe-go signed with %s, Ankusa refused: %v", secret, err)
		}
	}
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_other"})
	if verify.ReasonOf(v.Verify(http.Header{"Stripe-Signature": {p.Header}}, body, time.Now())) != verify.NoMatch {
		t.Fatal("a payload signed with another secret was not no_match")
	}
}

// TestOracle_StandardWebhooksAndSvixSign: the Standard Webhooks and Svix
// libraries' Sign, under both header sets and both verify types.
func TestOracle_StandardWebhooksAndSvixSign(t *testing.T) {
	body := []byte(`{"type":"user.created","data":{"id":42}}`)
	now := time.Now()
	sw, err := standardwebhooks.NewWebhook(whsec)
	if err != nil {
		t.Fatal(err)
	}
	sx, err := svix.NewWebhook(whsec)
	if err != nil {
		t.Fatal(err)
	}
	swSig, err := sw.Sign("msg_sw", now, body)
	if err != nil {
		t.Fatal(err)
	}
	sxSig, err := sx.Sign("msg_sx", now, body)
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	hdr := func(prefix, id, sig string) http.Header {
		h := http.Header{}
		h.Set(prefix+"-id", id)
		h.Set(prefix+"-timestamp", ts)
		h.Set(prefix+"-signature", sig)
		return h
	}
	for _, typ := range []string{"standard_webhooks", "svix"} {
		v := mustVerifier(t, verify.Spec{Type: typ, Secrets: []string{whsec}})
		for name, h := range map[string]http.Header{
			"standard-webhooks Sign, webhook-* headers": hdr("webhook", "msg_sw", swSig),
			"svix Sign, svix-* headers":                 hdr("svix", "msg_sx", sxSig),
			"svix Sign, webhook-* headers":              hdr("webhook", "msg_sx", sxSig),
			"rotation: a stale entry first":             hdr("svix", "msg_sx", "v1,c3RhbGU= "+sxSig),
		} {
			if err := v.Verify(h, body, now); err != nil {
				t.Errorf("%s, %s: Ankusa refused: %v", typ, name, err)
			}
		}
	}
}

// TestOracle_TwilioValidates: a request twilio-go's RequestValidator
// accepts is accepted by Ankusa's twilio type, form and JSON bodies both.
// (twilio-go does not export its signer; the signature here is the
// algorithm of Twilio's docs, and the library is the judge.)
func TestOracle_TwilioValidates(t *testing.T) {
	const token = "twilio-auth-token"
	rv := client.NewRequestValidator(token)
	v := mustVerifier(t, verify.Spec{Type: "twilio", Secrets: []string{token}, PublicURL: "https://hooks.example.com/webhooks/twilio"}).(verify.URLVerifier)

	form := url.Values{"CallSid": {"CA123"}, "From": {"+14158675310"}, "Body": {"hello"}}
	full := "https://hooks.example.com/webhooks/twilio?tenant=acme"
	sig := twilioSign(token, full, form)
	if !rv.ValidateBody(full, []byte(form.Encode()), sig) {
		t.Fatal("twilio-go refuses the test's signature: the test's signer is wrong")
	}
	h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "X-Twilio-Signature": {sig}}
	if err := v.VerifyURL(h, "tenant=acme", []byte(form.Encode()), time.Now()); err != nil {
		t.Fatalf("form body: twilio-go accepts, Ankusa refused: %v", err)
	}

	body := []byte(`{"CallSid":"CA123"}`)
	q := "bodySHA256=" + sha256Hex(body)
	jsonSig := twilioSign(token, "https://hooks.example.com/webhooks/twilio?"+q, nil)
	if !rv.ValidateBody("https://hooks.example.com/webhooks/twilio?"+q, body, jsonSig) {
		t.Fatal("twilio-go refuses the JSON signature")
	}
	h = http.Header{"Content-Type": {"application/json"}, "X-Twilio-Signature": {jsonSig}}
	if err := v.VerifyURL(h, q, body, time.Now()); err != nil {
		t.Fatalf("JSON body: twilio-go accepts, Ankusa refused: %v", err)
	}
}

// twilioSign is Twilio's documented algorithm: base64 HMAC-SHA1 of the URL
// and the form parameters sorted by name.
func twilioSign(token, u string, form url.Values) string {
	names := make([]string, 0, len(form))
	for n := range form {
		names = append(names, n)
	}
	sort.Strings(names)
	m := hmac.New(sha1.New, []byte(token))
	m.Write([]byte(u))
	for _, n := range names {
		m.Write([]byte(n + form.Get(n)))
	}
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestOracle_HTTPSinkSignatureVerified: what Ankusa's HTTP sink sends with
// a secret is accepted by the Standard Webhooks and Svix libraries' Verify.
func TestOracle_HTTPSinkSignatureVerified(t *testing.T) {
	type got struct {
		h    http.Header
		body []byte
	}
	ch := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{r.Header.Clone(), b}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	key, err := (&config.HTTPSink{Secret: whsec}).SigningKey() // as the app decodes it
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpsink.New(httpsink.Options{URL: srv.URL, Timeout: 5 * time.Second, Secret: key})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"order":1,"total":"9.99"}`)
	m := &sink.Message{ID: uuid.Must(uuid.NewV7()), Tenant: "default", Source: "orders", ReceivedAt: time.Now(),
		ContentType: "application/json", Body: body, Attempt: 1}
	if err := s.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	g := <-ch
	sw, _ := standardwebhooks.NewWebhook(whsec)
	if err := sw.Verify(g.body, g.h); err != nil {
		t.Errorf("standard-webhooks Verify refused the HTTP sink's request: %v (headers %v)", err, g.h)
	}
	sx, _ := svix.NewWebhook(whsec)
	if err := sx.Verify(g.body, g.h); err != nil {
		t.Errorf("svix Verify refused the HTTP sink's request: %v", err)
	}
	// And Ankusa's own standard_webhooks type accepts its own sink.
	if err := mustVerifier(t, verify.Spec{Type: "standard_webhooks", Secrets: []string{whsec}}).Verify(g.h, g.body, time.Now()); err != nil {
		t.Errorf("Ankusa refused its own sink's signature: %v", err)
	}
}
