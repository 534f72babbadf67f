package verify_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/verify"
)

// TestVerify_TwilioPublishedVector uses the example of Twilio's docs
// ("Webhooks security", the api-snippets signature_validation sample):
// auth token 12345, URL https://mycompany.com/myapp.php?foo=1&bar=2, form
// parameters CallSid, Caller, Digits, From, To, signature
// GvWf1cFY/Q7PnoempGyD5oXAezc=.
func TestVerify_TwilioPublishedVector(t *testing.T) {
	form := url.Values{
		"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+14158675310"}, "Digits": {"1234"},
		"From": {"+14158675310"}, "To": {"+18005551212"},
	}
	body := []byte(form.Encode())
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("X-Twilio-Signature", "GvWf1cFY/Q7PnoempGyD5oXAezc=")
	for _, pub := range []string{"https://mycompany.com/myapp.php", "https://mycompany.com:443/myapp.php", "https://mycompany.com/myapp.php?ignored=1"} {
		v := mustNew(t, verify.Spec{Type: "twilio", Secrets: []string{"12345"}, PublicURL: pub}).(verify.URLVerifier)
		wantReason(t, v.VerifyURL(h, "foo=1&bar=2", body, now), "")
		wantReason(t, v.VerifyURL(h, "foo=1&bar=3", body, now), verify.NoMatch)
		wantReason(t, v.VerifyURL(h, "foo=1&bar=2", []byte(strings.Replace(string(body), "1234", "1235", 1)), now), verify.NoMatch)
		wantReason(t, v.Verify(h, body, now), verify.NoMatch) // the query is signed
	}
	v := mustNew(t, verify.Spec{Type: "twilio", Secrets: []string{"other", "12345"}, PublicURL: "https://mycompany.com/myapp.php"}).(verify.URLVerifier)
	wantReason(t, v.VerifyURL(h, "foo=1&bar=2", body, now), "")
	wantReason(t, v.VerifyURL(http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, "foo=1&bar=2", body, now), verify.MissingSignature)
	wantReason(t, v.VerifyURL(with(h.Clone(), "X-Twilio-Signature", "!!"), "foo=1&bar=2", body, now), verify.MalformedSignature)
	// Found by the differential fuzz test against twilio-go: a second
	// spelling of the same digest (unused low bits set) is not Twilio's.
	wantReason(t, v.VerifyURL(with(h.Clone(), "X-Twilio-Signature", nonCanonicalB64("GvWf1cFY/Q7PnoempGyD5oXAezc=")), "foo=1&bar=2", body, now), verify.MalformedSignature)
	wantReason(t, v.VerifyURL(with(h.Clone(), "X-Twilio-Signature", "GvWf1cFY/Q7PnoempGyD5oXAezc"), "foo=1&bar=2", body, now), verify.MalformedSignature)
}

// TestVerify_TwilioJSONBody: for a JSON body Twilio signs only the URL,
// which carries bodySHA256 = hex SHA-256 of the body (Twilio docs, the
// signature_validation_json sample).
func TestVerify_TwilioJSONBody(t *testing.T) {
	const token = "twilio-auth-token"
	body := []byte(`{"CallSid":"CA1234567890ABCDE","Caller":"+12349013030"}`)
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != "5ccde7145dfb8f56479710896586cb9d5911809d83afbe34627818790db0aec9" {
		t.Fatalf("the sample's bodySHA256 is not the SHA-256 of its body")
	}
	query := "bodySHA256=" + hex.EncodeToString(sum[:])
	sig := base64.StdEncoding.EncodeToString(mac(sha1.New, []byte(token), "https://example.com/myapp?"+query))
	h := http.Header{"Content-Type": {"application/json"}, "X-Twilio-Signature": {sig}}
	v := mustNew(t, verify.Spec{Type: "twilio", Secrets: []string{token}, PublicURL: "https://example.com/myapp"}).(verify.URLVerifier)
	wantReason(t, v.VerifyURL(h, query, body, now), "")
	wantReason(t, v.VerifyURL(h, query, append(body, ' '), now), verify.NoMatch)
}

