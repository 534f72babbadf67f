package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"time"
)

var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

// minTokenBytes is the shortest admin token accepted: 16 random bytes are
// beyond guessing, a short word is not.
const minTokenBytes = 16

// validateAdminAccess checks admin.tokens and admin.open, and the rule
// that an operator API reachable from other hosts has tokens. adminIP is
// admin.ip as validateListeners parsed it. Rules never quote a token.
func (c *Config) validateAdminAccess(v *validator, adminIP netip.Addr) {
	a := c.Admin
	names := map[string]bool{}
	for i, t := range a.Tokens {
		p := fmt.Sprintf("admin.tokens[%d]", i)
		switch {
		case !tokenNameRE.MatchString(t.Name):
			v.add(p+".name", "must match [A-Za-z0-9_.@-]{1,64}, got %q", t.Name)
		case names[t.Name]:
			v.add(p+".name", "duplicate token name %q", t.Name)
		}
		names[t.Name] = true
		switch {
		case t.Token == "" && t.TokenSHA256 == "":
			v.add(p, "must set token or token_sha256")
		case t.Token != "" && t.TokenSHA256 != "":
			v.add(p, "must set only one of token and token_sha256")
		case t.Token != "" && len(t.Token) < minTokenBytes:
			v.add(p+".token", "must be at least %d bytes, got %d", minTokenBytes, len(t.Token))
		case t.TokenSHA256 != "":
			if b, err := hex.DecodeString(t.TokenSHA256); err != nil || len(b) != 32 {
				v.add(p+".token_sha256", "must be 64 hex digits (the SHA-256 of the token)")
			}
		}
		v.oneOf(p+".role", t.Role, []string{AdminRoleRead, AdminRoleOperate}, nil, "")
	}
	for i, o := range a.Open {
		key := fmt.Sprintf("admin.open[%d]", i)
		if v.oneOf(key, o, AdminOpenRoutes(), nil, "") && slices.Index(a.Open, o) < i {
			v.add(key, "duplicate route %q", o)
		}
	}
	validateListenerTLS(v, "http.tls", c.HTTP.TLS)
	validateListenerTLS(v, "admin.tls", a.TLS.Listener())
	if a.TLS.ClientCAFile != "" && !a.TLS.Listener().Enabled() && v.ok("admin.tls.cert_file", "admin.tls.key_file") {
		v.add("admin.tls.client_ca_file", "needs admin.tls.cert_file and admin.tls.key_file (client certificates are asked for over TLS)")
	}
	// An open operator API can read every body and purge the quarantine
	// pen: only processes on this host may reach one.
	if len(a.Tokens) == 0 && v.ok("admin.ip") && !adminIP.Unmap().IsLoopback() {
		v.add("admin.ip", "is %s, not a loopback address: set admin.tokens (at least one token) or bind admin.ip to 127.0.0.1 / ::1", a.IP)
	}
}

// validateListenerTLS: the files are read when the listener starts (a
// missing or bad file then exits 78 naming the key); here only their
// pairing is checked.
func validateListenerTLS(v *validator, p string, t ListenerTLS) {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.add(p+".key_file", "required when %s.cert_file is set", p)
	case t.KeyFile != "" && t.CertFile == "":
		v.add(p+".cert_file", "required when %s.key_file is set", p)
	}
}

// validateRetention checks the history keys.
func (c *Config) validateRetention(v *validator) {
	r := c.Retention
	if d, err := parseRetention(string(r.Delivered)); err != nil {
		v.add("retention.delivered", "must be a duration such as 72h, 7d or 0, got %q", r.Delivered)
	} else if d < 0 || d > 365*24*time.Hour {
		v.add("retention.delivered", "must be between 0 and 365d, got %q", r.Delivered)
	}
	intRange(v, "retention.max_bytes", r.MaxBytes, 1<<20, 16<<40)
	intRange(v, "retention.sweep_interval_ms", r.SweepIntervalMs, 100, 3_600_000)
}
