package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/verify"
)

// TestNew_Errors: every Spec problem is refused at New (so config refuses to
// boot), names the config key, and never quotes a secret.
func TestNew_Errors(t *testing.T) {
	hmac := func(mod func(*verify.Spec)) verify.Spec {
		s := verify.Spec{Type: "hmac", Secrets: []string{"s3cr3t-value"}, SignatureHeader: "X-Sig"}
		mod(&s)
		return s
	}
	nine := make([]string, 9)
	for i := range nine {
		nine[i] = "s3cr3t-value"
	}
	for _, c := range []struct {
		name      string
		spec      verify.Spec
		field     string
		msgSubstr string
	}{
		{"unknown type", verify.Spec{Type: "paypal", Secrets: []string{"x"}}, "type", "must be one of"},
		{"empty type", verify.Spec{}, "type", "must be one of"},
		{"no secret", verify.Spec{Type: "github"}, "secret", "at least one"},
		{"nine secrets", verify.Spec{Type: "github", Secrets: nine}, "secret", "at most 8"},
		{"empty secret", verify.Spec{Type: "github", Secrets: []string{"a", ""}}, "secret[1]", "must not be empty"},
		{"whsec not base64", verify.Spec{Type: "standard_webhooks", Secrets: []string{"whsec_s3cr3t-value!"}}, "secret[0]", "secret is not"},
		{"whsec decodes to nothing", verify.Spec{Type: "standard_webhooks", Secrets: []string{"whsec_"}}, "secret[0]", "no bytes"},
		{"base64 secret with spaces", hmac(func(s *verify.Spec) { s.SecretDecode = "base64"; s.Secrets = []string{"czNjcjN0 LXZhbHVl"} }), "secret[0]", "secret is not standard base64"},
		{"negative tolerance", verify.Spec{Type: "stripe", Secrets: []string{"x"}, ToleranceSeconds: -1}, "tolerance_seconds", "negative"},
		{"preset with hmac fields", verify.Spec{Type: "github", Secrets: []string{"x"}, Hash: "sha1"}, "hash", "applies only to type hmac"},
		{"preset with a header", verify.Spec{Type: "stripe", Secrets: []string{"x"}, SignatureHeader: "X"}, "signature_header", "applies only to type hmac"},
		{"hmac without header", hmac(func(s *verify.Spec) { s.SignatureHeader = "" }), "signature_header", "required"},
		{"hmac bad header name", hmac(func(s *verify.Spec) { s.SignatureHeader = "X Sig" }), "signature_header", "header name"},
		{"bad parse", hmac(func(s *verify.Spec) { s.Parse = "json" }), "parse", "must be one of"},
		{"bad hash", hmac(func(s *verify.Spec) { s.Hash = "md5" }), "hash", "must be one of"},
		{"bad encoding", hmac(func(s *verify.Spec) { s.Encoding = "base32" }), "encoding", "must be one of"},
		{"bad secret_decode", hmac(func(s *verify.Spec) { s.SecretDecode = "hex" }), "secret_decode", "must be one of"},
		{"csv without sig_key", hmac(func(s *verify.Spec) { s.Parse = "csv_pairs" }), "sig_key", "required"},
		{"space_versions without sig_key", hmac(func(s *verify.Spec) { s.Parse = "space_versions" }), "sig_key", "required"},
		{"sig_key on whole", hmac(func(s *verify.Spec) { s.SigKey = "v1" }), "sig_key", "applies only"},
		{"sig_key with separator", hmac(func(s *verify.Spec) { s.Parse = "csv_pairs"; s.SigKey = "v=1" }), "sig_key", "separators"},
		{"timestamp_key on whole", hmac(func(s *verify.Spec) { s.TimestampKey = "t"; s.Signed = "{ts}.{body}" }), "timestamp_key", "csv_pairs"},
		{"timestamp_key equals sig_key", hmac(func(s *verify.Spec) {
			s.Parse, s.SigKey, s.TimestampKey, s.Signed = "csv_pairs", "t", "t", "{ts}.{body}"
		}), "timestamp_key", "differ"},
		{"both timestamp sources", hmac(func(s *verify.Spec) {
			s.Parse, s.SigKey, s.TimestampKey, s.TimestampHeader, s.Signed = "csv_pairs", "v1", "t", "X-Ts", "{ts}.{body}"
		}), "timestamp_header", "use one"},
		{"bad timestamp_header", hmac(func(s *verify.Spec) { s.TimestampHeader = "X:Ts"; s.Signed = "{ts}{body}" }), "timestamp_header", "header name"},
		{"template without body", hmac(func(s *verify.Spec) { s.Signed = "{ts}"; s.TimestampHeader = "X-Ts" }), "signed", "{body} exactly once"},
		{"template with body twice", hmac(func(s *verify.Spec) { s.Signed = "{body}{body}" }), "signed", "found 2"},
		{"template unknown placeholder", hmac(func(s *verify.Spec) { s.Signed = "{id}.{body}" }), "signed", "unknown placeholder {id}"},
		{"template unclosed", hmac(func(s *verify.Spec) { s.Signed = "{body}.{ts" }), "signed", "without a closing"},
		{"template bad header", hmac(func(s *verify.Spec) { s.Signed = "{header:a b}{body}" }), "signed", "not a header name"},
		{"template too many headers", hmac(func(s *verify.Spec) {
			s.Signed = "{header:a}{header:b}{header:c}{header:d}{header:e}{header:f}{header:g}{header:h}{header:i}{body}"
		}), "signed", "more than 8"},
		{"{ts} without a timestamp", hmac(func(s *verify.Spec) { s.Signed = "{ts}.{body}" }), "signed", "neither timestamp_header nor timestamp_key"},
		{"timestamp not signed", hmac(func(s *verify.Spec) { s.TimestampHeader = "X-Ts" }), "signed", "must use {ts}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := verify.New(c.spec)
			if err == nil || v != nil {
				t.Fatalf("New = %v, %v; want an error", v, err)
			}
			var se *verify.SpecError
			found := false
			for _, e := range unwrapAll(err) {
				if errors.As(e, &se) && se.Field == c.field && strings.Contains(se.Msg, c.msgSubstr) {
					found = true
				}
			}
			if !found {
				t.Fatalf("New: %v; want a %s error containing %q", err, c.field, c.msgSubstr)
			}
			if strings.HasPrefix(c.field, "secret") && !strings.Contains(err.Error(), "secret") {
				t.Fatalf("error %q does not mention the secret", err)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Fatalf("error %q quotes a secret", err)
			}
		})
	}
}