// TestVerify_SendGridPublishedVector uses the vector of SendGrid's own Go
// library (sendgrid-go helpers/eventwebhook tests): its public key,
// timestamp 1588788367 and signature over the JSON payload
// {"category":"example_payload","event":"test_event","message_id":"message_id"}.
func TestVerify_SendGridPublishedVector(t *testing.T) {
	const (
		pubKey = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="
		ts     = "1588788367"
		sig    = "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0="
	)
	payload, _ := json.Marshal(map[string]any{"event": "test_event", "category": "example_payload", "message_id": "message_id"})
	at := time.Unix(1588788367, 0)
	h := http.Header{}
	h.Set("X-Twilio-Email-Event-Webhook-Signature", sig)
	h.Set("X-Twilio-Email-Event-Webhook-Timestamp", ts)
	der, _ := base64.StdEncoding.DecodeString(pubKey)
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	for _, k := range []string{pubKey, pemKey} {
		v := mustNew(t, verify.Spec{Type: "sendgrid", PublicKeys: []string{k}})
		wantReason(t, v.Verify(h, payload, at), "")
		wantReason(t, v.Verify(h, []byte("this is not valid payload for the given signature"), at), verify.NoMatch)
		wantReason(t, v.Verify(h, payload, at.Add(301*time.Second)), verify.TimestampOutOfTolerance)
		wantReason(t, v.Verify(with(h.Clone(), "X-Twilio-Email-Event-Webhook-Timestamp", "invalid timestamp"), payload, at), verify.MalformedSignature)
		wantReason(t, v.Verify(with(h.Clone(), "X-Twilio-Email-Event-Webhook-Signature", sig+"causing failure"), payload, at), verify.MalformedSignature)
		wantReason(t, v.Verify(without(h.Clone(), "X-Twilio-Email-Event-Webhook-Timestamp"), payload, at), verify.MissingSignature)
	}
	// A second, unrelated key is tried too (rotation).
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherDER, _ := x509.MarshalPKIXPublicKey(&other.PublicKey)
	v := mustNew(t, verify.Spec{Type: "sendgrid", PublicKeys: []string{base64.StdEncoding.EncodeToString(otherDER), pubKey}})
	wantReason(t, v.Verify(h, payload, at), "")
}

