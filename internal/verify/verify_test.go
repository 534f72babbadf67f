package verify_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/verify"
)

// scheme is one fixture for the shared table in TestVerify_Schemes.
type scheme struct {
	name string
	spec verify.Spec // Secrets filled in by the test
	// newest, older and wrong: two configured secrets and one that is not.
	newest, older, wrong string
	sign                 signer
	sigHeader            string
	tsHeader             string // "" when the timestamp rides in sigHeader
	timestamped          bool
	// malformed are signature header values that must be
	// malformed_signature, whatever the rest of the request.
	malformed []string
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func schemes() []scheme {
	hex64 := strings.Repeat("ab", 32)
	return []scheme{{
		// GitHub docs: Validating webhook deliveries — X-Hub-Signature-256 =
		// "sha256=" + hex HMAC-SHA256(secret, payload).
		name: "github", spec: verify.Spec{Type: "github"},
		newest: "gh-new-secret", older: "gh-old-secret", wrong: "gh-wrong",
		sign: signGitHub, sigHeader: "X-Hub-Signature-256",
		malformed: []string{
			hex64,                         // no prefix
			"sha1=" + hex64,               // other prefix
			"sha256=" + hex64[:62],        // short
			"sha256=" + hex64 + "ab",      // long
			"sha256=" + hex64[:62] + "zz", // not hex
			"sha256=",
		},
	}, {
		// Shopify: verify webhook — X-Shopify-Hmac-SHA256 = base64
		// HMAC-SHA256(client secret, raw body).
		name: "shopify", spec: verify.Spec{Type: "shopify"},
		newest: "shpss_new", older: "shpss_old", wrong: "shpss_wrong",
		sign: signShopify, sigHeader: "X-Shopify-Hmac-SHA256",
		malformed: []string{
			"not base64!",
			"AAAA",                         // 3 bytes
			hex64,                          // valid alphabet, 48 bytes
			strings.Repeat("A", 43) + "==", // bad padding
		},
	}, {
		// Slack: Verifying requests from Slack — basestring
		// "v0:" + X-Slack-Request-Timestamp + ":" + body, X-Slack-Signature =
		// "v0=" + hex HMAC-SHA256(signing secret, basestring).
		name: "slack", spec: verify.Spec{Type: "slack"},
		newest: "slack-new", older: "slack-old", wrong: "slack-wrong",
		sign: signSlack, sigHeader: "X-Slack-Signature", tsHeader: "X-Slack-Request-Timestamp", timestamped: true,
		malformed: []string{"v1=" + hex64, hex64, "v0=xyz", "v0=" + hex64[:63] + "g"},
	}, {
		// Stripe docs: Check the webhook signatures — manual verification:
		// Stripe-Signature "t=<ts>,v1=<sig>[,v1=…][,v0=…]", signed payload
		// ts + "." + body, v1 = hex HMAC-SHA256(endpoint secret, signed
		// payload); only v1 counts.
		name: "stripe", spec: verify.Spec{Type: "stripe"},
		newest: "whsec_stripeNew", older: "whsec_stripeOld", wrong: "whsec_stripeWrong",
		sign: signStripe, sigHeader: "Stripe-Signature", timestamped: true,
		malformed: []string{
			"garbage",
			"t=" + nowTS,                      // no v1
			"v1=" + hex64,                     // no t
			"t=" + nowTS + ",v0=" + hex64,     // only the ignored scheme
			"t=" + nowTS + ",v1=nothex",       // bad hex
			"t=" + nowTS + ",t=1,v1=" + hex64, // repeated t
			"t=" + nowTS + ",v1=" + hex64 + ",junk",
		},
	}, {
		// Standard Webhooks spec / svix: webhook-signature is space-separated
		// "v1,<base64>"; signed content id.ts.body; key = base64 part of the
		// "whsec_" secret.
		name: "standard_webhooks", spec: verify.Spec{Type: "standard_webhooks"},
		newest: "whsec_" + b64("standard-webhooks-newest-key-32b"), older: "whsec_" + b64("standard-webhooks-older-key"),
		wrong: "whsec_" + b64("not-the-key"),
		sign:  signStandard, sigHeader: "webhook-signature", tsHeader: "webhook-timestamp", timestamped: true,
		malformed: []string{
			"v1",                         // no comma
			"v2," + b64(hex64[:32]),      // no v1
			"v1a," + b64(hex64),          // asymmetric scheme only: ignored, so no v1
			"v1,!!!!",                    // bad base64
			"v1," + b64("short"),         // wrong length
			"x y",                        // entries without a comma only
			"v1,!!!! v1," + b64("short"), // no v1 entry decodes
		},
	}, {
		// Svix docs: the Standard Webhooks scheme under svix-id,
		// svix-timestamp and svix-signature.
		name: "svix", spec: verify.Spec{Type: "svix"},
		newest: "whsec_" + b64("svix-newest-key-32-bytes-long!!!"), older: "whsec_" + b64("svix-older-key"),
		wrong: "whsec_" + b64("not-the-key"),
		sign:  signSvix, sigHeader: "svix-signature", tsHeader: "svix-timestamp", timestamped: true,
		malformed: []string{"v1", "v2," + b64(hex64[:32]), "v1,!!!!", "x y"},
	}, {
		// Generic hmac: the test's own made-up provider (SHA-512, base64,
		// csv pairs "ts=…,sig=…", a header in the signed bytes).
		name: "hmac_csv_sha512", spec: customCSVSpec,
		newest: b64("custom-newest"), older: b64("custom-older"), wrong: b64("custom-wrong"),
		sign: signCustomCSV, sigHeader: "X-Acme-Signature", timestamped: true,
		malformed: []string{"ts=" + nowTS, "sig=" + b64(hex64), "ts=" + nowTS + ",sig=" + b64(hex64[:32])},
	}, {
		// Generic hmac as GitHub's legacy X-Hub-Signature: "sha1=" + hex
		// HMAC-SHA1(secret, body).
		name: "hmac_whole_sha1", spec: customSHA1Spec,
		newest: "sha1-new", older: "sha1-old", wrong: "sha1-wrong",
		sign: signCustomSHA1, sigHeader: "X-Hub-Signature",
		malformed: []string{"sha1=" + hex64, "sha256=" + hex64[:40], "sha1=" + hex64[:38] + "zz"},
	}}
}

// TestVerify_Schemes runs the same table against every scheme.
func TestVerify_Schemes(t *testing.T) {
	body := []byte(`{"id":"evt_1","type":"invoice.paid","amount":4200}`)
	for _, sc := range schemes() {
		t.Run(sc.name, func(t *testing.T) {
			withSecrets := func(secrets ...string) verify.Verifier {
				s := sc.spec
				s.Secrets = secrets
				return mustNew(t, s)
			}
			both := withSecrets(sc.newest, sc.older)
			sign := func(secret, tsText string, b []byte) http.Header { return sc.sign(t, secret, tsText, b) }

			type tc struct {
				name string
				v    verify.Verifier
				h    http.Header
				body []byte
				want verify.Reason
			}
			tcs := []tc{
				{"valid", both, sign(sc.newest, nowTS, body), body, ""},
				{"rotation: older secret second in the list", both, sign(sc.older, nowTS, body), body, ""},
				{"rotation: older secret removed", withSecrets(sc.newest), sign(sc.older, nowTS, body), body, verify.NoMatch},
				{"rotation: only the older secret configured", withSecrets(sc.older), sign(sc.newest, nowTS, body), body, verify.NoMatch},
				{"wrong secret", both, sign(sc.wrong, nowTS, body), body, verify.NoMatch},
				{"tampered body", both, sign(sc.newest, nowTS, body), []byte(strings.Replace(string(body), "4200", "4201", 1)), verify.NoMatch},
				{"body with a byte appended", both, sign(sc.newest, nowTS, body), append(append([]byte{}, body...), '\n'), verify.NoMatch},
				{"empty body signed and sent", both, sign(sc.newest, nowTS, nil), nil, ""},
				{"missing header", both, without(sign(sc.newest, nowTS, body), sc.sigHeader), body, verify.MissingSignature},
				{"no headers at all", both, http.Header{}, body, verify.MissingSignature},
				{"empty header", both, with(sign(sc.newest, nowTS, body), sc.sigHeader, ""), body, verify.MissingSignature},
				{"blank header", both, with(sign(sc.newest, nowTS, body), sc.sigHeader, " \t "), body, verify.MissingSignature},
				{"repeated header", both, repeated(sign(sc.newest, nowTS, body), sc.sigHeader), body, verify.MalformedSignature},
				{"header over 8 KiB", both, with(sign(sc.newest, nowTS, body), sc.sigHeader, strings.Repeat("a", verify.MaxHeaderBytes+1)), body, verify.MalformedSignature},
				{"surrounding white space is fine", both, padded(sign(sc.newest, nowTS, body), sc.sigHeader), body, ""},
			}
			for i, m := range sc.malformed {
				tcs = append(tcs, tc{"malformed #" + string(rune('0'+i)), both, with(sign(sc.newest, nowTS, body), sc.sigHeader, m), body, verify.MalformedSignature})
			}
			if sc.timestamped {
				tcs = append(tcs,
					tc{"stale timestamp", both, sign(sc.newest, ts(-301), body), body, verify.TimestampOutOfTolerance},
					tc{"future timestamp", both, sign(sc.newest, ts(+301), body), body, verify.TimestampOutOfTolerance},
					tc{"a day stale", both, sign(sc.newest, ts(-86400), body), body, verify.TimestampOutOfTolerance},
					tc{"stale timestamp, wrong secret", both, sign(sc.wrong, ts(-301), body), body, verify.TimestampOutOfTolerance},
					tc{"300s old is within tolerance", both, sign(sc.newest, ts(-300), body), body, ""},
					tc{"300s ahead is within tolerance", both, sign(sc.newest, ts(+300), body), body, ""},
					tc{"leading zeros are still integer seconds", both, sign(sc.newest, "0"+nowTS, body), body, ""},
					tc{"timestamp 0", both, sign(sc.newest, "0", body), body, verify.TimestampOutOfTolerance},
				)
				for _, bad := range []string{"abc", "-1", "+" + nowTS, nowTS + ".5", "1.7e9", nowTS + "x", "0x6553f100", "9999999999999999999", "1 700000000"} {
					tcs = append(tcs, tc{"malformed timestamp " + bad, both, sign(sc.newest, bad, body), body, verify.MalformedSignature})
				}
				if sc.tsHeader != "" {
					tcs = append(tcs,
						tc{"missing timestamp header", both, without(sign(sc.newest, nowTS, body), sc.tsHeader), body, verify.MissingSignature},
						tc{"repeated timestamp header", both, repeated(sign(sc.newest, nowTS, body), sc.tsHeader), body, verify.MalformedSignature},
						tc{"timestamp header changed", both, with(sign(sc.newest, nowTS, body), sc.tsHeader, ts(-1)), body, verify.NoMatch},
					)
				}
				short := sc.spec
				short.Secrets, short.ToleranceSeconds = []string{sc.newest}, 10
				tcs = append(tcs,
					tc{"tolerance_seconds 10: 11s old", mustNew(t, short), sign(sc.newest, ts(-11), body), body, verify.TimestampOutOfTolerance},
					tc{"tolerance_seconds 10: 10s old", mustNew(t, short), sign(sc.newest, ts(-10), body), body, ""},
				)
			}
			for _, c := range tcs {
				t.Run(c.name, func(t *testing.T) {
					err := c.v.Verify(c.h, c.body, now)
					checkResult(t, err, sc.newest, sc.older, sc.wrong)
					wantReason(t, err, c.want)
				})
			}
		})
	}
}

// TestVerify_PresetIsASpec checks that each named scheme is exactly its
// Preset Spec run through the generic hmac engine.
func TestVerify_PresetIsASpec(t *testing.T) {
	body := []byte("payload")
	for _, sc := range schemes()[:5] {
		t.Run(sc.name, func(t *testing.T) {
			p, ok := verify.Preset(sc.name)
			if !ok || p.Type != "hmac" {
				t.Fatalf("Preset(%q) = %+v, %v", sc.name, p, ok)
			}
			p.Secrets = []string{sc.newest}
			generic := mustNew(t, p)
			named := mustNew(t, verify.Spec{Type: sc.name, Secrets: []string{sc.newest}})
			for _, h := range []http.Header{
				sc.sign(t, sc.newest, nowTS, body),
				sc.sign(t, sc.wrong, nowTS, body),
				sc.sign(t, sc.newest, ts(-1000), body),
				{},
			} {
				a, b := generic.Verify(h, body, now), named.Verify(h, body, now)
				if verify.ReasonOf(a) != verify.ReasonOf(b) {
					t.Fatalf("generic %v, named %v", a, b)
				}
			}
		})
	}
	for _, name := range []string{"none", "hmac", "nope"} {
		if _, ok := verify.Preset(name); ok {
			t.Errorf("Preset(%q) ok", name)
		}
	}
}

func TestVerify_None(t *testing.T) {
	v := mustNew(t, verify.Spec{Type: "none"})
	for _, h := range []http.Header{nil, {}, {"Stripe-Signature": {"garbage"}}} {
		if err := v.Verify(h, []byte("x"), now); err != nil {
			t.Fatalf("none: %v", err)
		}
	}
}

func without(h http.Header, name string) http.Header { h.Del(name); return h }

func with(h http.Header, name, v string) http.Header { h.Set(name, v); return h }

func repeated(h http.Header, name string) http.Header { h.Add(name, h.Get(name)); return h }

func padded(h http.Header, name string) http.Header { h.Set(name, " \t"+h.Get(name)+"  "); return h }

// TestVerify_Concurrent: a Verifier is shared by every request of a source
// (run with -race).
func TestVerify_Concurrent(t *testing.T) {
	body := []byte("concurrent")
	for _, sc := range schemes() {
		s := sc.spec
		s.Secrets = []string{sc.newest, sc.older}
		v := mustNew(t, s)
		good, bad := sc.sign(t, sc.older, nowTS, body), sc.sign(t, sc.wrong, nowTS, body)
		done := make(chan struct{})
		for g := 0; g < 4; g++ {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := 0; i < 200; i++ {
					if err := v.Verify(good, body, now); err != nil {
						t.Errorf("%s: %v", sc.name, err)
						return
					}
					if verify.ReasonOf(v.Verify(bad, body, now)) != verify.NoMatch {
						t.Errorf("%s: wrong secret accepted", sc.name)
						return
					}
				}
			}()
		}
		for g := 0; g < 4; g++ {
			<-done
		}
	}
}
