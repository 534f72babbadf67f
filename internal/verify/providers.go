package verify

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The schemes that do not fit the engine as plain data: each builder
// validates the Spec (adding every problem to errs) and returns its
// Verifier, behind the same interface and the same Failure reasons.
//
//   - gitlab: a shared token, not a signature (token.go);
//   - mailgun: the signature fields are inside the body (mailgun.go);
//   - twilio: HMAC-SHA1 over the URL plus the sorted form parameters, so it
//     needs the request's query string (twilio.go, URLVerifier);
//   - sendgrid: ECDSA P-256, whose DER signatures do not have a fixed size
//     (sendgrid.go).
var builders = map[string]func(Spec, *specErrors) Verifier{
	"gitlab":   newGitLab,
	"mailgun":  newMailgun,
	"twilio":   newTwilio,
	"sendgrid": newSendGrid,
}

// publicURLTypes are the types that sign the URL the provider called and so
// need Spec.PublicURL.
var publicURLTypes = []string{"square", "twilio"}

// presetFills complete a preset from the source's own settings before it is
// compiled.
var presetFills = map[string]func(p *Spec, s Spec, errs *specErrors){
	// Square signs notification URL + body: the URL becomes the template's
	// literal prefix.
	"square": func(p *Spec, s Spec, errs *specErrors) {
		if checkPublicURL(s.PublicURL, errs) {
			p.Signed = s.PublicURL + "{body}"
		}
	},
}

// checkPublicURL reports whether u is usable as a public_url: an absolute
// http(s) URL, without "{" or "}" (it becomes a template literal).
func checkPublicURL(u string, errs *specErrors) bool {
	if u == "" {
		errs.add("public_url", "is required: the URL the provider calls, exactly as it sees it (it is signed)")
		return false
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		errs.add("public_url", "must be an absolute http:// or https:// URL, got %q", u)
		return false
	}
	if strings.ContainsAny(u, "{}") {
		errs.add("public_url", "must not contain { or }")
		return false
	}
	return true
}

// compileStandard builds the Standard Webhooks scheme under the header names
// of preset name (standard_webhooks or svix): v1 (HMAC) when s has secrets,
// v1a (Ed25519) when it has public keys, either one when it has both.
func compileStandard(name string, s Spec, errs *specErrors) Verifier {
	v1 := presets[name]
	v1.Secrets, v1.ToleranceSeconds = s.Secrets, s.ToleranceSeconds
	if len(s.PublicKeys) == 0 {
		return compile(v1, errs)
	}
	v1a := v1
	v1a.Secrets, v1a.PublicKeys = nil, s.PublicKeys
	v1a.SigKey, v1a.Hash, v1a.SecretDecode = "v1a", HashEd25519, KeyWhpkBase64
	if len(s.Secrets) == 0 {
		return compile(v1a, errs)
	}
	return anyOf{compile(v1, errs), compile(v1a, errs)}
}

// anyOf accepts a request any of its verifiers accepts. Every one runs (no
// early exit); when all refuse, the answer is the most specific reason:
// a check that got as far as comparing (no_match, timestamp) beats a
// malformed header, which beats a missing one, so a source accepting v1 and
// v1a answers no_match, not "no v1a signature", to a wrong v1.
type anyOf []Verifier

var _ Verifier = anyOf(nil)

func (a anyOf) Verify(h http.Header, body []byte, now time.Time) error {
	var best *Failure
	ok := false
	for _, v := range a {
		err := v.Verify(h, body, now)
		if err == nil {
			ok = true
			continue
		}
		f, _ := err.(*Failure)
		if f != nil && (best == nil || rank(f.Reason) > rank(best.Reason)) {
			best = f
		}
	}
	if ok {
		return nil
	}
	return best
}

func rank(r Reason) int {
	switch r {
	case NoMatch, TimestampOutOfTolerance:
		return 2
	case MalformedSignature:
		return 1
	}
	return 0
}