// TestNew_CollectsEveryProblem: one call reports all violations, as
// config does for the whole file.
func TestNew_CollectsEveryProblem(t *testing.T) {
	_, err := verify.New(verify.Spec{Type: "hmac", Hash: "md5", Encoding: "base32", Parse: "xml"})
	var fields []string
	for _, e := range unwrapAll(err) {
		var se *verify.SpecError
		if errors.As(e, &se) {
			fields = append(fields, se.Field)
		}
	}
	if got := strings.Join(fields, ","); got != "hash,encoding,signature_header,parse,secret" {
		t.Fatalf("fields = %s (err %v)", got, err)
	}
}

func TestNew_Valid(t *testing.T) {
	for _, s := range []verify.Spec{
		{Type: "none"},
		{Type: "none", Secrets: []string{"ignored"}},
		{Type: "github", Secrets: []string{"1", "2", "3", "4", "5", "6", "7", "8"}},
		{Type: "stripe", Secrets: []string{"whsec_x"}, ToleranceSeconds: 600},
		{Type: "standard_webhooks", Secrets: []string{"whsec_c2VjcmV0", "c2VjcmV0"}}, // padded or not, prefix optional
		{Type: "hmac", Secrets: []string{"x"}, SignatureHeader: "x-sig"},             // every default
		{Type: "hmac", Secrets: []string{"x"}, SignatureHeader: "X-Sig", Signed: "}{body}{header:X-A}{header:x-a}"},
		{Type: "hmac", Secrets: []string{"c2VjcmV0"}, SignatureHeader: "X-Sig", Parse: "space_versions", SigKey: "v2",
			TimestampHeader: "X-Ts", Signed: "{ts}{body}", Hash: "sha512", Encoding: "base64", SecretDecode: "whsec_base64"},
	} {
		if _, err := verify.New(s); err != nil {
			t.Errorf("New(%+v): %v", s, err)
		}
	}
	want := "discord,dropbox,github,gitlab,hmac,intercom,linear,mailgun,meta,none,paddle,pagerduty,sendgrid,shopify,slack,square,standard_webhooks,stripe,svix,twilio,zoom"
	if got := strings.Join(verify.Types(), ","); got != want {
		t.Errorf("Types() = %s, want %s", got, want)
	}
}

func TestFailure(t *testing.T) {
	f := &verify.Failure{Reason: verify.NoMatch, Detail: "d"}
	if f.Error() != "verification failed: no_match: d" {
		t.Errorf("Error() = %q", f.Error())
	}
	if (&verify.Failure{Reason: verify.BadSecret}).Error() != "verification failed: bad_secret" {
		t.Error("Error() without detail")
	}
	wrapped := errors.Join(errors.New("other"), f)
	if !errors.Is(wrapped, &verify.Failure{Reason: verify.NoMatch}) || errors.Is(wrapped, &verify.Failure{Reason: verify.MissingSignature}) {
		t.Error("errors.Is by reason")
	}
	if verify.ReasonOf(wrapped) != verify.NoMatch || verify.ReasonOf(errors.New("x")) != "" || verify.ReasonOf(nil) != "" {
		t.Error("ReasonOf")
	}
}

func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