// TestVerify_Ed25519Schemes: Discord interactions and Standard Webhooks
// v1a, signed here with crypto/ed25519 as their docs specify.
func TestVerify_Ed25519Schemes(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	body := []byte(`{"type":1}`)

	t.Run("discord", func(t *testing.T) {
		v := mustNew(t, verify.Spec{Type: "discord", PublicKeys: []string{hex.EncodeToString(otherPub), hex.EncodeToString(pub)}})
		sign := func(k ed25519.PrivateKey, ts string, b []byte) http.Header {
			h := http.Header{}
			h.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(k, append([]byte(ts), b...))))
			h.Set("X-Signature-Timestamp", ts)
			return h
		}
		wantReason(t, v.Verify(sign(priv, nowTS, body), body, now), "")
		wantReason(t, v.Verify(sign(otherPriv, nowTS, body), body, now), "")
		_, stranger, _ := ed25519.GenerateKey(rand.Reader)
		wantReason(t, v.Verify(sign(stranger, nowTS, body), body, now), verify.NoMatch)
		wantReason(t, v.Verify(sign(priv, nowTS, body), []byte(`{"type":2}`), now), verify.NoMatch)
		wantReason(t, v.Verify(with(sign(priv, nowTS, body), "X-Signature-Timestamp", ts(-1)), body, now), verify.NoMatch)
		wantReason(t, v.Verify(sign(priv, ts(-301), body), body, now), verify.TimestampOutOfTolerance)
		wantReason(t, v.Verify(with(sign(priv, nowTS, body), "X-Signature-Ed25519", "abcd"), body, now), verify.MalformedSignature)
		wantReason(t, v.Verify(http.Header{}, body, now), verify.MissingSignature)
	})

	t.Run("standard_webhooks v1a", func(t *testing.T) {
		whpk := "whpk_" + base64.StdEncoding.EncodeToString(pub)
		secret := "whsec_" + b64("standard-webhooks-newest-key-32b")
		sig := func(k ed25519.PrivateKey, id, ts string, b []byte) string {
			return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(k, []byte(id+"."+ts+"."+string(b))))
		}
		hdr := func(prefix, s string) http.Header {
			h := http.Header{}
			h.Set(prefix+"-id", msgID)
			h.Set(prefix+"-timestamp", nowTS)
			h.Set(prefix+"-signature", s)
			return h
		}
		v1 := "v1," + base64.StdEncoding.EncodeToString(mac(sha256.New, whsecKey(t, secret), msgID+"."+nowTS+"."+string(body)))
		onlyPub := mustNew(t, verify.Spec{Type: "standard_webhooks", PublicKeys: []string{whpk}})
		both := mustNew(t, verify.Spec{Type: "standard_webhooks", Secrets: []string{secret}, PublicKeys: []string{strings.TrimPrefix(whpk, "whpk_")}})
		svix := mustNew(t, verify.Spec{Type: "svix", PublicKeys: []string{whpk}})
		for _, c := range []struct {
			name string
			v    verify.Verifier
			h    http.Header
			want verify.Reason
		}{
			{"v1a", onlyPub, hdr("webhook", sig(priv, msgID, nowTS, body)), ""},
			{"v1a beside a bogus one", onlyPub, hdr("webhook", "v1a,bogus "+sig(priv, msgID, nowTS, body)), ""},
			{"v1a under svix names", svix, hdr("svix", sig(priv, msgID, nowTS, body)), ""},
			{"v1a, other key", onlyPub, hdr("webhook", sig(otherPriv, msgID, nowTS, body)), verify.NoMatch},
			{"v1a, other id", onlyPub, hdr("webhook", sig(priv, "msg_other", nowTS, body)), verify.NoMatch},
			{"only v1 to a public-key source", onlyPub, hdr("webhook", v1), verify.MalformedSignature},
			{"both: v1 alone", both, hdr("webhook", v1), ""},
			{"both: v1a alone", both, hdr("webhook", sig(priv, msgID, nowTS, body)), ""},
			{"both: wrong v1 and no v1a is no_match", both, hdr("webhook", "v1,"+b64(strings.Repeat("x", 32))), verify.NoMatch},
		} {
			t.Run(c.name, func(t *testing.T) { wantReason(t, c.v.Verify(c.h, body, now), c.want) })
		}
	})
}

// TestVerify_GitLabToken: X-Gitlab-Token is the configured secret token,
// compared in constant time (GitLab docs: Webhooks, "secret token").
func TestVerify_GitLabToken(t *testing.T) {
	v := mustNew(t, verify.Spec{Type: "gitlab", Secrets: []string{"new-token", "old-token"}})
	for _, c := range []struct {
		token string
		want  verify.Reason
	}{
		{"new-token", ""}, {"old-token", ""}, {" old-token ", ""}, {"new-toke", verify.NoMatch},
		{"new-token-and-more", verify.NoMatch}, {"NEW-TOKEN", verify.NoMatch}, {"", verify.MissingSignature},
	} {
		h := http.Header{}
		if c.token != "" {
			h.Set("X-Gitlab-Token", c.token)
		}
		wantReason(t, v.Verify(h, []byte("{}"), now), c.want)
	}
	wantReason(t, v.Verify(http.Header{"X-Gitlab-Token": {"new-token", "new-token"}}, nil, now), verify.MalformedSignature)
}

