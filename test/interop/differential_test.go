package interop

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v72/github"
	"github.com/slack-go/slack"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
	svix "github.com/svix/svix-webhooks/go"
	"github.com/twilio/twilio-go/client"

	"github.com/ankusa/ankusa/internal/verify"
)

// Differential tests: for generated requests, Ankusa's verdict (accept or
// refuse) must equal the provider's official library's. Each request is a
// correct signature from the library (or the documented algorithm where the
// library exports no signer) that the fuzzer may damage: another secret,
// flipped characters, extra or missing candidates, a timestamp moved, the
// body changed after signing.
//
// The input space leaves out, deliberately, what Ankusa does differently
// on purpose and documents (docs/configuration.md):
//   - timestamps within 1 s of the tolerance edge (the libraries compare
//     sub-second durations, Ankusa whole seconds), and future timestamps
//     for stripe-go, which checks only the past;
//   - timestamps that are not plain digits (strconv.ParseInt accepts a
//     sign; Ankusa refuses it) and unpadded base64 (Ankusa accepts it, the
//     Standard Webhooks libraries compare the padded text).

// fuzzInput is what every differential case draws from.
type fuzzInput struct {
	body    []byte
	secret  uint8 // 0: the configured secret; else another one
	tsOff   int16 // seconds before (or after) now
	damage  uint8 // 0: none; else which character of the signature to flip
	extra   uint8 // candidates added before the real one (0..3), some malformed
	tamper  bool  // change the body after signing
	reorder bool  // put the real signature first instead of last
}

// offset is tsOff folded into the compared domain: |off| ≤ 600, never
// within 1 s of the 300 s tolerance; past-only when past is set.
func (in fuzzInput) offset(past bool) int64 {
	off := int64(in.tsOff) % 600
	if past && off < 0 {
		off = -off
	}
	if a := max(off, -off); a >= 299 && a <= 301 {
		off += 5
	}
	return off
}

func (in fuzzInput) secretFor(configured string) string {
	if in.secret%3 == 0 {
		return configured
	}
	return configured + "-other"
}

func (in fuzzInput) finalBody() []byte {
	if in.tamper {
		return append(append([]byte{}, in.body...), '!')
	}
	return in.body
}

// flip changes one hex/base64 character of sig, chosen by damage.
func (in fuzzInput) flip(sig string) string {
	if in.damage == 0 || sig == "" {
		return sig
	}
	i := int(in.damage) % len(sig)
	c := sig[i]
	r := byte('A')
	if c == 'A' {
		r = 'B'
	}
	if c >= '0' && c <= '9' {
		r = '0' + (c-'0'+1)%10
	}
	return sig[:i] + string(r) + sig[i+1:]
}

type differential func(t *testing.T, in fuzzInput) (ankusa, library bool)

func differentials() map[string]differential {
	return map[string]differential{
		"stripe":            stripeCase,
		"standard_webhooks": standardCase,
		"svix":              svixCase,
		"github":            githubCase,
		"slack":             slackCase,
		"twilio":            twilioCase,
	}
}

func stripeCase(t *testing.T, in fuzzInput) (bool, bool) {
	const secret = "whsec_stripe_endpoint"
	now := time.Now()
	at := now.Add(-time.Duration(in.offset(true)) * time.Second)
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: in.body, Secret: in.secretFor(secret), Timestamp: at})
	good := in.flip(hex.EncodeToString(p.Signature))
	parts := []string{"t=" + strconv.FormatInt(at.Unix(), 10)}
	for i := 0; i < int(in.extra%4); i++ {
		parts = append(parts, []string{"v1=zz", "v1=" + strings.Repeat("0", 64), "v0=" + good, "v1=abc"}[i])
	}
	if in.reorder {
		parts = append(parts[:1], append([]string{"v1=" + good}, parts[1:]...)...)
	} else {
		parts = append(parts, "v1="+good)
	}
	header := strings.Join(parts, ",")
	body := in.finalBody()
	v := mustVerifier(t, verify.Spec{Type: "stripe", Secrets: []string{secret}})
	return v.Verify(http.Header{"Stripe-Signature": {header}}, body, now) == nil,
		webhook.ValidatePayloadWithTolerance(body, header, secret, 300*time.Second) == nil
}

