package verify_test

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/verify"
)

// The fuzz targets check, for arbitrary header values and bodies:
//
//  1. Verify never panics, and returns nil or a *verify.Failure (unwrapped)
//     whose Reason is one the engine produces (not bad_secret), with a
//     Detail of at most 200 bytes that contains no secret (checkResult);
//  2. Verify is deterministic: the same input gives the same reason twice;
//  3. acceptance implies a real MAC: if Verify returns nil, the header holds
//     the encoding of HMAC(secret, signed content) for a configured secret
//     and a timestamp it carries, computed here with crypto/hmac, and that
//     timestamp is within tolerance;
//  4. the fuzzed body never disturbs a correct signature: the same body
//     signed correctly by the test's own signer always verifies.

var fuzzSecrets = []string{"whsec_fuzzNewest", "whsec_fuzzOlder"}

func FuzzStripeHeader(f *testing.F) {
	body := []byte(`{"id":"evt_1"}`)
	sig := hexSHA256(fuzzSecrets[1], nowTS+"."+string(body))
	for _, h := range []string{
		"t=" + nowTS + ",v1=" + sig,
		"t=" + nowTS + ",v1=" + strings.Repeat("0", 64) + ",v1=" + sig + ",v0=" + sig,
		" t = " + nowTS + " , v1 = " + sig + " ,",
		"t=" + nowTS,
		"v1=" + sig,
		"t=" + ts(-301) + ",v1=" + sig,
		"t=,v1=,=,,",
		"t=1e9,v1=zz",
		"",
	} {
		f.Add(h, body)
	}
	v := mustNew(f, verify.Spec{Type: "stripe", Secrets: fuzzSecrets})
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		h := http.Header{"Stripe-Signature": {header}}
		err := v.Verify(h, body, now)
		checkResult(t, err, fuzzSecrets...)
		if again := v.Verify(h, body, now); verify.ReasonOf(again) != verify.ReasonOf(err) {
			t.Fatalf("not deterministic: %v then %v", err, again)
		}
		if err == nil && !stripeReferee(header, body) {
			t.Fatalf("accepted %q without a valid v1 for a t within tolerance", header)
		}
		good := http.Header{"Stripe-Signature": {"t=" + nowTS + ",v1=" + hexSHA256(fuzzSecrets[0], nowTS+"."+string(body))}}
		if err := v.Verify(good, body, now); err != nil {
			t.Fatalf("correct signature over the fuzzed body: %v", err)
		}
	})
}

// stripeReferee: some t pair within tolerance and some v1 pair equal (any
// hex case) to hex HMAC-SHA256(secret, t + "." + body).
func stripeReferee(header string, body []byte) bool {
	var tsVals, sigs []string
	for _, item := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(item, "=")
		k, v = strings.Trim(k, " \t"), strings.Trim(v, " \t")
		switch k {
		case "t":
			tsVals = append(tsVals, v)
		case "v1":
			sigs = append(sigs, strings.ToLower(v))
		}
	}
	for _, tv := range tsVals {
		if !inTolerance(tv) {
			continue
		}
		for _, s := range fuzzSecrets {
			want := hexSHA256(s, tv+"."+string(body))
			for _, got := range sigs {
				if got == want {
					return true
				}
			}
		}
	}
	return false
}

