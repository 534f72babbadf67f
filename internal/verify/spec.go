package verify

import (
	"crypto/ed25519"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/textproto"
	"slices"
	"strings"
)

// Spec is a source's verify block. The config package maps its YAML onto
// it; New validates it.
type Spec struct {
	// Type: none | hmac | a preset name (Types lists them).
	Type string
	// Secrets, newest first, at most MaxSecrets, none empty. Every one is
	// tried on every request, so the order only documents rotation.
	// Required unless Type is none (where they are ignored).
	Secrets []string
	// ToleranceSeconds bounds |now − timestamp| on timestamped schemes and
	// is ignored by the others. 0 means DefaultToleranceSeconds; negative
	// is refused.
	ToleranceSeconds int
	// PublicKeys are the provider's public keys for the asymmetric schemes
	// (discord, sendgrid, standard_webhooks v1a, hmac with hash ed25519),
	// newest first, at most MaxSecrets; refused by the symmetric ones.
	PublicKeys []string
	// PublicURL is the URL the provider calls, exactly as it sees it
	// (scheme, host, port, path; a proxy in front of Ankusa rewrites what
	// Ankusa sees), for the schemes that sign it: twilio and square, where
	// it is required; refused elsewhere.
	PublicURL string

	// The fields below apply to Type "hmac" only; a preset fixes them and
	// New refuses them there.

	// SignatureHeader names the header carrying the signature(s). Required.
	SignatureHeader string
	// Parse says how the header holds signatures (default whole):
	//   whole          — the value is one signature;
	//   csv_pairs      — "k=v,k=v,…"; every SigKey pair is a candidate and
	//                    the TimestampKey pair, if set, is the timestamp
	//                    (Stripe);
	//   space_versions — "ver,sig ver,sig …"; every entry whose version is
	//                    SigKey is a candidate (Standard Webhooks).
	Parse string
	// SigPrefix must start each candidate and is removed before decoding
	// (e.g. "sha256=", "v0="). Default none.
	SigPrefix string
	// SigKey: for csv_pairs the key of the signature pairs (e.g. "v1"); for
	// space_versions the version tag (e.g. "v1"). Required for both, refused
	// for whole.
	SigKey string
	// TimestampKey: for csv_pairs, the key of the timestamp pair (e.g. "t").
	TimestampKey string
	// Signed is the template of the signed bytes (default "{body}"):
	// literal text plus the placeholders {body} (exactly once), {ts} (the
	// timestamp exactly as sent) and {header:NAME} (that header's value; at
	// most 8). There is no escape for a literal "{".
	Signed string
	// Hash: sha256 (default) | sha512 | sha1 | ed25519. ed25519 is not an
	// HMAC: each signature is an Ed25519 signature of the signed bytes,
	// checked against PublicKeys (Secrets are refused) decoded by
	// SecretDecode hex | base64 | whpk_base64.
	Hash string
	// Encoding of each signature: hex (default, either case) | base64
	// (standard alphabet, padded or not).
	Encoding string
	// SecretDecode turns each secret into the HMAC key (default none):
	//   none         — the secret's bytes as written;
	//   base64       — standard base64;
	//   whsec_base64 — an optional "whsec_" prefix, then standard base64
	//                  (the Standard Webhooks secret format; the prefix is
	//                  optional because the reference libraries strip it
	//                  when present and decode the rest either way).
	SecretDecode string
	// TimestampHeader names the header carrying the timestamp, as decimal
	// integer seconds since the Unix epoch. At most one of TimestampHeader
	// and TimestampKey; {ts} in Signed requires one, and one requires {ts}
	// (an unsigned timestamp would only look like replay protection).
	TimestampHeader string
}

// Spec.Type values.
const (
	TypeNone = "none"
	TypeHMAC = "hmac"
)

// Spec.Parse values.
const (
	ParseWhole         = "whole"
	ParseCSVPairs      = "csv_pairs"
	ParseSpaceVersions = "space_versions"
	// ParseSemicolonPairs is csv_pairs with ";" between the pairs
	// ("ts=…;h1=…", Paddle).
	ParseSemicolonPairs = "semicolon_pairs"
)

// Spec.Hash values.
const (
	HashSHA256 = "sha256"
	HashSHA512 = "sha512"
	HashSHA1   = "sha1"
	// HashEd25519 selects Ed25519 signatures instead of an HMAC.
	HashEd25519 = "ed25519"
)

