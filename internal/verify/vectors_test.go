package verify_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/verify"
)

// TestVerify_GitHubPublishedVector uses the example from GitHub docs:
// "Validating webhook deliveries" — secret "It's a Secret to Everybody",
// payload "Hello, World!", X-Hub-Signature-256
// "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".
func TestVerify_GitHubPublishedVector(t *testing.T) {
	const (
		secret  = "It's a Secret to Everybody"
		payload = "Hello, World!"
		sig     = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	)
	v := mustNew(t, verify.Spec{Type: "github", Secrets: []string{secret}})
	h := http.Header{"X-Hub-Signature-256": {sig}}
	wantReason(t, v.Verify(h, []byte(payload), now), "")
	wantReason(t, v.Verify(h, []byte(payload+"!"), now), verify.NoMatch)
	// Upper-case hex is the same digest.
	h.Set("X-Hub-Signature-256", "sha256="+strings.ToUpper(strings.TrimPrefix(sig, "sha256=")))
	wantReason(t, v.Verify(h, []byte(payload), now), "")
	// The test's own signer agrees with the published value.
	if got := signGitHub(t, secret, "", []byte(payload)).Get("X-Hub-Signature-256"); got != sig {
		t.Fatalf("independent signer = %s, published %s", got, sig)
	}
}

// TestVerify_StandardWebhooksPublishedVector uses the example from the Svix
// docs ("Verifying webhooks manually"), which the Standard Webhooks
// reference libraries also test: secret
// "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", id
// "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp 1614265330, payload
// `{"test": 2432232314}`, signature
// "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".
func TestVerify_StandardWebhooksPublishedVector(t *testing.T) {
	const (
		secret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		payload = `{"test": 2432232314}`
		sig     = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	at := time.Unix(1614265330, 0)
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", sig)

	for _, sec := range []string{secret, strings.TrimPrefix(secret, "whsec_")} {
		v := mustNew(t, verify.Spec{Type: "standard_webhooks", Secrets: []string{sec}})
		wantReason(t, v.Verify(h, []byte(payload), at), "")
		wantReason(t, v.Verify(h, []byte(payload), at.Add(301*time.Second)), verify.TimestampOutOfTolerance)
		wantReason(t, v.Verify(h, []byte(`{"test": 2432232315}`), at), verify.NoMatch)
	}
	// The test's own reading of the spec agrees with the published value.
	got := base64.StdEncoding.EncodeToString(mac(sha256.New, whsecKey(t, secret), "msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330."+payload))
	if "v1,"+got != sig {
		t.Fatalf("independent signer = v1,%s, published %s", got, sig)
	}
}

// TestVerify_Stripe covers what is particular to Stripe-Signature (Stripe
// docs: Check the webhook signatures — the header can hold several v1
// signatures during secret rotation, and v0 is a test-mode scheme to
// ignore).
func TestVerify_Stripe(t *testing.T) {
	const secret = "whsec_stripeNew"
	body := []byte(`{"id":"evt_1"}`)
	good := hexSHA256(secret, nowTS+"."+string(body))
	bad := hexSHA256("whsec_other", nowTS+"."+string(body))
	v := mustNew(t, verify.Spec{Type: "stripe", Secrets: []string{secret}})
	manyBad := strings.Repeat(",v1="+bad, verify.MaxCandidates-1)
	for _, c := range []struct {
		name, header string
		want         verify.Reason
	}{
		{"t first", "t=" + nowTS + ",v1=" + good, ""},
		{"t last", "v1=" + good + ",t=" + nowTS, ""},
		{"v0 beside v1 ignored", "t=" + nowTS + ",v1=" + good + ",v0=" + bad, ""},
		{"v0 malformed but ignored", "t=" + nowTS + ",v1=" + good + ",v0=zz", ""},
		{"unknown keys ignored", "t=" + nowTS + ",v1=" + good + ",scheme=x", ""},
		{"several v1, good second", "t=" + nowTS + ",v1=" + bad + ",v1=" + good, ""},
		{"several v1, none good", "t=" + nowTS + ",v1=" + bad + ",v1=" + bad, verify.NoMatch},
		{"the good one as v0 only", "t=" + nowTS + ",v1=" + bad + ",v0=" + good, verify.NoMatch},
		{"spaces after commas", "t=" + nowTS + ", v1=" + good, ""},
		{"trailing comma", "t=" + nowTS + ",v1=" + good + ",", ""},
		{"32nd candidate is considered", "t=" + nowTS + manyBad + ",v1=" + good, ""},
		{"33rd candidate is ignored", "t=" + nowTS + manyBad + ",v1=" + bad + ",v1=" + good, verify.NoMatch},
		{"a malformed candidate past the cap is not decoded", "t=" + nowTS + manyBad + ",v1=" + good + ",v1=zz", ""},
		// stripe-go skips a v1 it cannot decode ("ignore invalid
		// signatures") and accepts when any other matches.
		{"a malformed v1 beside a good one", "t=" + nowTS + ",v1=" + good + ",v1=zz", ""},
		{"a malformed v1 before a good one", "t=" + nowTS + ",v1=zz,v1=" + good, ""},
		{"an empty v1 before a good one", "t=" + nowTS + ",v1=,v1=" + good, ""},
		{"a malformed v1 beside a wrong one", "t=" + nowTS + ",v1=zz,v1=" + bad, verify.NoMatch},
		{"only malformed v1", "t=" + nowTS + ",v1=zz,v1=" + good[:10], verify.MalformedSignature},
		{"t with the wrong case", "T=" + nowTS + ",v1=" + good, verify.MalformedSignature},
		{"empty t", "t=,v1=" + good, verify.MalformedSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantReason(t, v.Verify(http.Header{"Stripe-Signature": {c.header}}, body, now), c.want)
		})
	}
}

