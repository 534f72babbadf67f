package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/ankusa/ankusa/internal/verify"
)

// Ranges of the edge keys (verification, quarantine, rate limits).
const (
	minToleranceSeconds = 1
	maxToleranceSeconds = 86_400

	minQuarantineMaxBytes = 1 << 20
	maxQuarantineMaxBytes = 1 << 40
	minQuarantineRate     = 0.1
	maxQuarantineRate     = 10_000
	minQuarantineBurst    = 1
	maxQuarantineBurst    = 100_000

	minRateLimitRate  = 0.01
	maxRateLimitRate  = 1_000_000
	minRateLimitBurst = 1
	maxRateLimitBurst = 10_000_000
)

var (
	onVerifyFailures = []string{OnVerifyFailureReject, OnVerifyFailureQuarantine, OnVerifyFailureAcceptFlag}
	sourceStoreTypes = []string{SourceStoreStatic, SourceStorePersistent}
	// tenantIDRE is the tenant alphabet of the ingest contract.
	tenantIDRE = sourceIDRE
)

// validateSourceVerify checks sources.<id>.verify and on_verify_failure. p
// is "sources.<id>". The scheme itself is checked by the engine: the Spec
// is built and verify.New run on it, and each *verify.SpecError becomes an
// Error at p.verify.<Field>, so a config that loads always yields a
// verifier (a bad secret refuses boot, naming the source).
func validateSourceVerify(v *validator, p string, s SourceConfig) {
	vp := p + ".verify"
	vc := s.Verify

	// Checked under every type, like the other ranges.
	if t := vc.ToleranceSeconds; t != nil {
		intRange(v, vp+".tolerance_seconds", *t, minToleranceSeconds, maxToleranceSeconds)
	}
	// A stray newline from a secret file would make every request fail
	// with no_match (raw secrets) or read as bad base64: say so instead.
	for i, sec := range vc.Secret {
		if sec != "" && strings.TrimFunc(sec, unicode.IsSpace) != sec {
			v.add(fmt.Sprintf("%s.secret[%d]", vp, i), "must not start or end with white space (often a stray newline from a secret file)")
		}
	}

	policy := s.OnVerifyFailure
	if policy != "" { // "" is reject, for configs built in Go
		v.oneOf(p+".on_verify_failure", policy, onVerifyFailures, nil, "")
	}

	if !v.oneOf(vp+".type", vc.Type, verify.Types(), nil, "") {
		return // the engine would only repeat it
	}
	if vc.VerifyToken != "" && vc.Type != "meta" {
		v.add(vp+".verify_token", "applies only to type meta (the token of Meta's subscription handshake)")
	}
	if h := s.Handshake; h != "" {
		v.oneOf(p+".handshake", h, []string{HandshakeAuto, HandshakeNone, HandshakeMSGraph}, nil,
			"the provider handshakes of slack, zoom, meta, discord and dropbox follow verify.type under auto")
	}
	if vc.Type == verify.TypeNone {
		// The engine ignores everything under none. A secret or scheme key
		// there is almost surely a forgotten type, which would accept every
		// request unverified: refuse it.
		if len(vc.Secret) > 0 {
			v.add(vp+".secret", "type none verifies nothing, so a secret would be ignored: set verify.type to the secret's scheme, or remove the secret")
		}
		if len(vc.PublicKey) > 0 {
			v.add(vp+".public_key", "type none verifies nothing, so a public key would be ignored: set verify.type to the key's scheme, or remove it")
		}
		if vc.PublicURL != "" {
			v.add(vp+".public_url", "applies only to types square and twilio (type is none)")
		}
		for _, f := range vc.hmacFields() {
			v.add(vp+"."+f, "applies only to type hmac (type is none)")
		}
		if policy != "" && policy != OnVerifyFailureReject && v.ok(p+".on_verify_failure") {
			v.add(p+".on_verify_failure", "%s needs a signing scheme: under verify.type none no request fails verification", policy)
		}
		return
	}

	_, err := verify.New(vc.Spec())
	if err == nil {
		return
	}
	for _, e := range specErrors(err) {
		var se *verify.SpecError
		if !errors.As(e, &se) {
			v.add(vp, "%s", ruleText(e.Error()))
			continue
		}
		key := vp + "." + se.Field
		if v.bad[key] {
			continue // already reported by the config's own rule
		}
		v.add(key, "%s", ruleText(se.Msg))
	}
}

// specErrors lists the errors joined in err (verify.New joins one per
// problem).
func specErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// ruleText keeps an engine message on one Error: "; " separates Errors.
func ruleText(msg string) string { return strings.ReplaceAll(msg, "; ", ", ") }

// validateQuarantine checks the quarantine root. A hook that can never fit
// in the pen is refused only when some source quarantines: the block is
// unused otherwise.
func (c *Config) validateQuarantine(v *validator) {
	q := c.Quarantine
	intRange(v, "quarantine.max_bytes", q.MaxBytes, minQuarantineMaxBytes, maxQuarantineMaxBytes)
	floatRange(v, "quarantine.rate", q.Rate, minQuarantineRate, maxQuarantineRate)
	intRange(v, "quarantine.burst", q.Burst, minQuarantineBurst, maxQuarantineBurst)

	var users []string
	for _, id := range sortedKeys(c.Sources) {
		if c.Sources[id].OnVerifyFailure == OnVerifyFailureQuarantine {
			users = append(users, id)
		}
	}
	if len(users) > 0 && v.ok("quarantine.max_bytes", "http.max_body_bytes") && q.MaxBytes < c.HTTP.MaxBodyBytes {
		v.add("quarantine.max_bytes", "must be at least http.max_body_bytes (%d) when a source quarantines (%s), got %d",
			c.HTTP.MaxBodyBytes, strings.Join(users, ", "), q.MaxBytes)
	}
}

// validateRateLimits checks the rate_limits root.
func (c *Config) validateRateLimits(v *validator) {
	r := c.RateLimits
	v.oneOf("rate_limits.unlisted_tenants", r.UnlistedTenants, []string{UnlistedTenantsShared, UnlistedTenantsOwn}, nil, "")
	if d := r.Default; d != nil {
		rateLimit(v, "rate_limits.default", *d)
	}
	for _, t := range sortedKeys(r.Tenants) {
		p := "rate_limits.tenants." + t
		if !tenantIDRE.MatchString(t) {
			v.add(p, "tenant id must match [A-Za-z0-9_-]{1,64}")
		}
		rateLimit(v, p, r.Tenants[t])
	}
}

func rateLimit(v *validator, p string, l RateLimit) {
	if l.Rate == 0 {
		v.add(p+".rate", "required: requests per second, %s to %s (omit the limit for no limit)",
			formatFloat(minRateLimitRate), formatFloat(maxRateLimitRate))
	} else {
		floatRange(v, p+".rate", l.Rate, minRateLimitRate, maxRateLimitRate)
	}
	intRange(v, p+".burst", l.Burst, minRateLimitBurst, maxRateLimitBurst)
}

func (c *Config) validateSourceStore(v *validator) {
	v.oneOf("source_store.type", c.SourceStore.Type, sourceStoreTypes, nil, "")
}

// floatRange is intRange for rates. NaN and the infinities are refused
// (they compare false with everything).
func floatRange(v *validator, key string, got, lo, hi float64) {
	if math.IsNaN(got) || !(got >= lo && got <= hi) {
		v.add(key, "must be between %s and %s, got %s", formatFloat(lo), formatFloat(hi), formatFloat(got))
	}
}

// formatFloat writes 1000000 rather than 1e+06.
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
