package verify

import (
	"crypto/hmac"
	"net/http"
	"strconv"
	"time"
)

// engine is the one HMAC verifier every scheme but none uses; compile builds
// it from a Spec and it is immutable afterwards, so Verify is safe for
// concurrent use.
//
// Verify checks, in this order, and the first failure is the answer:
//
//  1. the signature header: absent or empty → missing_signature; repeated or
//     over MaxHeaderBytes → malformed_signature;
//  2. its parse: a candidate of the expected version counts only if it
//     carries the prefix and decodes to exactly one digest; one that does
//     not is skipped, as the providers' libraries skip it. No candidate
//     left → malformed_signature;
//  3. timestamped schemes: the timestamp (header absent → missing_signature;
//     not 1–18 ASCII digits → malformed_signature), then |now − ts| ≤
//     tolerance → else timestamp_out_of_tolerance. This is checked before
//     any MAC is computed: it is cheap, and it reveals nothing secret;
//  4. headers named in the signed template: absent or empty →
//     missing_signature;
//  5. the MACs: one per secret over the template, each compared with every
//     candidate by hmac.Equal, with no early exit → no_match if none equal.
type engine struct {
	sigHeader string // canonical
	parse     parseMode
	prefix    string
	sigKey    string
	tsKey     string // csv_pairs: the timestamp pair's key, or ""
	tsHeader  string // canonical, or ""

	parts   []part
	headers []string // canonical names for partHeader.idx

	newHash hashFunc
	size    int  // digest length
	base64  bool // else hex

	keys        [][]byte // decoded secrets, newest first
	timestamped bool
	tolerance   int64 // seconds
}

var _ Verifier = (*engine)(nil)

func (e *engine) Verify(h http.Header, body []byte, now time.Time) error {
	raw, f := headerValue(h, e.sigHeader)
	if f != nil {
		return f
	}
	var c candidates
	ts, f := e.parseSignature(raw, &c)
	if f != nil {
		return f
	}

	if e.timestamped {
		if e.tsHeader != "" {
			if ts, f = headerValue(h, e.tsHeader); f != nil {
				return f
			}
		}
		sec, ok := parseUnix(ts)
		if !ok {
			src := e.tsHeader + " header"
			if e.tsHeader == "" {
				src = e.sigHeader + " " + e.tsKey + " pair"
			}
			return fail(MalformedSignature, src+": timestamp is not integer seconds")
		}
		skew := now.Unix() - sec // no overflow: sec < 1e18
		switch {
		case skew > e.tolerance:
			return fail(TimestampOutOfTolerance, "timestamp is "+strconv.FormatInt(skew, 10)+
				"s in the past; tolerance "+strconv.FormatInt(e.tolerance, 10)+"s")
		case skew < -e.tolerance:
			return fail(TimestampOutOfTolerance, "timestamp is "+strconv.FormatInt(-skew, 10)+
				"s in the future; tolerance "+strconv.FormatInt(e.tolerance, 10)+"s")
		}
	}

	var hv [maxTemplateHeaders][]byte
	for i, name := range e.headers {
		v, f := headerValue(h, name)
		if f != nil {
			return f
		}
		hv[i] = []byte(v)
	}
	tsb := []byte(ts)

	var sum [maxDigest]byte
	matched := false
	for _, key := range e.keys {
		m := hmac.New(e.newHash, key)
		for _, p := range e.parts {
			switch p.kind {
			case partLiteral:
				m.Write(p.lit)
			case partBody:
				m.Write(body)
			case partTS:
				m.Write(tsb)
			case partHeader:
				m.Write(hv[p.idx])
			}
		}
		mac := m.Sum(sum[:0])
		for i := 0; i < c.n; i++ {
			// Evaluate hmac.Equal for every pair; never short-circuit.
			eq := hmac.Equal(mac, c.sig(i))
			matched = matched || eq
		}
	}
	if !matched {
		return fail(NoMatch, "no secret produced any of the signatures")
	}
	return nil
}