func FuzzStandardWebhooksHeader(f *testing.F) {
	secrets := []string{"whsec_" + b64("fuzz-newest-key"), "whsec_" + b64("fuzz-older-key")}
	body := []byte(`{"type":"user.created"}`)
	sig := func(secret, id, tsText string, body []byte) string {
		return base64.StdEncoding.EncodeToString(mac(sha256.New, whsecKey(f, secret), id+"."+tsText+"."+string(body)))
	}
	good := sig(secrets[1], msgID, nowTS, body)
	for _, s := range []struct{ sig, id, ts string }{
		{"v1," + good, msgID, nowTS},
		{"v1a,AAAA v1," + good + "  v2,x", msgID, nowTS},
		{"v1," + strings.TrimRight(good, "="), msgID, nowTS},
		{"v1," + good, msgID, ts(400)},
		{"v1," + good, "", nowTS},
		{"v1", msgID, "abc"},
		{"v1,!!! v1,", " ", " "},
		{"", "", ""},
	} {
		f.Add(s.sig, s.id, s.ts, body)
	}
	v := mustNew(f, verify.Spec{Type: "standard_webhooks", Secrets: secrets})
	f.Fuzz(func(t *testing.T, sigHeader, id, tsText string, body []byte) {
		h := http.Header{"Webhook-Signature": {sigHeader}, "Webhook-Id": {id}, "Webhook-Timestamp": {tsText}}
		err := v.Verify(h, body, now)
		checkResult(t, err, secrets...)
		if again := v.Verify(h, body, now); verify.ReasonOf(again) != verify.ReasonOf(err) {
			t.Fatalf("not deterministic: %v then %v", err, again)
		}
		if err == nil {
			id, tsText := strings.Trim(id, " \t"), strings.Trim(tsText, " \t")
			if !inTolerance(tsText) {
				t.Fatalf("accepted timestamp %q", tsText)
			}
			found := false
			for _, s := range secrets {
				want := "v1," + strings.TrimRight(sig(s, id, tsText, body), "=")
				for _, e := range strings.Fields(sigHeader) {
					found = found || strings.TrimRight(e, "=") == want
				}
			}
			if !found {
				t.Fatalf("accepted %q without a valid v1 entry", sigHeader)
			}
		}
		id = strings.Trim(id, " \t")
		if id == "" || len(id) > verify.MaxHeaderBytes {
			return
		}
		good := http.Header{"Webhook-Signature": {"v1," + sig(secrets[0], id, nowTS, body)}, "Webhook-Id": {id}, "Webhook-Timestamp": {nowTS}}
		if err := v.Verify(good, body, now); err != nil {
			t.Fatalf("correct signature over the fuzzed id and body: %v", err)
		}
	})
}

// fuzzScheme is one generic hmac configuration FuzzHMACVerify picks by
// mode, with the test's own encoder of the expected signature.
type fuzzScheme struct {
	spec      verify.Spec
	header    string // the signature header
	tsHeader  string
	csvTSKey  string // timestamp rides in the signature header under this key
	hexEnc    bool
	signature func(secret, tsText string, body []byte) string // encoded, without framing
	frame     func(sig, tsText string) string                 // the header value
}

func fuzzSchemes(tb testing.TB) []fuzzScheme {
	hexOf := func(h func() hash.Hash, key []byte, parts ...string) string {
		return hex.EncodeToString(mac(h, key, parts...))
	}
	b64Of := func(h func() hash.Hash, key []byte, parts ...string) string {
		return base64.StdEncoding.EncodeToString(mac(h, key, parts...))
	}
	spaceSpec := verify.Spec{
		Type: "hmac", SignatureHeader: "X-Sig", Parse: "space_versions", SigKey: "v9", SigPrefix: "sha512=",
		Signed: "{header:X-Acme-Delivery}|{body}", Hash: "sha512",
	}
	withSecrets := func(s verify.Spec, secrets ...string) verify.Spec { s.Secrets = secrets; return s }
	b64Secrets := []string{b64(fuzzSecrets[0]), b64(fuzzSecrets[1])}
	return []fuzzScheme{
		{ // github preset: "sha256=" + hex HMAC-SHA256(secret, body)
			spec: withSecrets(verify.Spec{Type: "github"}, fuzzSecrets...), header: "X-Hub-Signature-256", hexEnc: true,
			signature: func(s, _ string, b []byte) string { return hexOf(sha256.New, []byte(s), string(b)) },
			frame:     func(sig, _ string) string { return "sha256=" + sig },
		},
		{ // shopify preset: base64 HMAC-SHA256(secret, body)
			spec: withSecrets(verify.Spec{Type: "shopify"}, fuzzSecrets...), header: "X-Shopify-Hmac-SHA256",
			signature: func(s, _ string, b []byte) string { return b64Of(sha256.New, []byte(s), string(b)) },
			frame:     func(sig, _ string) string { return sig },
		},
		{ // slack preset: "v0=" + hex HMAC-SHA256(secret, "v0:" + ts + ":" + body)
			spec: withSecrets(verify.Spec{Type: "slack"}, fuzzSecrets...), header: "X-Slack-Signature", hexEnc: true, tsHeader: "X-Slack-Request-Timestamp",
			signature: func(s, ts string, b []byte) string { return hexOf(sha256.New, []byte(s), "v0:"+ts+":"+string(b)) },
			frame:     func(sig, _ string) string { return "v0=" + sig },
		},
		{ // custom csv_pairs, SHA-512, base64, base64 secrets, header in template
			spec: withSecrets(customCSVSpec, b64Secrets...), header: "X-Acme-Signature", csvTSKey: "ts",
			signature: func(s, ts string, b []byte) string {
				k, _ := base64.StdEncoding.DecodeString(s)
				return b64Of(sha512.New, k, ts+":dlv-42:"+string(b))
			},
			frame: func(sig, ts string) string { return "ts=" + ts + ",sig=" + sig },
		},
		{ // custom whole, SHA-1, hex
			spec: withSecrets(customSHA1Spec, fuzzSecrets...), header: "X-Hub-Signature", hexEnc: true,
			signature: func(s, _ string, b []byte) string { return hexOf(sha1.New, []byte(s), string(b)) },
			frame:     func(sig, _ string) string { return "sha1=" + sig },
		},
		{ // custom space_versions, SHA-512, hex, with a prefix inside the entry
			spec: withSecrets(spaceSpec, fuzzSecrets...), header: "X-Sig", hexEnc: true,
			signature: func(s, _ string, b []byte) string { return hexOf(sha512.New, []byte(s), "dlv-42|"+string(b)) },
			frame:     func(sig, _ string) string { return "v9,sha512=" + sig },
		},
	}
}