// TestVerify_StandardWebhooks covers what is particular to the Standard
// Webhooks spec: several space-separated signatures, versions other than
// v1 ignored, webhook-id part of the signed content.
func TestVerify_StandardWebhooks(t *testing.T) {
	secret := "whsec_" + b64("standard-webhooks-newest-key-32b")
	body := []byte(`{"type":"user.created"}`)
	sig := func(key []byte, id string) string {
		return "v1," + base64.StdEncoding.EncodeToString(mac(sha256.New, key, id+"."+nowTS+"."+string(body)))
	}
	key := whsecKey(t, secret)
	good, bad := sig(key, msgID), sig([]byte("other"), msgID)
	v := mustNew(t, verify.Spec{Type: "standard_webhooks", Secrets: []string{secret}})
	for _, c := range []struct {
		name, id, header string
		want             verify.Reason
	}{
		{"one", msgID, good, ""},
		{"good second", msgID, bad + " " + good, ""},
		{"several spaces", msgID, bad + "   " + good, ""},
		{"v1a entries ignored", msgID, "v1a,c2lnbmF0dXJl " + good, ""},
		{"unpadded base64", msgID, strings.TrimRight(good, "="), ""},
		{"none good", msgID, bad + " " + bad, verify.NoMatch},
		// The reference libraries compare each v1 entry and move on; an
		// entry that does not decode is one that does not match.
		{"a bogus v1 before a good one", msgID, "v1,bogus " + good, ""},
		{"a bogus v1 after a good one", msgID, good + " v1,bogus", ""},
		{"an entry without a comma beside a good one", msgID, "garbage " + good, ""},
		{"a bogus v1 beside a wrong one", msgID, "v1,bogus " + bad, verify.NoMatch},
		{"only bogus v1", msgID, "v1,bogus v1,!!!", verify.MalformedSignature},
		// Found by FuzzStandardWebhooksHeader: the last character's unused
		// bits set gives a second spelling of the same digest; the reference
		// libraries compare encoded strings, so it is not accepted.
		{"non-canonical base64", msgID, nonCanonicalB64(good), verify.MalformedSignature},
		{"non-canonical base64 beside a wrong one", msgID, nonCanonicalB64(good) + " " + bad, verify.NoMatch},
		{"other webhook-id", "msg_other", good, verify.NoMatch},
		{"no webhook-id", "", good, verify.MissingSignature},
		{"comma-separated instead of spaces", msgID, good + "," + good, verify.MalformedSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			if c.id != "" {
				h.Set("webhook-id", c.id)
			}
			h.Set("webhook-timestamp", nowTS)
			h.Set("webhook-signature", c.header)
			wantReason(t, v.Verify(h, body, now), c.want)
		})
	}
}

