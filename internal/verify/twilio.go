package verify

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"mime"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// URLVerifier is a Verifier whose scheme signs the URL the provider called
// (Twilio). The edge calls VerifyURL with the request's raw query string;
// Verify is VerifyURL with no query. Same error contract as Verify.
type URLVerifier interface {
	Verifier
	VerifyURL(h http.Header, rawQuery string, body []byte, now time.Time) error
}

// twilio checks X-Twilio-Signature (Twilio docs: "Webhooks security"):
// base64(HMAC-SHA1(auth token, URL + every POST parameter's name and value,
// sorted by name)), where URL is the full URL Twilio called, query string
// included. A JSON body is not in the signed string: Twilio then adds a
// bodySHA256 query parameter, the hex SHA-256 of the body, which is checked
// too. As twilio-go's RequestValidator does, the URL is tried both with and
// without its port (a default port is added when it has none), since
// Twilio's own signing differs between the two across products.
//
// The URL is public_url (scheme, host, port and path as Twilio sees them)
// with the request's own query string, because a proxy in front of Ankusa
// rewrites what the request shows; public_url's own query, if any, is
// replaced by the request's.
type twilio struct {
	base *url.URL // public_url without its query
	keys [][]byte
}

var _ URLVerifier = (*twilio)(nil)

const twilioHeader = "X-Twilio-Signature"

func newTwilio(s Spec, errs *specErrors) Verifier {
	if len(s.PublicKeys) > 0 {
		errs.add("public_key", "applies only to asymmetric schemes; twilio uses secret (the auth token)")
	}
	t := &twilio{keys: decodeSecrets(s.Secrets, SecretRaw, errs)}
	if checkPublicURL(s.PublicURL, errs) {
		t.base, _ = url.Parse(s.PublicURL)
		t.base.RawQuery, t.base.ForceQuery, t.base.Fragment = "", false, ""
	}
	return t
}

func (t *twilio) Verify(h http.Header, body []byte, now time.Time) error {
	return t.VerifyURL(h, "", body, now)
}

func (t *twilio) VerifyURL(h http.Header, rawQuery string, body []byte, _ time.Time) error {
	v, f := headerValue(h, twilioHeader)
	if f != nil {
		return f
	}
	// Strict and padded, as Twilio sends it: twilio-go compares the encoded
	// text, so a second spelling of the same digest (the last character's
	// unused bits set; found by the differential fuzz test) is refused.
	sig, err := base64.StdEncoding.Strict().DecodeString(v)
	if err != nil || len(sig) != sha1.Size {
		return fail(MalformedSignature, twilioHeader+" is not base64 HMAC-SHA1")
	}
	u := *t.base
	u.RawQuery = rawQuery

	var params string
	if want := queryValue(rawQuery, "bodySHA256"); want != "" {
		sum := sha256.Sum256(body)
		if got, err := hex.DecodeString(want); err != nil || !hmac.Equal(got, sum[:]) {
			return fail(NoMatch, "bodySHA256 does not match the body")
		}
	} else if ct, _, _ := mime.ParseMediaType(h.Get("Content-Type")); ct == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return fail(MalformedSignature, "form body does not parse")
		}
		params = twilioParams(form)
	}

	matched := false
	var sum [sha1.Size]byte
	for _, variant := range []string{withPort(u), withoutPort(u)} {
		for _, k := range t.keys {
			m := hmac.New(sha1.New, k)
			m.Write([]byte(variant))
			m.Write([]byte(params))
			eq := hmac.Equal(m.Sum(sum[:0]), sig)
			matched = matched || eq
		}
	}
	if !matched {
		return fail(NoMatch, "no secret produced "+twilioHeader)
	}
	return nil
}

// twilioParams is every parameter's name and value, concatenated, sorted by
// name (and a repeated name's values sorted too, as Twilio's libraries do).
func twilioParams(form url.Values) string {
	names := make([]string, 0, len(form))
	for n := range form {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		vals := append([]string(nil), form[n]...)
		sort.Strings(vals)
		for _, v := range vals {
			b.WriteString(n)
			b.WriteString(v)
		}
	}
	return b.String()
}

// queryValue is the first value of key in a raw query, "" if absent or
// unparseable.
func queryValue(rawQuery, key string) string {
	if rawQuery == "" {
		return ""
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return ""
	}
	return q.Get(key)
}

// withPort is u with its port, the scheme's default added when it has none.
func withPort(u url.URL) string {
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return u.String()
}

// withoutPort is u with any port removed.
func withoutPort(u url.URL) string {
	if u.Port() != "" {
		u.Host = u.Hostname()
		if strings.Contains(u.Host, ":") {
			u.Host = "[" + u.Host + "]"
		}
	}
	return u.String()
}