// TestVerify_Mailgun: the signature object inside the body (Mailgun docs:
// "Securing webhooks"): hex HMAC-SHA256(signing key, timestamp + token),
// in a JSON body or, for legacy webhooks, form fields.
func TestVerify_Mailgun(t *testing.T) {
	const key = "key-mailgun-signing"
	token := "e3c1e2b5a1f0c2d9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2"
	sig := hexSHA256(key, nowTS+token)
	jsonBody := func(ts, tok, s string) []byte {
		b, _ := json.Marshal(map[string]any{
			"signature":  map[string]string{"timestamp": ts, "token": tok, "signature": s},
			"event-data": map[string]string{"id": "evt-1", "event": "delivered"},
		})
		return b
	}
	v := mustNew(t, verify.Spec{Type: "mailgun", Secrets: []string{key}})
	js := http.Header{"Content-Type": {"application/json"}}
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	for _, c := range []struct {
		name string
		h    http.Header
		body []byte
		want verify.Reason
	}{
		{"json", js, jsonBody(nowTS, token, sig), ""},
		{"json, numeric timestamp", js, []byte(`{"signature":{"timestamp":` + nowTS + `,"token":"` + token + `","signature":"` + sig + `"}}`), ""},
		{"form", form, []byte(url.Values{"timestamp": {nowTS}, "token": {token}, "signature": {sig}, "event": {"delivered"}}.Encode()), ""},
		{"other token", js, jsonBody(nowTS, token+"x", sig), verify.NoMatch},
		{"stale", js, jsonBody(ts(-301), token, hexSHA256(key, ts(-301)+token)), verify.TimestampOutOfTolerance},
		{"no signature object", js, []byte(`{"event-data":{}}`), verify.MissingSignature},
		{"not json", js, []byte(`nope`), verify.MalformedSignature},
		{"bad hex", js, jsonBody(nowTS, token, "zz"), verify.MalformedSignature},
	} {
		t.Run(c.name, func(t *testing.T) { wantReason(t, v.Verify(c.h, c.body, now), c.want) })
	}
}