func FuzzHMACVerify(f *testing.F) {
	schemes := fuzzSchemes(f)
	verifiers := make([]verify.Verifier, len(schemes))
	for i, s := range schemes {
		verifiers[i] = mustNew(f, s.spec)
	}
	body := []byte("hello=world&x=1")
	for i, s := range schemes {
		secret := s.spec.Secrets[1]
		f.Add(uint8(i), s.frame(s.signature(secret, nowTS, body), nowTS), nowTS, body)
		f.Add(uint8(i), s.frame(s.signature(secret, ts(-301), body), ts(-301)), ts(-301), body)
		f.Add(uint8(i), s.frame(strings.ToUpper(s.signature(secret, nowTS, body)), nowTS), nowTS, body)
		f.Add(uint8(i), s.frame("", nowTS), "x", []byte{})
	}
	f.Add(uint8(255), "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, mode uint8, sigHeader, tsText string, body []byte) {
		s, v := schemes[int(mode)%len(schemes)], verifiers[int(mode)%len(schemes)]
		h := http.Header{
			textproto.CanonicalMIMEHeaderKey(s.header): {sigHeader},
			"X-Acme-Delivery":                          {"dlv-42"},
		}
		if s.tsHeader != "" {
			h[textproto.CanonicalMIMEHeaderKey(s.tsHeader)] = []string{tsText}
		}
		err := v.Verify(h, body, now)
		checkResult(t, err, s.spec.Secrets...)
		if again := v.Verify(h, body, now); verify.ReasonOf(again) != verify.ReasonOf(err) {
			t.Fatalf("not deterministic: %v then %v", err, again)
		}
		if err == nil && !hmacReferee(s, sigHeader, tsText, body) {
			t.Fatalf("mode %d accepted %q without a valid signature", mode, sigHeader)
		}

		good := http.Header{"X-Acme-Delivery": {"dlv-42"}}
		good.Set(s.header, s.frame(s.signature(s.spec.Secrets[0], nowTS, body), nowTS))
		if s.tsHeader != "" {
			good.Set(s.tsHeader, nowTS)
		}
		if err := v.Verify(good, body, now); err != nil {
			t.Fatalf("correct signature over the fuzzed body: %v", err)
		}
	})
}

// hmacReferee: the header contains the expected encoding of a configured
// secret's MAC for a timestamp within tolerance (hex compared in lower case,
// base64 with or without padding).
func hmacReferee(s fuzzScheme, sigHeader, tsText string, body []byte) bool {
	var tsVals []string
	switch {
	case s.tsHeader != "":
		tsVals = []string{strings.Trim(tsText, " \t")}
	case s.csvTSKey != "":
		for _, item := range strings.Split(sigHeader, ",") {
			if k, v, _ := strings.Cut(item, "="); strings.Trim(k, " \t") == s.csvTSKey {
				tsVals = append(tsVals, strings.Trim(v, " \t"))
			}
		}
	default:
		tsVals = []string{""}
	}
	hay := sigHeader
	if s.hexEnc {
		hay = strings.ToLower(hay)
	}
	for _, tv := range tsVals {
		if (s.tsHeader != "" || s.csvTSKey != "") && !inTolerance(tv) {
			continue
		}
		for _, sec := range s.spec.Secrets {
			if strings.Contains(hay, strings.TrimRight(s.signature(sec, tv, body), "=")) {
				return true
			}
		}
	}
	return false
}

