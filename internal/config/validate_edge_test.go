package config_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/verify"
)

// whsecSecret is a valid Standard Webhooks secret (24 bytes).
const whsecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// oneSource is a complete file with source "s" whose verify block (and any
// other source keys) is extra, indented under the source, followed by
// root, a string of top-level keys.
func oneSource(extra, root string) string {
	return "sources:\n  s:\n" + indent(extra, "    ") + "    sinks: [{type: log}]\n" + root
}

// inOneSource is oneSource with root-level YAML only.
func inOneSource(root string) string { return oneSource("", root) }

func indent(s, by string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = by + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// Every scheme's usual config loads, and its Spec builds a verifier.
func TestVerifySchemesValidate(t *testing.T) {
	tests := []struct {
		name, verify string
	}{
		{"none", "verify: {type: none}"},
		{"none by default", "verify: {}"},
		{"stripe", "verify:\n  type: stripe\n  secret: whsec_stripe_endpoint_secret\n  tolerance_seconds: 300"},
		{"github", "verify:\n  type: github\n  secret: [new-secret, old-secret]"},
		{"standard_webhooks", "verify:\n  type: standard_webhooks\n  secret: " + whsecSecret},
		{"standard_webhooks unprefixed", "verify:\n  type: standard_webhooks\n  secret: MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{"shopify", "verify: {type: shopify, secret: shpss_client_secret}"},
		{"slack", "verify: {type: slack, secret: slack-signing-secret, tolerance_seconds: 60}"},
		{"hmac minimal", "verify: {type: hmac, secret: s3cret, signature_header: X-Signature}"},
		{"hmac every key", `verify:
  type: hmac
  secret: ["bmV3LXNlY3JldA==", "b2xkLXNlY3JldA=="]
  tolerance_seconds: 600
  signature_header: X-Acme-Signature
  parse: csv_pairs
  sig_prefix: ""
  sig_key: v1
  timestamp_key: t
  signed: "{ts}.{header:X-Acme-Event}.{body}"
  hash: sha512
  encoding: base64
  secret_decode: base64`},
		{"hmac timestamp header", `verify:
  type: hmac
  secret: s3cret
  signature_header: X-Sig
  sig_prefix: "v0="
  signed: "v0:{ts}:{body}"
  timestamp_header: X-Sig-Timestamp
  hash: sha1`},
		{"hmac space versions", `verify:
  type: hmac
  secret: ` + whsecSecret + `
  signature_header: webhook-signature
  parse: space_versions
  sig_key: v1
  signed: "{header:webhook-id}.{ts}.{body}"
  timestamp_header: webhook-timestamp
  encoding: base64
  secret_decode: whsec_base64`},
		{"tolerance lower bound", "verify: {type: stripe, secret: x, tolerance_seconds: 1}"},
		{"tolerance upper bound", "verify: {type: stripe, secret: x, tolerance_seconds: 86400}"},
		{"eight secrets", "verify: {type: github, secret: [a, b, c, d, e, f, g, h]}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, oneSource(tt.verify, ""), noEnv)
			if _, err := verify.New(c.Sources["s"].Verify.Spec()); err != nil {
				t.Fatalf("verify.New(Spec()) of a loaded config: %v", err)
			}
		})
	}
}

// Each violation is reported at sources.<id>.verify.<field>, with the
// engine's message where the engine found it.
func TestVerifyRefused(t *testing.T) {
	nine := "[a, b, c, d, e, f, g, h, i]"
	tests := []struct {
		name, yml string
		key, rule string
	}{
		{"type typo", "verify: {type: Stripe, secret: x}", "verify.type",
			"must be one of " + strings.Join(verify.Types(), "|") + `, got "Stripe"`},
		{"type empty", `verify: {type: "", secret: x}`, "verify.type", "must be set"},
		{"bad whsec secret", "verify: {type: standard_webhooks, secret: whsec_not*base64}", "verify.secret[0]",
			`secret is not "whsec_" followed by standard base64 (secret_decode whsec_base64)`},
		{"bad second secret", "verify: {type: standard_webhooks, secret: [" + whsecSecret + ", whsec_!!]}", "verify.secret[1]",
			`"whsec_" followed by standard base64`},
		{"whsec decodes to nothing", "verify: {type: standard_webhooks, secret: whsec_}", "verify.secret[0]", "decodes to no bytes"},
		{"empty secret", `verify: {type: github, secret: ""}`, "verify.secret[0]", "must not be empty"},
		{"empty secret in list", `verify: {type: github, secret: [a, ""]}`, "verify.secret[1]", "must not be empty"},
		{"no secret", "verify: {type: github}", "verify.secret", "at least one secret is required"},
		{"nine secrets", "verify: {type: github, secret: " + nine + "}", "verify.secret", "must have at most 8 entries, got 9"},
		{"secret with newline", "verify: {type: github, secret: \"abc\\n\"}", "verify.secret[0]", "must not start or end with white space"},
		{"secret not a string", "verify: {type: github, secret: 123}", "verify.secret", "must be a string or a list of strings (put it in quotes), got a number (the value is not shown: this key may hold a secret)"},
		{"secret item not a string", "verify: {type: github, secret: [abc, 123]}", "verify.secret[1]", "must be a string (put it in quotes)"},
		{"secret mapping", "verify: {type: github, secret: {a: b}}", "verify.secret", "must be a string or a list of strings"},

		// A generic-hmac key on a preset: the preset fixes it.
		{"signature_header on stripe", "verify: {type: stripe, secret: x, signature_header: X-Sig}", "verify.signature_header",
			"applies only to type hmac, type stripe fixes it"},
		{"hash on github", "verify: {type: github, secret: x, hash: sha1}", "verify.hash", "applies only to type hmac"},
		{"signed on slack", `verify: {type: slack, secret: x, signed: "{body}"}`, "verify.signed", "applies only to type hmac"},
		{"secret_decode on standard_webhooks", "verify: {type: standard_webhooks, secret: " + whsecSecret + ", secret_decode: none}",
			"verify.secret_decode", "applies only to type hmac"},

		// type none: nothing is verified, so verification keys are refused.
		{"secret on none", "verify: {type: none, secret: x}", "verify.secret", "type none verifies nothing"},
		{"secret without type", "verify: {secret: x}", "verify.secret", "type none verifies nothing"},
		{"hmac key on none", "verify: {type: none, signature_header: X-Sig}", "verify.signature_header", "applies only to type hmac (type is none)"},

		// hmac rules, from the engine.
		{"hmac without header", "verify: {type: hmac, secret: x}", "verify.signature_header", "is required for type hmac"},
		{"hmac bad header", `verify: {type: hmac, secret: x, signature_header: "X Sig"}`, "verify.signature_header", "must be a header name"},
		{"hmac bad parse", "verify: {type: hmac, secret: x, signature_header: S, parse: json}", "verify.parse", "must be one of whole, csv_pairs, semicolon_pairs, space_versions"},
		{"hmac sig_key on whole", "verify: {type: hmac, secret: x, signature_header: S, sig_key: v1}", "verify.sig_key", "applies only to parse csv_pairs and space_versions"},
		{"hmac csv without sig_key", "verify: {type: hmac, secret: x, signature_header: S, parse: csv_pairs}", "verify.sig_key", "is required for parse csv_pairs"},
		{"hmac timestamp_key on whole", `verify: {type: hmac, secret: x, signature_header: S, timestamp_key: t, signed: "{ts}.{body}"}`,
			"verify.timestamp_key", "applies only to parse csv_pairs"},
		{"hmac both timestamps", `verify: {type: hmac, secret: x, signature_header: S, parse: csv_pairs, sig_key: v1, timestamp_key: t, timestamp_header: X-Ts, signed: "{ts}.{body}"}`,
			"verify.timestamp_header", "set together with timestamp_key, use one"},
		{"hmac ts unsigned", "verify: {type: hmac, secret: x, signature_header: S, timestamp_header: X-Ts}", "verify.signed", "must use {ts}"},
		{"hmac ts without source", `verify: {type: hmac, secret: x, signature_header: S, signed: "{ts}{body}"}`, "verify.signed", "uses {ts} but neither"},
		{"hmac no body", `verify: {type: hmac, secret: x, signature_header: S, signed: "{header:X-Id}"}`, "verify.signed", "must contain {body} exactly once"},
		{"hmac bad hash", "verify: {type: hmac, secret: x, signature_header: S, hash: md5}", "verify.hash", `must be one of sha256, sha512, sha1, ed25519, got "md5"`},
		{"hmac bad encoding", "verify: {type: hmac, secret: x, signature_header: S, encoding: base32}", "verify.encoding", "must be one of hex, base64"},
		{"hmac bad secret_decode", "verify: {type: hmac, secret: x, signature_header: S, secret_decode: hex}", "verify.secret_decode", "must be one of none, base64, whsec_base64"},
		{"hmac bad base64 secret", "verify: {type: hmac, secret: 'not base64!', signature_header: S, secret_decode: base64}", "verify.secret[0]", "not standard base64"},

		// tolerance_seconds: written values are checked, 0 included.
		{"tolerance 0", "verify: {type: stripe, secret: x, tolerance_seconds: 0}", "verify.tolerance_seconds", "must be between 1 and 86400, got 0"},
		{"tolerance negative", "verify: {type: stripe, secret: x, tolerance_seconds: -5}", "verify.tolerance_seconds", "must be between 1 and 86400, got -5"},
		{"tolerance too long", "verify: {type: slack, secret: x, tolerance_seconds: 86401}", "verify.tolerance_seconds", "must be between 1 and 86400, got 86401"},
		{"tolerance fraction", "verify: {type: slack, secret: x, tolerance_seconds: 1.5}", "verify.tolerance_seconds", "must be an integer"},

		// The provider keys.
		{"verify_token on github", "verify: {type: github, secret: x, verify_token: t}", "verify.verify_token", "applies only to type meta"},
		{"public_key under none", "verify: {public_key: abc}", "verify.public_key", "type none verifies nothing"},
		{"public_url on github", "verify: {type: github, secret: x, public_url: 'https://x.example/h'}", "verify.public_url", "applies only to types square, twilio"},
		{"twilio without public_url", "verify: {type: twilio, secret: x}", "verify.public_url", "is required"},
		{"discord key not hex", "verify: {type: discord, public_key: zz}", "verify.public_key[0]", "key is not hex"},
		{"sendgrid with a secret", "verify: {type: sendgrid, secret: x, public_key: " + b64(16) + "}", "verify.secret", "not used by sendgrid"},
		{"handshake typo", "verify: {type: slack, secret: x}\nhandshake: slack", "handshake", `must be one of auto|none|msgraph, got "slack"`},

		// on_verify_failure.
		{"policy typo", "verify: {type: github, secret: x}\non_verify_failure: drop", "on_verify_failure",
			`must be one of reject|quarantine|accept_flag, got "drop"`},
		{"policy empty", "verify: {type: github, secret: x}\non_verify_failure: ''", "on_verify_failure", ""},
		{"quarantine under none", "on_verify_failure: quarantine", "on_verify_failure",
			"quarantine needs a signing scheme: under verify.type none no request fails verification"},
		{"accept_flag under none", "on_verify_failure: accept_flag", "on_verify_failure", "accept_flag needs a signing scheme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.LoadBytes([]byte(oneSource(tt.yml, "")), noEnv)
			if tt.key == "on_verify_failure" && tt.rule == "" {
				// An explicit "" reads as reject, like a config built in Go.
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			wantViolation(t, err, "sources.s."+tt.key, tt.rule)
			// Each key is reported once (the engine does not repeat a
			// config rule), and rule texts never hold the Errors separator
			// or a secret.
			seen := map[string]bool{}
			for _, e := range asErrors(t, err) {
				if seen[e.Key] {
					t.Errorf("%s reported twice: %v", e.Key, err)
				}
				seen[e.Key] = true
				if strings.Contains(e.Rule, "; ") {
					t.Errorf("rule of %s contains \"; \": %q", e.Key, e.Rule)
				}
				if strings.Contains(e.Rule, "not*base64") || strings.Contains(e.Rule, "MfKQ9r8G") {
					t.Errorf("rule of %s leaks a secret: %q", e.Key, e.Rule)
				}
			}
		})
	}
}

// A bad secret refuses boot with one line naming the source and the secret.
func TestBadSecretNamesTheSource(t *testing.T) {
	yml := `
sources:
  payments:
    verify:
      type: standard_webhooks
      secret: "whsec_%%%"
    sinks: [{type: log}]
`
	_, err := config.LoadBytes([]byte(yml), noEnv)
	want := `sources.payments.verify.secret[0]: secret is not "whsec_" followed by standard base64 (secret_decode whsec_base64)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

func TestVerifyAllPolicies(t *testing.T) {
	for _, p := range []string{"reject", "quarantine", "accept_flag"} {
		c := mustLoad(t, oneSource("verify: {type: github, secret: x}\non_verify_failure: "+p, ""), noEnv)
		if got := c.Sources["s"].OnVerifyFailure; got != p {
			t.Errorf("on_verify_failure = %q, want %q", got, p)
		}
		if got := c.Sources["s"].VerifyFailurePolicy(); got != p {
			t.Errorf("VerifyFailurePolicy() = %q, want %q", got, p)
		}
	}
	// reject is allowed under none, where it changes nothing.
	mustLoad(t, oneSource("on_verify_failure: reject", ""), noEnv)
}

// secret: "x" is secret: ["x"].
func TestSecretStringOrList(t *testing.T) {
	one := mustLoad(t, oneSource("verify: {type: github, secret: abc}", ""), noEnv)
	list := mustLoad(t, oneSource("verify: {type: github, secret: [abc]}", ""), noEnv)
	block := mustLoad(t, oneSource("verify:\n  type: github\n  secret:\n    - abc", ""), noEnv)
	quoted := mustLoad(t, oneSource(`verify: {type: github, secret: "a, b"}`, ""), noEnv)
	for name, c := range map[string]*config.Config{"string": one, "flow list": list, "block list": block} {
		if got := c.Sources["s"].Verify.Secret; !reflect.DeepEqual([]string(got), []string{"abc"}) {
			t.Errorf("%s: secret = %q, want [abc]", name, got)
		}
	}
	if got := quoted.Sources["s"].Verify.Secret; len(got) != 1 || got[0] != "a, b" {
		t.Errorf("a string with a comma is one secret, got %q", got)
	}
	two := mustLoad(t, oneSource("verify: {type: github, secret: [new, old]}", ""), noEnv)
	if got := two.Sources["s"].Verify.Spec().Secrets; !reflect.DeepEqual(got, []string{"new", "old"}) {
		t.Errorf("Spec().Secrets = %q, want [new old] (newest first)", got)
	}
	// An interpolated secret in the string form.
	c := mustLoad(t, oneSource(`verify: {type: github, secret: "${GH_SECRET}"}`, ""), env(map[string]string{"GH_SECRET": "from-env"}))
	if got := c.Sources["s"].Verify.Secret; len(got) != 1 || got[0] != "from-env" {
		t.Errorf("secret = %q", got)
	}
}

// Spec carries every key onto the engine, and a loaded config verifies
// what the provider signs: the end of the chain the edge relies on.
func TestVerifySpecEndToEnd(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	body := []byte(`{"id":"evt_1"}`)
	mac := func(h func() hash.Hash, key []byte, msg string) []byte {
		m := hmac.New(h, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	tests := []struct {
		name    string
		verify  string
		headers func() http.Header
	}{
		{"github, second secret", "verify: {type: github, secret: [rotated, old]}", func() http.Header {
			return http.Header{"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(mac(sha256.New, []byte("old"), string(body)))}}
		}},
		{"stripe", "verify: {type: stripe, secret: whsec_abc}", func() http.Header {
			sig := hex.EncodeToString(mac(sha256.New, []byte("whsec_abc"), ts+"."+string(body)))
			return http.Header{"Stripe-Signature": {"t=" + ts + ",v1=" + sig}}
		}},
		{"standard_webhooks", "verify: {type: standard_webhooks, secret: " + whsecSecret + "}", func() http.Header {
			key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(whsecSecret, "whsec_"))
			sig := base64.StdEncoding.EncodeToString(mac(sha256.New, key, "msg_1."+ts+"."+string(body)))
			return http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {"v1," + sig}}
		}},
		{"custom hmac", `verify:
  type: hmac
  secret: "c2VjcmV0LWtleQ=="
  signature_header: X-Acme-Signature
  parse: csv_pairs
  sig_key: s
  timestamp_key: ts
  signed: "{ts}|{header:X-Acme-Event}|{body}"
  hash: sha512
  encoding: base64
  secret_decode: base64`, func() http.Header {
			sig := base64.StdEncoding.EncodeToString(mac(sha512.New, []byte("secret-key"), ts+"|order.paid|"+string(body)))
			return http.Header{"X-Acme-Signature": {"ts=" + ts + ",s=" + sig}, "X-Acme-Event": {"order.paid"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, oneSource(tt.verify, ""), noEnv)
			v, err := verify.New(c.Sources["s"].Verify.Spec())
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Verify(tt.headers(), body, now); err != nil {
				t.Fatalf("valid signature refused: %v", err)
			}
			if err := v.Verify(tt.headers(), []byte(`{"id":"evt_2"}`), now); verify.ReasonOf(err) != verify.NoMatch {
				t.Fatalf("changed body: got %v, want no_match", err)
			}
		})
	}
}

// tolerance_seconds reaches the engine: 300 by default, else as written.
func TestVerifyTolerance(t *testing.T) {
	body := []byte("x")
	sign := func(ts int64) http.Header {
		t := strconv.FormatInt(ts, 10)
		m := hmac.New(sha256.New, []byte("k"))
		m.Write([]byte(t + "." + string(body)))
		return http.Header{"Stripe-Signature": {"t=" + t + ",v1=" + hex.EncodeToString(m.Sum(nil))}}
	}
	now := time.Unix(1_700_000_000, 0)
	for _, tt := range []struct {
		verify string
		want   int64
	}{
		{"verify: {type: stripe, secret: k}", 300},
		{"verify: {type: stripe, secret: k, tolerance_seconds: 30}", 30},
	} {
		c := mustLoad(t, oneSource(tt.verify, ""), noEnv)
		vc := c.Sources["s"].Verify
		if vc.ToleranceSeconds == nil || int64(*vc.ToleranceSeconds) != tt.want {
			t.Fatalf("%s: tolerance_seconds = %v, want %d", tt.verify, vc.ToleranceSeconds, tt.want)
		}
		v, err := verify.New(vc.Spec())
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(sign(now.Unix()-tt.want), body, now); err != nil {
			t.Errorf("%s: at the tolerance: %v", tt.verify, err)
		}
		if err := v.Verify(sign(now.Unix()-tt.want-1), body, now); verify.ReasonOf(err) != verify.TimestampOutOfTolerance {
			t.Errorf("%s: past the tolerance: got %v", tt.verify, err)
		}
	}
}

// A config built in Go, as tests of other packages do: the new keys may
// be left zero and mean their defaults.
func TestVerifyGoLiteral(t *testing.T) {
	c := config.Default()
	c.Sources = map[string]config.SourceConfig{
		"gh": {
			Verify: config.VerifyConfig{Type: "github", Secret: []string{"s"}},
			Sinks:  []config.SinkConfig{{ID: "log", Type: "log"}},
		},
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	s := c.Sources["gh"]
	if got := s.VerifyFailurePolicy(); got != "reject" {
		t.Errorf("VerifyFailurePolicy() = %q, want reject", got)
	}
	spec := s.Verify.Spec()
	if spec.ToleranceSeconds != 0 || spec.Type != "github" || !reflect.DeepEqual(spec.Secrets, []string{"s"}) {
		t.Errorf("Spec() = %+v", spec)
	}
	// Spec copies the secrets.
	spec.Secrets[0] = "changed"
	if s.Verify.Secret[0] != "s" {
		t.Error("Spec() shares the secret slice with the config")
	}
}

func TestVerifyDefaults(t *testing.T) {
	for name, c := range map[string]*config.Config{"Default()": config.Default(), "minimal": mustLoad(t, minimal, noEnv)} {
		s := c.Sources["demo"]
		if s.Verify.Type != "none" || s.Verify.ToleranceSeconds == nil || *s.Verify.ToleranceSeconds != 300 || s.OnVerifyFailure != "reject" {
			t.Errorf("%s: verify = %+v, on_verify_failure = %q", name, s.Verify, s.OnVerifyFailure)
		}
		if q := c.Quarantine; q.MaxBytes != 1<<30 || q.Rate != 20 || q.Burst != 100 {
			t.Errorf("%s: quarantine = %+v", name, q)
		}
		if r := c.RateLimits; r.Default != nil || r.Tenants != nil {
			t.Errorf("%s: rate_limits = %+v, want unlimited", name, r)
		}
		if c.SourceStore.Type != "static" {
			t.Errorf("%s: source_store.type = %q", name, c.SourceStore.Type)
		}
	}
}

func TestQuarantineRanges(t *testing.T) {
	tests := []yamlCase{ // key "" means valid
		{"defaults", "", "", ""},
		{"lower bounds", "quarantine: {max_bytes: 1048576, rate: 0.1, burst: 1}", "", ""},
		{"upper bounds", "quarantine: {max_bytes: 1099511627776, rate: 10000, burst: 100000}", "", ""},
		{"integer rate", "quarantine: {rate: 5}", "", ""},
		{"max_bytes low", "quarantine: {max_bytes: 1048575}", "quarantine.max_bytes", "must be between 1048576 and 1099511627776, got 1048575"},
		{"max_bytes high", "quarantine: {max_bytes: 1099511627777}", "quarantine.max_bytes", "must be between 1048576 and 1099511627776, got 1099511627777"},
		{"rate low", "quarantine: {rate: 0.09}", "quarantine.rate", "must be between 0.1 and 10000, got 0.09"},
		{"rate zero", "quarantine: {rate: 0}", "quarantine.rate", "must be between 0.1 and 10000, got 0"},
		{"rate high", "quarantine: {rate: 10000.5}", "quarantine.rate", "must be between 0.1 and 10000, got 10000.5"},
		{"rate infinite", "quarantine: {rate: .inf}", "quarantine.rate", "must be a finite number"},
		{"rate nan", "quarantine: {rate: .nan}", "quarantine.rate", "must be a finite number"},
		{"rate string", `quarantine: {rate: "20"}`, "quarantine.rate", `must be a number, got "20"`},
		{"burst zero", "quarantine: {burst: 0}", "quarantine.burst", "must be between 1 and 100000, got 0"},
		{"burst high", "quarantine: {burst: 100001}", "quarantine.burst", "must be between 1 and 100000, got 100001"},
		{"burst fraction", "quarantine: {burst: 2.5}", "quarantine.burst", "must be an integer"},
		{"unknown key", "quarantine: {max_age: 1}", "quarantine.max_age", "unknown key"},
		// A hook of the largest size must fit in the pen, once a source
		// quarantines.
		{"small pen unused", "quarantine: {max_bytes: 1048576}", "", ""},
	}
	runYAMLRules(t, inOneSource, tests)

	quarantining := "verify: {type: github, secret: x}\non_verify_failure: quarantine"
	_, err := config.LoadBytes([]byte(oneSource(quarantining, "quarantine: {max_bytes: 1048576}")), noEnv)
	wantViolation(t, err, "quarantine.max_bytes", "must be at least http.max_body_bytes (8000000) when a source quarantines (s), got 1048576")
	mustLoad(t, oneSource(quarantining, "quarantine: {max_bytes: 1048576}\nhttp: {max_body_bytes: 1048576}"), noEnv)
}

func TestRateLimits(t *testing.T) {
	tests := []yamlCase{ // key "" means valid
		{"absent", "", "", ""},
		{"empty block", "rate_limits: {}", "", ""},
		{"default only", "rate_limits: {default: {rate: 100, burst: 200}}", "", ""},
		{"bounds", "rate_limits: {default: {rate: 0.01, burst: 1}, tenants: {acme: {rate: 1000000, burst: 10000000}}}", "", ""},
		{"tenants only", "rate_limits: {tenants: {acme: {rate: 5}, Big_Co-2: {rate: 50.5, burst: 80}}}", "", ""},
		{"tenant 64", "rate_limits: {tenants: {" + strings.Repeat("t", 64) + ": {rate: 1}}}", "", ""},
		{"unlisted tenants bad", "rate_limits: {unlisted_tenants: each}", "rate_limits.unlisted_tenants", `must be one of shared|own`},
		{"unlisted tenants own", "rate_limits: {unlisted_tenants: own}", "", ""},
		{"default no rate", "rate_limits: {default: {burst: 10}}", "rate_limits.default.rate", "required: requests per second, 0.01 to 1000000 (omit the limit for no limit)"},
		{"default rate zero", "rate_limits: {default: {rate: 0}}", "rate_limits.default.rate", "required"},
		{"default rate low", "rate_limits: {default: {rate: 0.009}}", "rate_limits.default.rate", "must be between 0.01 and 1000000, got 0.009"},
		{"default rate negative", "rate_limits: {default: {rate: -1}}", "rate_limits.default.rate", "must be between 0.01 and 1000000, got -1"},
		{"default rate high", "rate_limits: {default: {rate: 1000001}}", "rate_limits.default.rate", "must be between 0.01 and 1000000, got 1000001"},
		{"default burst zero", "rate_limits: {default: {rate: 1, burst: 0}}", "rate_limits.default.burst", "must be between 1 and 10000000, got 0"},
		{"default burst high", "rate_limits: {default: {rate: 1, burst: 10000001}}", "rate_limits.default.burst", "must be between 1 and 10000000, got 10000001"},
		{"tenant rate low", "rate_limits: {tenants: {acme: {rate: 0.001}}}", "rate_limits.tenants.acme.rate", "must be between 0.01 and 1000000, got 0.001"},
		{"tenant no rate", "rate_limits: {tenants: {acme: {burst: 5}}}", "rate_limits.tenants.acme.rate", "required"},
		{"tenant burst", "rate_limits: {tenants: {acme: {rate: 1, burst: -1}}}", "rate_limits.tenants.acme.burst", "must be between 1 and 10000000, got -1"},
		{"tenant dot", "rate_limits: {tenants: {a.b: {rate: 1}}}", "rate_limits.tenants.a.b", "tenant id must match [A-Za-z0-9_-]{1,64}"},
		{"tenant slash", `rate_limits: {tenants: {"acme/eu": {rate: 1}}}`, "rate_limits.tenants.acme/eu", "tenant id must match"},
		{"tenant space", `rate_limits: {tenants: {"a b": {rate: 1}}}`, "rate_limits.tenants.a b", "tenant id must match"},
		{"tenant 65", "rate_limits: {tenants: {" + strings.Repeat("t", 65) + ": {rate: 1}}}", "rate_limits.tenants." + strings.Repeat("t", 65), "tenant id must match"},
		{"tenant not a mapping", "rate_limits: {tenants: {acme: 5}}", "rate_limits.tenants.acme", "must be a mapping"},
		{"unknown key", "rate_limits: {default: {rate: 1, per: minute}}", "rate_limits.default.per", "unknown key"},
		{"rate not a number", "rate_limits: {default: {rate: fast}}", "rate_limits.default.rate", `must be a number, got "fast"`},
	}
	runYAMLRules(t, inOneSource, tests)
}

// An absent burst is one second's worth of the rate; a written one stays.
func TestRateLimitBurstDefault(t *testing.T) {
	c := mustLoad(t, oneSource("", `rate_limits:
  default: {rate: 2.5}
  tenants:
    slow: {rate: 0.5}
    fast: {rate: 1000000}
    set: {rate: 10, burst: 1}
`), noEnv)
	r := c.RateLimits
	if r.Default == nil || r.Default.Burst != 3 {
		t.Errorf("default = %+v, want burst 3", r.Default)
	}
	for tenant, want := range map[string]int{"slow": 1, "fast": 1_000_000, "set": 1} {
		if got := r.Tenants[tenant].Burst; got != want {
			t.Errorf("%s: burst = %d, want %d", tenant, got, want)
		}
	}
	// A bad rate is reported alone, not with a derived burst.
	_, err := config.LoadBytes([]byte(oneSource("", "rate_limits: {default: {rate: 50000000}}")), noEnv)
	if errs := asErrors(t, err); len(errs) != 1 || errs[0].Key != "rate_limits.default.rate" {
		t.Errorf("got %v, want only rate_limits.default.rate", err)
	}
}

func TestRateLimitsFor(t *testing.T) {
	c := mustLoad(t, oneSource("", "rate_limits: {default: {rate: 10, burst: 20}, tenants: {acme: {rate: 1, burst: 2}}}"), noEnv)
	if l, ok := c.RateLimits.For("acme"); !ok || l != (config.RateLimit{Rate: 1, Burst: 2}) {
		t.Errorf("For(acme) = %+v, %v", l, ok)
	}
	if l, ok := c.RateLimits.For("other"); !ok || l != (config.RateLimit{Rate: 10, Burst: 20}) {
		t.Errorf("For(other) = %+v, %v", l, ok)
	}
	c = mustLoad(t, oneSource("", "rate_limits: {tenants: {acme: {rate: 1}}}"), noEnv)
	if _, ok := c.RateLimits.For("other"); ok {
		t.Error("For(other) with no default: want unlimited")
	}
	if l, ok := c.RateLimits.For("acme"); !ok || l.Rate != 1 || l.Burst != 1 {
		t.Errorf("For(acme) = %+v, %v", l, ok)
	}
}

func TestSourceStore(t *testing.T) {
	tests := []yamlCase{ // key "" means valid
		{"static", oneSource("", "source_store: {type: static}"), "", ""},
		{"persistent", oneSource("", "source_store: {type: persistent}"), "", ""},
		{"persistent without sources", "source_store: {type: persistent}\n", "", ""},
		{"persistent empty sources", "source_store: {type: persistent}\nsources: {}\n", "", ""},
		{"static without sources", "source_store: {type: static}\n", "sources",
			"at least one source is required (or source_store.type: persistent, to add them through the operator API)"},
		{"default without sources", "log: {level: info}\n", "sources", "at least one source is required"},
		{"typo", oneSource("", "source_store: {type: database}"), "source_store.type", `must be one of static|persistent, got "database"`},
		{"empty", oneSource("", `source_store: {type: ""}`), "source_store.type", "must be set (one of static|persistent)"},
		{"unknown key", oneSource("", "source_store: {path: x}"), "source_store.path", "unknown key"},
	}
	runYAMLRules(t, func(yml string) string { return yml }, tests)
}

// The secrets stay hidden; the scheme's shape, the policy and every number
// are shown.
func TestRedactedVerify(t *testing.T) {
	c := mustLoad(t, `
quarantine: {max_bytes: 2147483648, rate: 2.5, burst: 7}
rate_limits:
  default: {rate: 100, burst: 200}
  tenants:
    acme: {rate: 0.5, burst: 3}
source_store: {type: persistent}
sources:
  sw:
    verify:
      type: standard_webhooks
      secret: ["`+whsecSecret+`", "whsec_b2xkLXNlY3JldC1rZXktMTIzNDU2"]
    on_verify_failure: quarantine
    sinks: [{type: log}]
  custom:
    verify:
      type: hmac
      secret: sk_custom_secret_1
      tolerance_seconds: 120
      signature_header: X-Acme-Signature
      parse: whole
      sig_prefix: "v0="
      signed: "v0:{ts}:{body}"
      hash: sha512
      encoding: base64
      secret_decode: none
      timestamp_header: X-Acme-Timestamp
    on_verify_failure: accept_flag
    sinks: [{type: log}]
  csv:
    verify:
      type: hmac
      secret: sk_csv_secret_2
      signature_header: X-Sig
      parse: csv_pairs
      sig_key: v1
      timestamp_key: t
      signed: "{ts}.{body}"
    sinks: [{type: log}]
`, noEnv)
	r := c.Redacted()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	for _, secret := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "b2xkLXNlY3JldC1rZXktMTIzNDU2", "sk_custom_secret_1", "sk_csv_secret_2"} {
		if strings.Contains(out, secret) {
			t.Errorf("redacted output leaks %q: %s", secret, out)
		}
	}
	get := func(path string) any {
		var v any = r
		for p := range strings.SplitSeq(path, ".") {
			if i, err := strconv.Atoi(p); err == nil {
				v = v.([]any)[i]
				continue
			}
			v = v.(map[string]any)[p]
		}
		return v
	}
	tests := []struct {
		path string
		want any
	}{
		{"sources.sw.verify.secret.0", "[REDACTED]"},
		{"sources.sw.verify.secret.1", "[REDACTED]"},
		{"sources.custom.verify.secret.0", "[REDACTED]"},
		{"sources.sw.verify.type", "standard_webhooks"},
		{"sources.sw.verify.tolerance_seconds", json.Number("300")},
		{"sources.sw.on_verify_failure", "quarantine"},
		{"sources.custom.on_verify_failure", "accept_flag"},
		{"sources.csv.on_verify_failure", "reject"},
		{"sources.custom.verify.tolerance_seconds", json.Number("120")},
		{"sources.custom.verify.signature_header", "X-Acme-Signature"},
		{"sources.custom.verify.parse", "whole"},
		{"sources.custom.verify.sig_prefix", "v0="},
		{"sources.custom.verify.signed", "v0:{ts}:{body}"},
		{"sources.custom.verify.hash", "sha512"},
		{"sources.custom.verify.encoding", "base64"},
		{"sources.custom.verify.secret_decode", "none"},
		{"sources.custom.verify.timestamp_header", "X-Acme-Timestamp"},
		{"sources.csv.verify.sig_key", "v1"},
		{"sources.csv.verify.timestamp_key", "t"},
		{"sources.csv.verify.signed", "{ts}.{body}"},
		{"quarantine.max_bytes", json.Number("2147483648")},
		{"quarantine.rate", json.Number("2.5")},
		{"quarantine.burst", json.Number("7")},
		{"rate_limits.default.rate", json.Number("100")},
		{"rate_limits.default.burst", json.Number("200")},
		{"rate_limits.tenants.acme.rate", json.Number("0.5")}, // the tenant id is a key: shown
		{"rate_limits.tenants.acme.burst", json.Number("3")},
		{"source_store.type", "persistent"},
	}
	for _, tt := range tests {
		if got := get(tt.path); got != tt.want {
			t.Errorf("%s = %#v, want %#v", tt.path, got, tt.want)
		}
	}
}

// Every key of the new blocks has a row in docs/configuration.md.
func TestDocsListEveryEdgeKey(t *testing.T) {
	md := readDocs(t)
	var keys []string
	keys = append(keys, yamlKeys(reflect.TypeFor[config.VerifyConfig](), "sources.<id>.verify")...)
	keys = append(keys, "sources.<id>.on_verify_failure")
	keys = append(keys, yamlKeys(reflect.TypeFor[config.QuarantineConfig](), "quarantine")...)
	keys = append(keys, yamlKeys(reflect.TypeFor[config.RateLimitsConfig](), "rate_limits")...)
	keys = append(keys, yamlKeys(reflect.TypeFor[config.RateLimit](), "rate_limits.tenants.<tenant>")...)
	keys = append(keys, yamlKeys(reflect.TypeFor[config.SourceStoreConfig](), "source_store")...)
	for _, key := range keys {
		if !strings.Contains(md, "| `"+key+"`") {
			t.Errorf("docs: no row for %s", key)
		}
	}
	// And an example per scheme, each a complete file that loads (see
	// TestDocsMarkedExamplesLoad).
	for _, scheme := range verify.Types() {
		if scheme == "none" {
			continue
		}
		if !strings.Contains(md, fmt.Sprintf("\n  %s:\n    verify:\n      type: %s\n", exampleSource(scheme), scheme)) {
			t.Errorf("docs: no example for verify.type %s (a source named %s)", scheme, exampleSource(scheme))
		}
	}
}

// exampleSource names the source of a scheme's docs example.
func exampleSource(scheme string) string {
	if scheme == "hmac" {
		return "acme"
	}
	return strings.ReplaceAll(scheme, "_", "-")
}