// TestVerify_HMACProviders runs every new HMAC preset against the test's
// own reading of its provider's documentation (see presets.go for each).
func TestVerify_HMACProviders(t *testing.T) {
	body := []byte(`{"event":"x","id":"1"}`)
	const secret = "provider-secret"
	for _, c := range []struct {
		name string
		spec verify.Spec
		sign func(secret string, body []byte) http.Header
	}{
		{"paddle", verify.Spec{Type: "paddle"}, func(s string, b []byte) http.Header {
			return http.Header{"Paddle-Signature": {"ts=" + nowTS + ";h1=" + hexSHA256(s, nowTS+":"+string(b))}}
		}},
		{"paddle, several h1 during rotation", verify.Spec{Type: "paddle"}, func(s string, b []byte) http.Header {
			return http.Header{"Paddle-Signature": {"ts=" + nowTS + ";h1=" + hexSHA256("old", nowTS+":"+string(b)) + ";h1=" + hexSHA256(s, nowTS+":"+string(b))}}
		}},
		{"linear", verify.Spec{Type: "linear"}, func(s string, b []byte) http.Header {
			return http.Header{"Linear-Signature": {hexSHA256(s, string(b))}}
		}},
		{"zoom", verify.Spec{Type: "zoom"}, func(s string, b []byte) http.Header {
			return http.Header{"X-Zm-Signature": {"v0=" + hexSHA256(s, "v0:"+nowTS+":"+string(b))}, "X-Zm-Request-Timestamp": {nowTS}}
		}},
		{"square", verify.Spec{Type: "square", PublicURL: "https://example.com/webhooks/square"}, func(s string, b []byte) http.Header {
			return http.Header{"X-Square-Hmacsha256-Signature": {base64.StdEncoding.EncodeToString(mac(sha256.New, []byte(s), "https://example.com/webhooks/square"+string(b)))}}
		}},
		{"intercom", verify.Spec{Type: "intercom"}, func(s string, b []byte) http.Header {
			return http.Header{"X-Hub-Signature": {"sha1=" + hex.EncodeToString(mac(sha1.New, []byte(s), string(b)))}}
		}},
		{"pagerduty", verify.Spec{Type: "pagerduty"}, func(s string, b []byte) http.Header {
			return http.Header{"X-Pagerduty-Signature": {"v1=" + hexSHA256("old", string(b)) + ",v1=" + hexSHA256(s, string(b))}}
		}},
		{"meta", verify.Spec{Type: "meta"}, func(s string, b []byte) http.Header {
			return http.Header{"X-Hub-Signature-256": {"sha256=" + hexSHA256(s, string(b))}}
		}},
		{"dropbox", verify.Spec{Type: "dropbox"}, func(s string, b []byte) http.Header {
			return http.Header{"X-Dropbox-Signature": {hexSHA256(s, string(b))}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := c.spec
			sp.Secrets = []string{secret}
			v := mustNew(t, sp)
			wantReason(t, v.Verify(c.sign(secret, body), body, now), "")
			wantReason(t, v.Verify(c.sign("wrong", body), body, now), verify.NoMatch)
			wantReason(t, v.Verify(c.sign(secret, body), append([]byte{}, append(body, ' ')...), now), verify.NoMatch)
			wantReason(t, v.Verify(http.Header{}, body, now), verify.MissingSignature)
		})
	}
}

// TestNew_ProviderErrors: what each new type requires is refused at New,
// naming the key.
func TestNew_ProviderErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		spec  verify.Spec
		field string
		msg   string
	}{
		{"twilio without public_url", verify.Spec{Type: "twilio", Secrets: []string{"x"}}, "public_url", "is required"},
		{"square with a relative public_url", verify.Spec{Type: "square", Secrets: []string{"x"}, PublicURL: "/webhooks/sq"}, "public_url", "absolute"},
		{"public_url on github", verify.Spec{Type: "github", Secrets: []string{"x"}, PublicURL: "https://x.example/"}, "public_url", "applies only to types square, twilio"},
		{"discord without a key", verify.Spec{Type: "discord"}, "public_key", "at least one public key"},
		{"discord key not hex", verify.Spec{Type: "discord", PublicKeys: []string{"zz"}}, "public_key[0]", "not hex"},
		{"discord key too short", verify.Spec{Type: "discord", PublicKeys: []string{"abcd"}}, "public_key[0]", "32 bytes"},
		{"discord with a secret", verify.Spec{Type: "discord", Secrets: []string{"x"}, PublicKeys: []string{strings.Repeat("ab", 32)}}, "secret", "not used"},
		{"sendgrid key not ecdsa", verify.Spec{Type: "sendgrid", PublicKeys: []string{b64("not a key")}}, "public_key[0]", "SubjectPublicKeyInfo"},
		{"sendgrid with a secret", verify.Spec{Type: "sendgrid", Secrets: []string{"x"}, PublicKeys: []string{"x"}}, "secret", "not used"},
		{"github with a public key", verify.Spec{Type: "github", Secrets: []string{"x"}, PublicKeys: []string{"x"}}, "public_key", "applies only"},
		{"standard_webhooks bad whpk", verify.Spec{Type: "standard_webhooks", PublicKeys: []string{"whpk_!!"}}, "public_key[0]", `"whpk_" followed by standard base64`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := verify.New(c.spec)
			found := false
			for _, e := range unwrapAll(err) {
				if se, ok := e.(*verify.SpecError); ok && se.Field == c.field && strings.Contains(se.Msg, c.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("New: %v; want a %s error containing %q", err, c.field, c.msg)
			}
		})
	}
}