// inTolerance: tsText is plain decimal seconds within 300s of now.
func inTolerance(tsText string) bool {
	if tsText == "" || strings.TrimLeft(tsText, "0123456789") != "" {
		return false
	}
	n, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return false
	}
	d := n - now.Unix()
	return -300 <= d && d <= 300
}

// FuzzProviderVerifiers drives the schemes with verifiers of their own
// (gitlab, mailgun, twilio, sendgrid) and the Ed25519 and semicolon presets
// with arbitrary header values and bodies. Invariants: no panic; nil or a
// *Failure with an engine reason and a clean Detail (checkResult);
// deterministic; and nothing is accepted that was not signed — the secrets
// and keys are the test's, and the fuzzer cannot produce a valid MAC or
// signature, so every accepted input must be one of the seeds' valid ones.
func FuzzProviderVerifiers(f *testing.F) {
	const token = "fuzz-provider-secret"
	pub := strings.Repeat("ab", 32)
	type scheme struct {
		spec    verify.Spec
		headers []string // the header the fuzzed value goes into, and a second one
	}
	schemes := []scheme{
		{verify.Spec{Type: "gitlab", Secrets: []string{token}}, []string{"X-Gitlab-Token", "X-Other"}},
		{verify.Spec{Type: "mailgun", Secrets: []string{token}}, []string{"Content-Type", "X-Other"}},
		{verify.Spec{Type: "twilio", Secrets: []string{token}, PublicURL: "https://x.example/t"}, []string{"X-Twilio-Signature", "Content-Type"}},
		{verify.Spec{Type: "sendgrid", PublicKeys: []string{"MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="}},
			[]string{"X-Twilio-Email-Event-Webhook-Signature", "X-Twilio-Email-Event-Webhook-Timestamp"}},
		{verify.Spec{Type: "discord", PublicKeys: []string{pub}}, []string{"X-Signature-Ed25519", "X-Signature-Timestamp"}},
		{verify.Spec{Type: "paddle", Secrets: []string{token}}, []string{"Paddle-Signature", "X-Other"}},
		{verify.Spec{Type: "standard_webhooks", PublicKeys: []string{"whpk_" + b64(strings.Repeat("k", 32))}, Secrets: []string{"whsec_" + b64("fuzz-key")}},
			[]string{"Webhook-Signature", "Webhook-Timestamp"}},
	}
	vs := make([]verify.Verifier, len(schemes))
	for i, s := range schemes {
		vs[i] = mustNew(f, s.spec)
	}
	for i := range schemes {
		f.Add(uint8(i), "v1,abc", nowTS, []byte(`{"signature":{"timestamp":"`+nowTS+`","token":"t","signature":"00"}}`))
		f.Add(uint8(i), "ts="+nowTS+";h1="+strings.Repeat("0", 64), "application/x-www-form-urlencoded", []byte("timestamp=1&token=2&signature=3"))
		f.Add(uint8(i), token, "", []byte{})
	}
	f.Fuzz(func(t *testing.T, which uint8, v1, v2 string, body []byte) {
		i := int(which) % len(schemes)
		s, v := schemes[i], vs[i]
		h := http.Header{s.headers[0]: {v1}, s.headers[1]: {v2}, "Webhook-Id": {msgID}}
		err := v.Verify(h, body, now)
		checkResult(t, err, token)
		if again := v.Verify(h, body, now); verify.ReasonOf(again) != verify.ReasonOf(err) {
			t.Fatalf("not deterministic: %v then %v", err, again)
		}
		if err == nil && !(s.spec.Type == "gitlab" && strings.Trim(v1, " \t") == token) {
			t.Fatalf("%s accepted %q / %q without a valid signature", s.spec.Type, v1, v2)
		}
	})
}