func standardHeader(in fuzzInput, sig string) string {
	entries := []string{}
	for i := 0; i < int(in.extra%4); i++ {
		entries = append(entries, []string{"v1,bogus", "v1a,c2lnbmF0dXJl", "v2," + sig, "garbage"}[i])
	}
	good := "v1," + in.flip(sig)
	if in.reorder {
		return strings.Join(append([]string{good}, entries...), " ")
	}
	return strings.Join(append(entries, good), " ")
}

func standardCase(t *testing.T, in fuzzInput) (bool, bool) {
	now := time.Now()
	at := now.Add(-time.Duration(in.offset(false)) * time.Second)
	signer, _ := standardwebhooks.NewWebhook(in.secretFor(whsec))
	if signer == nil { // "whsec_…-other" is not base64: sign with a raw key instead
		signer, _ = standardwebhooks.NewWebhookRaw([]byte("another-key-entirely"))
	}
	sig, _ := signer.Sign("msg_diff", at, in.body)
	h := http.Header{}
	h.Set("webhook-id", "msg_diff")
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", standardHeader(in, strings.TrimPrefix(sig, "v1,")))
	body := in.finalBody()
	lib, _ := standardwebhooks.NewWebhook(whsec)
	v := mustVerifier(t, verify.Spec{Type: "standard_webhooks", Secrets: []string{whsec}})
	return v.Verify(h, body, now) == nil, lib.Verify(body, h) == nil
}

func svixCase(t *testing.T, in fuzzInput) (bool, bool) {
	now := time.Now()
	at := now.Add(-time.Duration(in.offset(false)) * time.Second)
	signer, _ := svix.NewWebhook(in.secretFor(whsec))
	if signer == nil {
		signer, _ = svix.NewWebhookRaw([]byte("another-key-entirely"))
	}
	sig, _ := signer.Sign("msg_diff", at, in.body)
	h := http.Header{}
	// The damage byte also picks the header names: svix-* or webhook-*.
	prefix := "svix"
	if in.damage%2 == 1 {
		prefix = "webhook"
	}
	h.Set(prefix+"-id", "msg_diff")
	h.Set(prefix+"-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set(prefix+"-signature", standardHeader(in, strings.TrimPrefix(sig, "v1,")))
	body := in.finalBody()
	lib, _ := svix.NewWebhook(whsec)
	v := mustVerifier(t, verify.Spec{Type: "svix", Secrets: []string{whsec}})
	return v.Verify(h, body, now) == nil, lib.Verify(body, h) == nil
}

func githubCase(t *testing.T, in fuzzInput) (bool, bool) {
	const secret = "github-webhook-secret"
	m := hmac.New(sha256.New, []byte(in.secretFor(secret)))
	m.Write(in.body)
	sig := "sha256=" + in.flip(hex.EncodeToString(m.Sum(nil)))
	if in.reorder {
		sig = strings.ToUpper(sig[:7]) + sig[7:] // "SHA256=": both refuse the prefix
	}
	body := in.finalBody()
	v := mustVerifier(t, verify.Spec{Type: "github", Secrets: []string{secret}})
	return v.Verify(http.Header{"X-Hub-Signature-256": {sig}}, body, time.Now()) == nil,
		github.ValidateSignature(sig, body, []byte(secret)) == nil
}

func slackCase(t *testing.T, in fuzzInput) (bool, bool) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	now := time.Now()
	ts := strconv.FormatInt(now.Add(-time.Duration(in.offset(false))*time.Second).Unix(), 10)
	m := hmac.New(sha256.New, []byte(in.secretFor(secret)))
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(in.body)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", "v0="+in.flip(hex.EncodeToString(m.Sum(nil))))
	body := in.finalBody()
	libOK := false
	if sv, err := slack.NewSecretsVerifier(h, secret); err == nil {
		_, _ = sv.Write(body)
		libOK = sv.Ensure() == nil
	}
	v := mustVerifier(t, verify.Spec{Type: "slack", Secrets: []string{secret}})
	return v.Verify(h, body, now) == nil, libOK
}

