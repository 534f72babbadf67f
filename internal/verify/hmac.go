package verify

import (
	"crypto/ed25519"
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
	pairSep   string // csv_pairs: "," or ";"
	prefix    string
	sigKey    string
	tsKey     string // csv_pairs: the timestamp pair's key, or ""
	tsHeader  string // canonical, or ""

	parts   []part
	headers []string // canonical names for partHeader.idx

	newHash hashFunc
	size    int  // digest length
	base64  bool // else hex

	keys        [][]byte            // decoded secrets, newest first
	pub         []ed25519.PublicKey // hash ed25519: the public keys instead of keys
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

	if e.pub != nil {
		return e.verifyEd25519(&c, body, tsb, &hv)
	}

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

// verifyEd25519 is step 5 for hash ed25519: the signed bytes are assembled
// once (an Ed25519 signature covers the whole message, there is no
// streaming form), then every candidate is checked against every public
// key. A public-key check reveals nothing secret, so there is no timing
// concern; the loops still run to the end, as the HMAC ones do.
func (e *engine) verifyEd25519(c *candidates, body, ts []byte, hv *[maxTemplateHeaders][]byte) error {
	n := 0
	for _, p := range e.parts {
		switch p.kind {
		case partLiteral:
			n += len(p.lit)
		case partBody:
			n += len(body)
		case partTS:
			n += len(ts)
		case partHeader:
			n += len(hv[p.idx])
		}
	}
	msg := make([]byte, 0, n)
	for _, p := range e.parts {
		switch p.kind {
		case partLiteral:
			msg = append(msg, p.lit...)
		case partBody:
			msg = append(msg, body...)
		case partTS:
			msg = append(msg, ts...)
		case partHeader:
			msg = append(msg, hv[p.idx]...)
		}
	}
	matched := false
	for _, key := range e.pub {
		for i := 0; i < c.n; i++ {
			ok := ed25519.Verify(key, msg, c.sig(i))
			matched = matched || ok
		}
	}
	if !matched {
		return fail(NoMatch, "no public key verified any of the signatures")
	}
	return nil
}
