package verify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// mailgun checks the signature Mailgun puts inside the body (Mailgun docs:
// "Securing webhooks"): JSON webhooks carry
// {"signature":{"timestamp","token","signature"}, "event-data":{…}}; the
// legacy form-encoded ones carry timestamp, token and signature as form
// fields. signature = hex(HMAC-SHA256(webhook signing key, timestamp +
// token)). The body itself is not signed (the token is per request), which
// is Mailgun's design; the timestamp is checked against the tolerance.
type mailgun struct {
	keys      [][]byte
	tolerance int64
}

var _ Verifier = (*mailgun)(nil)

func newMailgun(s Spec, errs *specErrors) Verifier {
	if len(s.PublicKeys) > 0 {
		errs.add("public_key", "applies only to asymmetric schemes; mailgun uses secret (the webhook signing key)")
	}
	m := &mailgun{keys: decodeSecrets(s.Secrets, SecretRaw, errs), tolerance: tolerance(s, errs)}
	return m
}

// tolerance is s.ToleranceSeconds checked and defaulted, for the builders
// (compile does the same for the engine).
func tolerance(s Spec, errs *specErrors) int64 {
	switch {
	case s.ToleranceSeconds < 0:
		errs.add("tolerance_seconds", "must not be negative, got %d", s.ToleranceSeconds)
	case s.ToleranceSeconds == 0:
		return DefaultToleranceSeconds
	}
	return int64(s.ToleranceSeconds)
}

// mailgunFields are the three values, as sent.
type mailgunFields struct{ ts, token, sig string }

func (m *mailgun) Verify(h http.Header, body []byte, now time.Time) error {
	f, fl := mailgunParse(h, body)
	if fl != nil {
		return fl
	}
	sig, err := hex.DecodeString(f.sig)
	if err != nil || len(sig) != sha256.Size {
		return fail(MalformedSignature, "mailgun signature is not hex HMAC-SHA256")
	}
	sec, ok := parseUnix(f.ts)
	if !ok {
		return fail(MalformedSignature, "mailgun timestamp is not integer seconds")
	}
	if f := checkSkew(now, sec, m.tolerance); f != nil {
		return f
	}
	matched := false
	var sum [sha256.Size]byte
	for _, k := range m.keys {
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(f.ts))
		mac.Write([]byte(f.token))
		eq := hmac.Equal(mac.Sum(sum[:0]), sig)
		matched = matched || eq
	}
	if !matched {
		return fail(NoMatch, "no secret produced the mailgun signature")
	}
	return nil
}

// mailgunParse finds the three fields: JSON unless the content type is a
// form. Absent fields are missing_signature; a body that is not what its
// content type says is malformed_signature.
func mailgunParse(h http.Header, body []byte) (mailgunFields, *Failure) {
	ct, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	var f mailgunFields
	if ct == "application/x-www-form-urlencoded" {
		q, err := url.ParseQuery(string(body))
		if err != nil {
			return f, fail(MalformedSignature, "mailgun form body does not parse")
		}
		f = mailgunFields{q.Get("timestamp"), q.Get("token"), q.Get("signature")}
	} else {
		var doc struct {
			Signature *struct {
				Timestamp json.RawMessage `json:"timestamp"`
				Token     string          `json:"token"`
				Signature string          `json:"signature"`
			} `json:"signature"`
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			return f, fail(MalformedSignature, "mailgun body is not JSON (nor a form)")
		}
		if doc.Signature == nil {
			return f, fail(MissingSignature, "mailgun body has no signature object")
		}
		ts := string(bytes.Trim(doc.Signature.Timestamp, `"`)) // sent as a string; a number is accepted too
		f = mailgunFields{ts, doc.Signature.Token, doc.Signature.Signature}
	}
	if f.ts == "" || f.token == "" || f.sig == "" {
		return f, fail(MissingSignature, "mailgun timestamp, token or signature is absent")
	}
	return f, nil
}

// checkSkew is the tolerance rule (invariant 3) for the builders.
func checkSkew(now time.Time, sec, tolerance int64) *Failure {
	skew := now.Unix() - sec
	switch {
	case skew > tolerance:
		return fail(TimestampOutOfTolerance, "timestamp is "+strconv.FormatInt(skew, 10)+
			"s in the past; tolerance "+strconv.FormatInt(tolerance, 10)+"s")
	case skew < -tolerance:
		return fail(TimestampOutOfTolerance, "timestamp is "+strconv.FormatInt(-skew, 10)+
			"s in the future; tolerance "+strconv.FormatInt(tolerance, 10)+"s")
	}
	return nil
}
