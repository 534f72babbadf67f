package verify

import "sort"

// presets are the named schemes, each only a Spec for the generic engine.
// Secrets and ToleranceSeconds come from the source's config; every other
// field is fixed by the provider and refused on a preset (see New).
//
// The Spec fields of each preset follow the provider's public documentation:
//
//   - github: "Validating webhook deliveries" — X-Hub-Signature-256 is
//     "sha256=" + hex(HMAC-SHA256(secret, body)).
//
//   - shopify: "Verify webhooks" — X-Shopify-Hmac-SHA256 is
//     base64(HMAC-SHA256(client secret, body)).
//
//   - slack: "Verifying requests from Slack" — X-Slack-Signature is
//     "v0=" + hex(HMAC-SHA256(signing secret, "v0:" + timestamp + ":" + body)),
//     timestamp in X-Slack-Request-Timestamp.
//
//   - stripe: "Check the webhook signatures" (manual verification) —
//     Stripe-Signature is "t=<ts>,v1=<hex>[,v1=<hex>…][,v0=…]"; v1 is
//     hex(HMAC-SHA256(endpoint secret, ts + "." + body)). The endpoint
//     secret is used as given, "whsec_" prefix included: unlike Standard
//     Webhooks, Stripe does not base64-decode it. Other schemes (v0) are
//     ignored.
//
//   - standard_webhooks: the Standard Webhooks specification (also what
//     Svix sends) — webhook-signature is space-separated "v1,<base64>"
//     entries; each is base64(HMAC-SHA256(key, id + "." + ts + "." + body))
//     with id from webhook-id and ts from webhook-timestamp; the key is the
//     base64 part of the "whsec_…" secret, decoded. Other versions ("v1a",
//     the asymmetric scheme) are ignored.
//
//   - svix: the same scheme under Svix's names svix-id, svix-timestamp and
//     svix-signature (Svix docs: "Verifying webhooks manually"); both it and
//     standard_webhooks also accept the other set of names (svix.go).
//
//   - paddle: "Verify webhook signatures" — Paddle-Signature is
//     "ts=<ts>;h1=<hex>[;h1=…]", h1 = hex(HMAC-SHA256(secret key, ts + ":" +
//     body)).
//
//   - linear: "Webhooks" — Linear-Signature is hex(HMAC-SHA256(signing
//     secret, body)).
//
//   - zoom: "Using webhooks" — x-zm-signature is "v0=" +
//     hex(HMAC-SHA256(secret token, "v0:" + ts + ":" + body)), ts from
//     x-zm-request-timestamp.
//
//   - square: "Validate notifications" — x-square-hmacsha256-signature is
//     base64(HMAC-SHA256(signature key, notification URL + body)); the URL
//     is the source's public_url (presetFills).
//
//   - intercom: "Signed notifications" — X-Hub-Signature is "sha1=" +
//     hex(HMAC-SHA1(client secret, body)).
//
//   - pagerduty: "Verifying signatures" (v3 webhooks) —
//     X-PagerDuty-Signature is "v1=<hex>[,v1=<hex>…]", each
//     hex(HMAC-SHA256(secret, body)).
//
//   - meta: "Webhooks — Validating payloads" — X-Hub-Signature-256 is
//     "sha256=" + hex(HMAC-SHA256(app secret, body)).
//
//   - dropbox: "Webhooks" — X-Dropbox-Signature is hex(HMAC-SHA256(app
//     secret, body)).
//
//   - discord: "Interactions — Security and authorization" —
//     X-Signature-Ed25519 is hex of an Ed25519 signature over
//     X-Signature-Timestamp + body, checked with the application's public
//     key (hex).
var presets = map[string]Spec{
	"github": {
		SignatureHeader: "X-Hub-Signature-256",
		Parse:           ParseWhole,
		SigPrefix:       "sha256=",
		Signed:          "{body}",
		Hash:            HashSHA256,
		Encoding:        EncodingHex,
		SecretDecode:    SecretRaw,
	},
	"shopify": {
		SignatureHeader: "X-Shopify-Hmac-SHA256",
		Parse:           ParseWhole,
		Signed:          "{body}",
		Hash:            HashSHA256,
		Encoding:        EncodingBase64,
		SecretDecode:    SecretRaw,
	},
	"slack": {
		SignatureHeader: "X-Slack-Signature",
		Parse:           ParseWhole,
		SigPrefix:       "v0=",
		Signed:          "v0:{ts}:{body}",
		Hash:            HashSHA256,
		Encoding:        EncodingHex,
		SecretDecode:    SecretRaw,
		TimestampHeader: "X-Slack-Request-Timestamp",
	},
	"stripe": {
		SignatureHeader: "Stripe-Signature",
		Parse:           ParseCSVPairs,
		SigKey:          "v1",
		TimestampKey:    "t",
		Signed:          "{ts}.{body}",
		Hash:            HashSHA256,
		Encoding:        EncodingHex,
		SecretDecode:    SecretRaw,
	},
	"standard_webhooks": {
		SignatureHeader: "webhook-signature",
		Parse:           ParseSpaceVersions,
		SigKey:          "v1",
		Signed:          "{header:webhook-id}.{ts}.{body}",
		Hash:            HashSHA256,
		Encoding:        EncodingBase64,
		SecretDecode:    SecretWhsecBase64,
		TimestampHeader: "webhook-timestamp",
	},
	"paddle": {
		SignatureHeader: "Paddle-Signature",
		Parse:           ParseSemicolonPairs,
		SigKey:          "h1",
		TimestampKey:    "ts",
		Signed:          "{ts}:{body}",
	},
	"linear": {SignatureHeader: "Linear-Signature"},
	"zoom": {
		SignatureHeader: "x-zm-signature",
		SigPrefix:       "v0=",
		Signed:          "v0:{ts}:{body}",
		TimestampHeader: "x-zm-request-timestamp",
	},
	"square": {
		SignatureHeader: "x-square-hmacsha256-signature",
		Encoding:        EncodingBase64,
	},
	"intercom":  {SignatureHeader: "X-Hub-Signature", SigPrefix: "sha1=", Hash: HashSHA1},
	"pagerduty": {SignatureHeader: "X-PagerDuty-Signature", Parse: ParseCSVPairs, SigKey: "v1"},
	"meta":      {SignatureHeader: "X-Hub-Signature-256", SigPrefix: "sha256="},
	"dropbox":   {SignatureHeader: "X-Dropbox-Signature"},
	"discord": {
		SignatureHeader: "X-Signature-Ed25519",
		Signed:          "{ts}{body}",
		Hash:            HashEd25519,
		SecretDecode:    KeyHex,
		TimestampHeader: "X-Signature-Timestamp",
	},
	"svix": {
		SignatureHeader: "svix-signature",
		Parse:           ParseSpaceVersions,
		SigKey:          "v1",
		Signed:          "{header:svix-id}.{ts}.{body}",
		Hash:            HashSHA256,
		Encoding:        EncodingBase64,
		SecretDecode:    SecretWhsecBase64,
		TimestampHeader: "svix-timestamp",
	},
}

// headerSets: types whose provider sends the same scheme under two sets of
// header names (svix.go). The preset of the type itself is read first, the
// other one when the request carries only its names.
var headerSets = map[string]string{
	"standard_webhooks": "svix",
	"svix":              "standard_webhooks",
}

// Preset returns the named scheme as a Spec of type "hmac" with no secrets:
// New(Spec{Type: name, Secrets: s}) behaves exactly as New of the preset with
// Secrets set to s. ok is false for "none", "hmac" and unknown names.
func Preset(name string) (s Spec, ok bool) {
	s, ok = presets[name]
	if ok {
		s.Type = TypeHMAC
	}
	return s, ok
}

// Types lists every accepted Spec.Type, sorted.
func Types() []string {
	t := []string{TypeNone, TypeHMAC}
	for name := range presets {
		t = append(t, name)
	}
	for name := range builders {
		t = append(t, name)
	}
	sort.Strings(t)
	return t
}
