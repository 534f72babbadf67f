package verify

import (
	"encoding/base64"
	"net/http"
	"strings"
)

// parseMode is Spec.Parse, compiled.
type parseMode uint8

const (
	parseWhole parseMode = iota
	parseCSVPairs
	parseSpaceVersions
)

// maxDigest is the largest digest (SHA-512) a candidate can hold.
const maxDigest = 64

// candidates holds the decoded signatures from one header, in a fixed array
// so that a request allocates nothing for them.
type candidates struct {
	buf  [MaxCandidates * maxDigest]byte
	n    int
	size int // digest length every candidate must have
}

func (c *candidates) sig(i int) []byte { return c.buf[i*c.size : (i+1)*c.size] }

// headerValue returns the single value of the canonical header name, with
// surrounding spaces and tabs removed. Absent or empty is MissingSignature;
// a repeated header (which value was signed?) or one over MaxHeaderBytes is
// MalformedSignature.
func headerValue(h http.Header, name string) (string, *Failure) {
	vs := h[name]
	switch len(vs) {
	case 0:
		return "", fail(MissingSignature, name+" header is absent")
	case 1:
	default:
		return "", fail(MalformedSignature, name+" header is repeated")
	}
	if len(vs[0]) > MaxHeaderBytes {
		return "", fail(MalformedSignature, name+" header is longer than 8 KiB")
	}
	v := trimOWS(vs[0])
	if v == "" {
		return "", fail(MissingSignature, name+" header is empty")
	}
	return v, nil
}

// trimOWS removes HTTP optional white space (spaces and tabs) at both ends.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseSignature splits the signature header value into decoded candidates
// (into c) and, for csv_pairs with a timestamp key, returns the timestamp
// text. Every failure is MalformedSignature; details never echo the value.
//
// A header may carry several candidates (csv_pairs, space_versions). One
// that cannot be decoded is skipped, as the providers' own libraries skip
// it (stripe-go "ignores invalid signatures"; the Standard Webhooks and
// Svix libraries compare each entry and move on): it can match nothing, and
// refusing the whole header for it would refuse a request another candidate
// authenticates. The header is malformed only when no candidate of the
// expected version decodes; the reason then names the last bad one.
func (e *engine) parseSignature(v string, c *candidates) (ts string, f *Failure) {
	c.size = e.size
	var lastBad *Failure // the last candidate that did not decode
	switch e.parse {
	case parseWhole:
		return "", e.addCandidate(c, v)

	case parseCSVPairs:
		seenTS := false
		for rest, more := v, true; more; {
			var item string
			item, rest, more = strings.Cut(rest, e.pairSep)
			item = trimOWS(item)
			if item == "" {
				continue // tolerate "a=1,,b=2" and a trailing comma
			}
			k, val, ok := strings.Cut(item, "=")
			if !ok {
				return "", fail(MalformedSignature, e.sigHeader+": a comma-separated item has no '='")
			}
			k, val = trimOWS(k), trimOWS(val)
			switch k {
			case e.sigKey:
				if f := e.addCandidate(c, val); f != nil {
					lastBad = f
				}
			case e.tsKey:
				if e.tsKey == "" {
					break // no timestamp key configured: "" is just an unnamed pair
				}
				if seenTS {
					return "", fail(MalformedSignature, e.sigHeader+": timestamp pair "+e.tsKey+" is repeated")
				}
				seenTS, ts = true, val
			}
		}
		if e.tsKey != "" && !seenTS {
			return "", fail(MalformedSignature, e.sigHeader+": no "+e.tsKey+" timestamp pair")
		}

	case parseSpaceVersions:
		for rest := v; rest != ""; {
			i := strings.IndexAny(rest, " \t")
			item := rest
			if i < 0 {
				rest = ""
			} else {
				item, rest = rest[:i], rest[i+1:]
			}
			if item == "" {
				continue // several spaces in a row
			}
			ver, sig, ok := strings.Cut(item, ",")
			if !ok {
				// Not an entry of any version: skipped, as the reference
				// libraries skip it.
				lastBad = fail(MalformedSignature, e.sigHeader+": an entry has no ',' between version and signature")
				continue
			}
			if ver == e.sigKey {
				if f := e.addCandidate(c, sig); f != nil {
					lastBad = f
				}
			}
		}
	}
	if c.n == 0 {
		if lastBad != nil {
			return "", lastBad
		}
		return "", fail(MalformedSignature, e.sigHeader+": no "+e.sigKey+" signature")
	}
	return ts, nil
}

// addCandidate strips the prefix from s, decodes it and appends it to c.
// Candidates past MaxCandidates are ignored without being decoded.
func (e *engine) addCandidate(c *candidates, s string) *Failure {
	if c.n == MaxCandidates {
		return nil
	}
	if !strings.HasPrefix(s, e.prefix) {
		return fail(MalformedSignature, e.sigHeader+": signature lacks the "+e.prefix+" prefix")
	}
	s = s[len(e.prefix):]
	dst := c.buf[c.n*c.size : (c.n+1)*c.size]
	if e.base64 {
		// Strict: the unused low bits of the last character must be zero,
		// so each digest has exactly one accepted encoding (padded or not),
		// as with the reference libraries that compare encoded strings.
		enc := base64.RawStdEncoding.Strict()
		if strings.HasSuffix(s, "=") {
			enc = base64.StdEncoding.Strict()
		}
		if len(s) != enc.EncodedLen(e.size) {
			return fail(MalformedSignature, e.sigHeader+": signature has the wrong length for the hash")
		}
		var tmp [maxDigest + 3]byte // DecodedLen may round up past the digest
		for i := 0; i < len(s); i++ {
			if !isBase64Char(s[i]) {
				return fail(MalformedSignature, e.sigHeader+": signature is not valid base64")
			}
		}
		n, err := enc.Decode(tmp[:], []byte(s))
		if err != nil || n != e.size {
			return fail(MalformedSignature, e.sigHeader+": signature is not valid base64")
		}
		copy(dst, tmp[:n])
	} else {
		if len(s) != 2*e.size {
			return fail(MalformedSignature, e.sigHeader+": signature has the wrong length for the hash")
		}
		for i := range dst {
			hi, ok1 := unhex(s[2*i])
			lo, ok2 := unhex(s[2*i+1])
			if !ok1 || !ok2 {
				return fail(MalformedSignature, e.sigHeader+": signature is not valid hex")
			}
			dst[i] = hi<<4 | lo
		}
	}
	c.n++
	return nil
}

// parseUnix parses a timestamp strictly: 1 to 18 ASCII digits (no sign,
// space, fraction or exponent), so it cannot overflow.
func parseUnix(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// unhex decodes one hex digit, either case.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