// TestVerify_Slack checks the Slack basestring is exactly
// "v0:" + timestamp + ":" + body (Slack: Verifying requests from Slack),
// against a signature computed here with crypto/hmac.
func TestVerify_Slack(t *testing.T) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	body := []byte("token=xyz&team_id=T1&command=%2Fwebbot&text=")
	v := mustNew(t, verify.Spec{Type: "slack", Secrets: []string{secret}})
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", nowTS)
	h.Set("X-Slack-Signature", "v0="+hexSHA256(secret, "v0:"+nowTS+":"+string(body)))
	wantReason(t, v.Verify(h, body, now), "")
	// Signed without the version prefix: a different basestring.
	h.Set("X-Slack-Signature", "v0="+hexSHA256(secret, nowTS+":"+string(body)))
	wantReason(t, v.Verify(h, body, now), verify.NoMatch)
}

// nonCanonicalB64 sets the lowest (unused) bit of the last data character
// of a padded base64 encoding of a 32-byte digest.
func nonCanonicalB64(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := strings.LastIndexFunc(s, func(r rune) bool { return r != '=' })
	return s[:i] + string(alphabet[strings.IndexByte(alphabet, s[i])|1]) + s[i+1:]
}

// TestVerify_SvixHeaders: the Svix libraries send svix-id, svix-timestamp
// and svix-signature, and verify either those or, when svix-id is absent,
// the webhook-* names. Both verify types read both sets, the published
// Svix vector (TestVerify_StandardWebhooksPublishedVector) in each.
func TestVerify_SvixHeaders(t *testing.T) {
	const (
		secret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		payload = `{"test": 2432232314}`
		id      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		sig     = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	at := time.Unix(1614265330, 0)
	set := func(prefix, id, ts, sig string) http.Header {
		h := http.Header{}
		h.Set(prefix+"-id", id)
		h.Set(prefix+"-timestamp", ts)
		h.Set(prefix+"-signature", sig)
		return h
	}
	for _, typ := range []string{"standard_webhooks", "svix"} {
		v := mustNew(t, verify.Spec{Type: typ, Secrets: []string{secret}})
		for _, c := range []struct {
			name string
			h    http.Header
			body string
			want verify.Reason
		}{
			{"svix-* headers", set("svix", id, "1614265330", sig), payload, ""},
			{"webhook-* headers", set("webhook", id, "1614265330", sig), payload, ""},
			{"svix-* headers, body changed", set("svix", id, "1614265330", sig), payload + " ", verify.NoMatch},
			{"svix-* headers, other id", set("svix", "msg_other", "1614265330", sig), payload, verify.NoMatch},
			{"svix-* headers, stale", set("svix", id, "1614264000", sig), payload, verify.TimestampOutOfTolerance},
			{"svix-signature without svix-id", without(set("svix", id, "1614265330", sig), "Svix-Id"), payload, verify.MissingSignature},
			{"neither set", http.Header{}, payload, verify.MissingSignature},
		} {
			t.Run(typ+"/"+c.name, func(t *testing.T) {
				wantReason(t, v.Verify(c.h, []byte(c.body), at), c.want)
			})
		}
	}
}
