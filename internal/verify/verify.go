// Package verify checks the signature a webhook provider put on a request.
//
// There is one engine: a generic verifier (engine, in hmac.go) driven by a
// Spec, for HMACs and Ed25519 signatures alike. Most named schemes — github,
// shopify, slack, stripe, standard_webhooks, svix, discord, paddle, linear,
// zoom, square, intercom, pagerduty, meta, dropbox — are only a preset Spec
// for that engine (presets.go), so they share the same header limits, the
// same parsers, the same constant-time comparison and the same failure
// reasons. Rejected design: one hand-written verifier per provider; copies
// of "parse, decode, compare" drift apart, and each new provider would need
// new code instead of a config block.
//
// Four schemes do not fit as data and have a small verifier of their own
// behind the same interface (providers.go): gitlab (a token, not a
// signature), mailgun (the signature is inside the body), twilio (it signs
// the URL, so it is a URLVerifier) and sendgrid (ECDSA, variable-length
// DER signatures).
//
// What the engine promises, for every scheme:
//
//  1. Every configured secret is tried and every candidate signature in the
//     header is compared against every secret's MAC, with hmac.Equal, and
//     the loops never stop early, so the time taken does not reveal which
//     secret or which candidate matched.
//  2. Nothing read from the request is trusted for size: a header value over
//     MaxHeaderBytes is malformed, and at most MaxCandidates signatures are
//     considered.
//  3. Timestamped schemes refuse a timestamp more than the tolerance away
//     from now in either direction (replays and clocks running ahead).
//  4. A Failure's Detail never contains a secret, a signature or other
//     request bytes; it names the header or the rule, so it can be logged.
package verify

import (
	"errors"
	"net/http"
	"time"
)

// Verifier checks one request's signature.
//
// Verify returns nil if the request carries a valid signature, else a
// *Failure whose Reason says why. It never returns any other error type,
// never panics on any header or body, and does not retain h or body. h's
// keys must be in canonical form, as net/http produces them. A Verifier is
// safe for concurrent use.
type Verifier interface {
	Verify(h http.Header, body []byte, now time.Time) error
}

// Reason is why a request failed verification. The values are part of the
// ingest contract: they appear in the 401 body and as a metrics label, and
// must not change.
type Reason string

const (
	// MissingSignature: a header the scheme needs (the signature, its
	// timestamp, or a header named in the signed template) is absent or
	// empty.
	MissingSignature Reason = "missing_signature"
	// MalformedSignature: a header is present but cannot be parsed: bad hex
	// or base64, wrong digest length, a missing prefix, no signature of the
	// expected version, a non-integer timestamp, a repeated header, or a
	// value over MaxHeaderBytes.
	MalformedSignature Reason = "malformed_signature"
	// NoMatch: the request is well formed but no secret produced any of the
	// signatures it carries (wrong secret, or the body was changed).
	NoMatch Reason = "no_match"
	// TimestampOutOfTolerance: the signed timestamp is further than the
	// tolerance from now, in the past or the future.
	TimestampOutOfTolerance Reason = "timestamp_out_of_tolerance"
	// BadSecret: a secret could not be decoded at request time. New decodes
	// and validates every secret, so the engine never returns this; the
	// value is kept because it is part of the ingest contract.
	BadSecret Reason = "bad_secret"
)

// Limits. Changing them changes which requests are accepted.
const (
	// MaxSecrets is how many secrets one source may have (rotation keeps
	// the newest first and one or two old ones).
	MaxSecrets = 8
	// MaxHeaderBytes bounds every header value the verifier reads.
	MaxHeaderBytes = 8 << 10
	// MaxCandidates is how many signatures of the expected version are
	// considered; any further ones are ignored.
	MaxCandidates = 32
	// DefaultToleranceSeconds is used when Spec.ToleranceSeconds is 0.
	DefaultToleranceSeconds = 300
)

// Failure is the error Verify returns for a request that is not valid.
type Failure struct {
	Reason Reason
	// Detail is for logs and operators: it names the header or the rule and
	// never contains request bytes or secrets.
	Detail string
}

func (f *Failure) Error() string {
	if f.Detail == "" {
		return "verification failed: " + string(f.Reason)
	}
	return "verification failed: " + string(f.Reason) + ": " + f.Detail
}

// Is reports whether target is a *Failure with the same Reason, so
// errors.Is(err, &Failure{Reason: NoMatch}) works whatever the Detail.
func (f *Failure) Is(target error) bool {
	t, ok := target.(*Failure)
	return ok && t.Reason == f.Reason
}

// ReasonOf returns the Reason of a *Failure in err's chain, or "" if there
// is none.
func ReasonOf(err error) Reason {
	var f *Failure
	if errors.As(err, &f) {
		return f.Reason
	}
	return ""
}

func fail(r Reason, detail string) *Failure { return &Failure{Reason: r, Detail: detail} }

// none accepts every request (type "none").
type none struct{}

var _ Verifier = none{}

func (none) Verify(http.Header, []byte, time.Time) error { return nil }