// Spec.Encoding values.
const (
	EncodingHex    = "hex"
	EncodingBase64 = "base64"
)

// Spec.SecretDecode values.
const (
	SecretRaw         = "none"
	SecretBase64      = "base64"
	SecretWhsecBase64 = "whsec_base64"
	// For public keys (hash ed25519): hex, base64, or "whpk_" + base64
	// (the Standard Webhooks public key format; the prefix is optional).
	KeyHex        = "hex"
	KeyWhpkBase64 = "whpk_base64"
)

// whsecPrefix starts a Standard Webhooks secret, whpkPrefix its public key.
const (
	whsecPrefix = "whsec_"
	whpkPrefix  = "whpk_"
)

// maxTemplateHeaders bounds the {header:NAME} placeholders in Signed.
const maxTemplateHeaders = 8

// SpecError is one problem with a Spec. Field is the config key below
// "verify" ("secret[2]", "signature_header", …) so the config package can
// report the full dotted path; Msg never contains a secret.
type SpecError struct {
	Field string
	Msg   string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Msg }

// New validates s and returns its Verifier. A Spec with problems returns
// every problem at once, as errors.Join of *SpecError values (Unwrap() []error
// lists them); a secret that cannot be decoded is one of them, with Field
// "secret[i]". Config refuses to boot on any of them.
func New(s Spec) (Verifier, error) {
	var errs specErrors
	switch s.Type {
	case TypeNone:
		return none{}, nil
	case TypeHMAC:
		if s.PublicURL != "" {
			errs.add("public_url", "applies only to types %s", strings.Join(publicURLTypes, ", "))
		}
	default:
		b, own := builders[s.Type]
		p, ok := presets[s.Type]
		if !ok && !own {
			errs.add("type", "must be one of %s, got %q", strings.Join(Types(), ", "), s.Type)
			return nil, errs.err()
		}
		for _, f := range s.hmacOnlyFields() {
			errs.add(f, "applies only to type hmac; type %s fixes it", s.Type)
		}
		if s.PublicURL != "" && !slices.Contains(publicURLTypes, s.Type) {
			errs.add("public_url", "applies only to types %s", strings.Join(publicURLTypes, ", "))
		}
		if own {
			v := b(s, &errs)
			if err := errs.err(); err != nil {
				return nil, err
			}
			return v, nil
		}
		p.Secrets, p.ToleranceSeconds, p.PublicKeys = s.Secrets, s.ToleranceSeconds, s.PublicKeys
		if other, ok := headerSets[s.Type]; ok {
			primary := compileStandard(s.Type, s, &errs)
			// The fallback's problems are the primary's (same keys, same
			// tolerance), so they are not reported twice.
			fallback := compileStandard(other, s, &specErrors{})
			if err := errs.err(); err != nil {
				return nil, err
			}
			return &headerSet{
				primaryNames: namesOf(s.Type), fallbackNames: namesOf(other),
				primary: primary, fallback: fallback,
			}, nil
		}
		if fill, ok := presetFills[s.Type]; ok {
			fill(&p, s, &errs)
		}
		s = p
	}
	e := compile(s, &errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return e, nil
}

func namesOf(typ string) [3]string {
	if typ == "svix" {
		return svixHeaders
	}
	return webhookHeaders
}

// hmacOnlyFields names the hmac-only fields set on s, as config keys.
func (s *Spec) hmacOnlyFields() []string {
	var set []string
	for _, f := range []struct {
		key string
		v   string
	}{
		{"signature_header", s.SignatureHeader}, {"parse", s.Parse}, {"sig_prefix", s.SigPrefix},
		{"sig_key", s.SigKey}, {"timestamp_key", s.TimestampKey}, {"signed", s.Signed},
		{"hash", s.Hash}, {"encoding", s.Encoding}, {"secret_decode", s.SecretDecode},
		{"timestamp_header", s.TimestampHeader},
	} {
		if f.v != "" {
			set = append(set, f.key)
		}
	}
	return set
}

type specErrors []error

func (e *specErrors) add(field, format string, args ...any) {
	*e = append(*e, &SpecError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (e specErrors) err() error { return errors.Join(e...) }

// compile turns a Spec of type hmac (a preset already expanded) into an
// engine, adding every problem to errs. The engine is only usable if errs
// stays empty.
func compile(s Spec, errs *specErrors) *engine {
	e := &engine{
		prefix:    s.SigPrefix,
		sigKey:    s.SigKey,
		tsKey:     s.TimestampKey,
		tolerance: int64(s.ToleranceSeconds),
	}
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&s.Parse, ParseWhole)
	def(&s.Signed, "{body}")
	def(&s.Hash, HashSHA256)
	def(&s.Encoding, EncodingHex)
	def(&s.SecretDecode, SecretRaw)

	switch {
	case s.ToleranceSeconds < 0:
		errs.add("tolerance_seconds", "must not be negative, got %d", s.ToleranceSeconds)
	case s.ToleranceSeconds == 0:
		e.tolerance = DefaultToleranceSeconds
	}

	switch s.Hash {
	case HashSHA256:
		e.newHash, e.size = sha256.New, sha256.Size
	case HashSHA512:
		e.newHash, e.size = sha512.New, sha512.Size
	case HashSHA1:
		e.newHash, e.size = sha1.New, sha1.Size
	case HashEd25519:
		e.size = ed25519.SignatureSize
	default:
		errs.add("hash", "must be one of sha256, sha512, sha1, ed25519, got %q", s.Hash)
	}

	switch s.Encoding {
	case EncodingHex:
	case EncodingBase64:
		e.base64 = true
	default:
		errs.add("encoding", "must be one of hex, base64, got %q", s.Encoding)
	}

	if s.SignatureHeader == "" {
		errs.add("signature_header", "is required for type hmac")
	} else if !validHeaderName(s.SignatureHeader) {
		errs.add("signature_header", "must be a header name (token characters), got %q", s.SignatureHeader)
	}
	e.sigHeader = textproto.CanonicalMIMEHeaderKey(s.SignatureHeader)

	switch s.Parse {
	case ParseWhole:
		e.parse = parseWhole
		if s.SigKey != "" {
			errs.add("sig_key", "applies only to parse csv_pairs and space_versions")
		}
	case ParseCSVPairs, ParseSemicolonPairs, ParseSpaceVersions:
		e.parse, e.pairSep = parseCSVPairs, ","
		sep := ",="
		switch s.Parse {
		case ParseSpaceVersions:
			e.parse = parseSpaceVersions
			sep = ", \t"
		case ParseSemicolonPairs:
			e.pairSep = ";"
			sep = ";="
		}
		if s.SigKey == "" {
			errs.add("sig_key", "is required for parse %s", s.Parse)
		} else if strings.ContainsAny(s.SigKey, sep+" \t") {
			errs.add("sig_key", "must not contain separators (%q), got %q", sep, s.SigKey)
		}
	default:
		errs.add("parse", "must be one of whole, csv_pairs, semicolon_pairs, space_versions, got %q", s.Parse)
	}

	if s.TimestampKey != "" {
		switch {
		case s.Parse != ParseCSVPairs && s.Parse != ParseSemicolonPairs:
			errs.add("timestamp_key", "applies only to parse csv_pairs and semicolon_pairs")
		case strings.ContainsAny(s.TimestampKey, ",;= \t"):
			errs.add("timestamp_key", "must not contain separators, got %q", s.TimestampKey)
		case s.TimestampKey == s.SigKey:
			errs.add("timestamp_key", "must differ from sig_key")
		}
		if s.TimestampHeader != "" {
			errs.add("timestamp_header", "set together with timestamp_key; use one")
		}
	}
	if s.TimestampHeader != "" {
		if !validHeaderName(s.TimestampHeader) {
			errs.add("timestamp_header", "must be a header name (token characters), got %q", s.TimestampHeader)
		}
		e.tsHeader = textproto.CanonicalMIMEHeaderKey(s.TimestampHeader)
	}
	hasTS := s.TimestampKey != "" || s.TimestampHeader != ""

	parts, tmplHeaders, usesTS, err := compileTemplate(s.Signed)
	if err != nil {
		errs.add("signed", "%v", err)
	}
	e.parts, e.headers = parts, tmplHeaders
	switch {
	case err != nil:
	case usesTS && !hasTS:
		errs.add("signed", "uses {ts} but neither timestamp_header nor timestamp_key is set")
	case hasTS && !usesTS:
		errs.add("signed", "must use {ts} when a timestamp is configured (an unsigned timestamp gives no replay protection)")
	}
	e.timestamped = hasTS

	if s.Hash == HashEd25519 {
		e.pub = decodePublicKeys(s.PublicKeys, s.SecretDecode, errs)
		if len(s.Secrets) > 0 {
			errs.add("secret", "is not used with hash ed25519 (it verifies with public_key)")
		}
		return e
	}
	if len(s.PublicKeys) > 0 {
		errs.add("public_key", "applies only to asymmetric schemes (hash ed25519), not an HMAC")
	}
	e.keys = decodeSecrets(s.Secrets, s.SecretDecode, errs)
	return e
}

// decodeSecrets returns the HMAC keys for secrets, adding a problem per
// secret that is empty or cannot be decoded. Messages never include the
// secret.
func decodeSecrets(secrets []string, decode string, errs *specErrors) [][]byte {
	return decodeKeys("secret", secrets, decode, errs)
}

// decodePublicKeys returns the Ed25519 public keys, adding a problem per key
// that is empty, cannot be decoded or is not 32 bytes.
func decodePublicKeys(keys []string, decode string, errs *specErrors) []ed25519.PublicKey {
	switch decode {
	case KeyHex, SecretBase64, KeyWhpkBase64:
	default:
		errs.add("secret_decode", "must be one of hex, base64, whpk_base64 for public keys, got %q", decode)
		return nil
	}
	raw := decodeKeys("public_key", keys, decode, errs)
	out := make([]ed25519.PublicKey, 0, len(raw))
	for i, k := range raw {
		if len(k) != ed25519.PublicKeySize {
			errs.add(fmt.Sprintf("public_key[%d]", i), "an Ed25519 public key is %d bytes, this one decodes to %d", ed25519.PublicKeySize, len(k))
			continue
		}
		out = append(out, ed25519.PublicKey(k))
	}
	return out
}

// decodeKeys decodes secrets or public keys (named field in messages).
func decodeKeys(field string, secrets []string, decode string, errs *specErrors) [][]byte {
	if field == "public_key" {
		goto count
	}
	switch decode {
	case SecretRaw, SecretBase64, SecretWhsecBase64:
	default:
		errs.add("secret_decode", "must be one of none, base64, whsec_base64, got %q", decode)
		return nil
	}
count:
	switch n := len(secrets); {
	case n == 0:
		errs.add(field, "at least one %s is required", strings.ReplaceAll(field, "_", " "))
	case n > MaxSecrets:
		errs.add(field, "must have at most %d entries, got %d", MaxSecrets, n)
	}
	keys := make([][]byte, 0, len(secrets))
	for i, sec := range secrets {
		field := fmt.Sprintf("%s[%d]", field, i)
		if sec == "" {
			errs.add(field, "must not be empty")
			continue
		}
		var key []byte
		switch decode {
		case SecretRaw:
			key = []byte(sec)
		case KeyHex:
			k, err := hex.DecodeString(sec)
			if err != nil {
				errs.add(field, "key is not hex")
				continue
			}
			key = k
		case SecretBase64, SecretWhsecBase64, KeyWhpkBase64:
			b64 := sec
			switch decode {
			case SecretWhsecBase64:
				b64 = strings.TrimPrefix(sec, whsecPrefix)
			case KeyWhpkBase64:
				b64 = strings.TrimPrefix(sec, whpkPrefix)
			}
			k, ok := decodeBase64(b64)
			if !ok {
				what := "standard base64"
				switch decode {
				case SecretWhsecBase64:
					what = `"whsec_" followed by standard base64`
				case KeyWhpkBase64:
					what = `"whpk_" followed by standard base64`
				}
				errs.add(field, "%s is not %s (secret_decode %s)", strings.ReplaceAll(strings.Split(field, "[")[0], "_", " "), what, decode)
				continue
			}
			if len(k) == 0 {
				errs.add(field, "secret decodes to no bytes")
				continue
			}
			key = k
		}
		keys = append(keys, key)
	}
	return keys
}

// decodeBase64 decodes the standard alphabet, padded or unpadded; any other
// character (including white space) fails.
func decodeBase64(s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if !isBase64Char(s[i]) {
			return nil, false
		}
	}
	enc := base64.RawStdEncoding
	if strings.HasSuffix(s, "=") {
		enc = base64.StdEncoding
	}
	b, err := enc.DecodeString(s)
	return b, err == nil
}

func isBase64Char(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

// validHeaderName reports whether name is an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// hashFunc is the shape of sha256.New and friends.
type hashFunc = func() hash.Hash