func twilioCase(t *testing.T, in fuzzInput) (bool, bool) {
	const token = "twilio-auth-token"
	const base = "https://hooks.example.com/webhooks/twilio"
	// Parameters from the body bytes, kept to the characters a URL and a
	// form carry unchanged through both parsers.
	form := url.Values{}
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, string(in.body))
	for i := 0; i+2 <= len(clean) && i < 20; i += 4 {
		form.Set("P"+clean[i:i+1], clean[i+1:min(i+4, len(clean))])
	}
	query := ""
	if in.extra%2 == 1 {
		query = "tenant=acme"
	}
	full := base
	if query != "" {
		full += "?" + query
	}
	sig := in.flip(twilioSign(in.secretFor(token), full, form))
	body := []byte(form.Encode())
	if in.tamper {
		form.Set("Injected", "1")
		body = []byte(form.Encode())
	}
	h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "X-Twilio-Signature": {sig}}
	v := mustVerifier(t, verify.Spec{Type: "twilio", Secrets: []string{token}, PublicURL: base}).(verify.URLVerifier)
	rv := client.NewRequestValidator(token)
	return v.VerifyURL(h, query, body, time.Now()) == nil, rv.ValidateBody(full, body, sig)
}

func checkDifferential(t *testing.T, name string, d differential, in fuzzInput) {
	t.Helper()
	a, l := d(t, in)
	if a != l {
		t.Fatalf("%s: Ankusa accepts=%v, the official library accepts=%v, for %+v", name, a, l, in)
	}
}

// TestDifferential_Random runs every differential over a fixed pseudo-random
// sample, so `go test` (and make test) checks the agreement without a fuzz
// run; it also makes sure both verdicts occur.
func TestDifferential_Random(t *testing.T) {
	for name, d := range differentials() {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			accepted, refused := 0, 0
			for i := 0; i < 400; i++ {
				body := make([]byte, r.IntN(64))
				for j := range body {
					body[j] = byte(r.IntN(256))
				}
				in := fuzzInput{body: body, secret: uint8(r.IntN(4)), tsOff: int16(r.IntN(1400) - 700),
					damage: uint8(r.IntN(3) * r.IntN(200)), extra: uint8(r.IntN(4)), tamper: r.IntN(5) == 0, reorder: r.IntN(2) == 0}
				a, l := d(t, in)
				if a != l {
					t.Fatalf("Ankusa accepts=%v, the official library accepts=%v, for %+v", a, l, in)
				}
				if a {
					accepted++
				} else {
					refused++
				}
			}
			if accepted == 0 || refused == 0 {
				t.Fatalf("sample too narrow: %d accepted, %d refused", accepted, refused)
			}
		})
	}
}

// FuzzDifferential is the same comparison under the fuzzer:
// go test -fuzz FuzzDifferential ./test/interop (with -run none).
func FuzzDifferential(f *testing.F) {
	names := []string{"stripe", "standard_webhooks", "svix", "github", "slack", "twilio"}
	for i := range names {
		f.Add(uint8(i), []byte(`{"id":"evt_1"}`), uint8(0), int16(0), uint8(0), uint8(0), false, false)
		f.Add(uint8(i), []byte("a=1&b=2"), uint8(1), int16(120), uint8(7), uint8(2), false, true)
		f.Add(uint8(i), []byte{}, uint8(0), int16(-450), uint8(0), uint8(3), true, false)
	}
	ds := differentials()
	f.Fuzz(func(t *testing.T, which uint8, body []byte, secret uint8, tsOff int16, damage, extra uint8, tamper, reorder bool) {
		name := names[int(which)%len(names)]
		checkDifferential(t, name, ds[name], fuzzInput{body, secret, tsOff, damage, extra, tamper, reorder})
	})
}
