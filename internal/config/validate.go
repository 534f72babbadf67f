package config

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

var (
	sourceIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	sinkIDRE   = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	// headerRE is an RFC 9110 field name (token).
	headerRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// Validate checks every rule and returns all violations as Errors, or nil.
// It does not stop at the first one: an operator should fix the file once.
func (c *Config) Validate() error {
	v := &validator{bad: map[string]bool{}}
	c.validateNode(v)
	c.validateListeners(v)
	v.oneOf("log.level", c.Log.Level, []string{"debug", "info", "warn", "error"}, nil, "")
	v.oneOf("log.format", c.Log.Format, []string{"text", "json"}, nil, "")
	c.validateBatcher(v)
	v.oneOf("wal.type", c.WAL.Type, []string{"disk", "dual", "none"}, nil, "")
	c.validateIntake(v)
	c.validateBackup(v)
	c.validateFleet(v)
	intRange(v, "dedupe.sweep_interval_ms", c.Dedupe.SweepIntervalMs, 1_000, 3_600_000)
	intRange(v, "dedupe.sweep_batch", c.Dedupe.SweepBatch, 1, 100_000)
	c.validateDispatch(v)
	c.validateRetry(v)
	c.validateRetention(v)
	c.validateArchive(v)
	c.validateSourceStore(v)
	c.validateSources(v)
	c.validateQuarantine(v)
	c.validateRateLimits(v)
	if len(v.errs) == 0 {
		return nil // not a nil Errors: callers compare err != nil
	}
	return v.errs
}

func (c *Config) validateNode(v *validator) {
	n := c.Node
	switch {
	case n.Instance == "":
		v.add("node.instance", "must not be empty")
	case len(n.Instance) > 255:
		v.add("node.instance", "must be at most 255 bytes, got %d", len(n.Instance))
	case strings.ContainsFunc(n.Instance, unicode.IsControl):
		v.add("node.instance", "must not contain control characters, got %q", n.Instance)
	}
	if n.DataDir == "" {
		v.add("node.data_dir", "must not be empty")
	}
	if len(n.Roles) == 0 {
		v.add("node.roles", "must list at least one role (ingest|dispatch)")
	}
	for i, r := range n.Roles {
		key := fmt.Sprintf("node.roles[%d]", i)
		if v.oneOf(key, r, []string{"ingest", "dispatch"}, nil, "") && slices.Index(n.Roles, r) < i {
			v.add(key, "duplicate role %q", r)
		}
	}
}

func (c *Config) validateListeners(v *validator) {
	h := c.HTTP
	httpIP := v.ip("http.ip", h.IP)
	intRange(v, "http.port", h.Port, 0, 65535)
	v.oneOf("http.routing", h.Routing, []string{"path", "tenant_path"}, nil, "")
	switch {
	case !strings.HasPrefix(h.Prefix, "/"):
		v.add("http.prefix", "must start with \"/\", got %q", h.Prefix)
	case strings.HasSuffix(h.Prefix, "/"):
		v.add("http.prefix", "must not end with \"/\", got %q", h.Prefix)
	}
	intRange(v, "http.max_body_bytes", h.MaxBodyBytes, 1, 100_000_000)
	intRange(v, "http.max_header_bytes", h.MaxHeaderBytes, 1_024, 1_048_576)
	intRange(v, "http.read_timeout_ms", h.ReadTimeoutMs, 100, 600_000)
	if v.ok("http.max_body_bytes") {
		// One hook of the largest size must fit, or it is refused forever.
		intRange(v, "http.max_inflight_body_bytes", h.MaxInflightBodyBytes, h.MaxBodyBytes, 16<<30)
	}
	intRange(v, "http.max_conns", h.MaxConns, 1, 1_000_000)
	intRange(v, "http.max_conns_per_ip", h.MaxConnsPerIP, 0, 1_000_000)
	intRange(v, "http.idle_timeout_ms", h.IdleTimeoutMs, 1_000, 3_600_000)
	intRange(v, "http.shutdown_timeout_ms", h.ShutdownTimeoutMs, 100, 600_000)
	intRange(v, "node.fd_reserve", c.Node.FDReserve, 64, 1_000_000)

	a := c.Admin
	adminIP := v.ip("admin.ip", a.IP)
	intRange(v, "admin.port", a.Port, 0, 65535)
	intRange(v, "admin.read_timeout_ms", a.ReadTimeoutMs, 100, 600_000)
	intRange(v, "admin.idle_timeout_ms", a.IdleTimeoutMs, 1_000, 3_600_000)
	intRange(v, "admin.max_conns", a.MaxConns, 1, 100_000)
	c.validateAdminAccess(v, adminIP)

	// Port 0 asks the kernel for a free port, so two zeros never clash.
	if v.ok("http.ip", "http.port", "admin.ip", "admin.port") &&
		h.Port != 0 && h.Port == a.Port && addrsOverlap(httpIP, adminIP) {
		v.add("admin.port", "must differ from http.port (%d) on an overlapping IP (%s, %s)", h.Port, h.IP, a.IP)
	}
}

// addrsOverlap reports whether listeners on a and b with the same port
// would collide: same address, or a wildcard covering the other. "::" is
// dual-stack on Linux by default, so it covers IPv4 addresses too.
func addrsOverlap(a, b netip.Addr) bool {
	a, b = a.Unmap(), b.Unmap()
	if a == b {
		return true
	}
	covers := func(w, o netip.Addr) bool { return w.IsUnspecified() && (w.Is6() || o.Is4()) }
	return covers(a, b) || covers(b, a)
}

func (c *Config) validateBatcher(v *validator) {
	b := c.Batcher
	intRange(v, "batcher.partitions", b.Partitions, 1, 64)
	intRange(v, "batcher.max_batch", b.MaxBatch, 1, 10_000)
	intRange(v, "batcher.max_delay_ms", b.MaxDelayMs, 0, 1_000)
	intRange(v, "batcher.max_queue", b.MaxQueue, 1, 1_000_000)
	intRange(v, "batcher.max_queue_bytes", b.MaxQueueBytes, 1<<20, 16<<30)
	intRange(v, "batcher.deadline_ms", b.DeadlineMs, 100, 120_000)

	// A batch larger than the queue could never fill.
	if v.ok("batcher.max_batch", "batcher.max_queue") && b.MaxBatch > b.MaxQueue {
		v.add("batcher.max_batch", "must be at most batcher.max_queue (%d), got %d", b.MaxQueue, b.MaxBatch)
	}
	// A hook of the largest allowed size must fit in an empty queue, or it
	// would be refused forever.
	if v.ok("batcher.max_queue_bytes", "http.max_body_bytes") && b.MaxQueueBytes < c.HTTP.MaxBodyBytes {
		v.add("batcher.max_queue_bytes", "must be at least http.max_body_bytes (%d), got %d", c.HTTP.MaxBodyBytes, b.MaxQueueBytes)
	}
}

func (c *Config) validateDispatch(v *validator) {
	d := c.Dispatch
	intRange(v, "dispatch.concurrency", d.Concurrency, 1, 1_024)
	intRange(v, "dispatch.max_inflight", d.MaxInflight, 1, 100_000)
	intRange(v, "dispatch.max_inflight_bytes", d.MaxInflightBytes, 1<<20, 16<<30)
	intRange(v, "dispatch.attempt_timeout_ms", d.AttemptTimeoutMs, 100, 600_000)
	intRange(v, "dispatch.scan_batch", d.ScanBatch, 1, 10_000)
	intRange(v, "dispatch.poll_ms", d.PollMs, 10, 60_000)
	intRange(v, "dispatch.breaker_failures", d.BreakerFailures, 1, 1_000)
	intRange(v, "dispatch.breaker_cooldown_ms", d.BreakerCooldownMs, 100, 3_600_000)

	// Workers beyond the claimed rows would have nothing to deliver.
	if v.ok("dispatch.concurrency", "dispatch.max_inflight") && d.MaxInflight < d.Concurrency {
		v.add("dispatch.max_inflight", "must be at least dispatch.concurrency (%d), got %d", d.Concurrency, d.MaxInflight)
	}
	// No rule ties max_inflight_bytes to http.max_body_bytes: dispatch
	// always claims one delivery when none is in flight, whatever its size.
}

func (c *Config) validateRetry(v *validator) {
	r := c.Retry
	intRange(v, "retry.base_ms", r.BaseMs, 1, 3_600_000)
	intRange(v, "retry.max_ms", r.MaxMs, 1, 86_400_000)
	intRange(v, "retry.max_attempts", r.MaxAttempts, 1, 10_000)
	// The cap applies to the first delay too, so max_ms < base_ms would
	// silently replace base_ms.
	if v.ok("retry.base_ms", "retry.max_ms") && r.MaxMs < r.BaseMs {
		v.add("retry.max_ms", "must be at least retry.base_ms (%d), got %d", r.BaseMs, r.MaxMs)
	}
}

func (c *Config) validateSources(v *validator) {
	if len(c.Sources) == 0 {
		// Under persistent the operator API adds sources at run time.
		if c.SourceStore.Type != SourceStorePersistent {
			v.add("sources", "at least one source is required (or source_store.type: persistent, to add them through the operator API)")
		}
		return
	}
	for _, id := range sortedKeys(c.Sources) {
		s := c.Sources[id]
		p := "sources." + id
		if !sourceIDRE.MatchString(id) {
			v.add(p, "source id must match [A-Za-z0-9_-]{1,64}")
		}
		if s.Tenant != "" && !sourceIDRE.MatchString(s.Tenant) {
			v.add(p+".tenant", "must match [A-Za-z0-9_-]{1,64}, got %q", s.Tenant)
		}
		if len(s.Tenants) > 0 {
			switch {
			case s.Tenant != "":
				v.add(p+".tenants", "must be empty when tenant is set (a bound source answers its tenant only)")
			case c.HTTP.Routing != "tenant_path":
				v.add(p+".tenants", "applies only with http.routing: tenant_path, got routing %q", c.HTTP.Routing)
			}
			seenT := map[string]bool{}
			for i, t := range s.Tenants {
				switch {
				case !tenantIDRE.MatchString(t):
					v.add(fmt.Sprintf("%s.tenants[%d]", p, i), "must match [A-Za-z0-9_-]{1,64}, got %q", t)
				case seenT[t]:
					v.add(fmt.Sprintf("%s.tenants[%d]", p, i), "duplicate tenant %q", t)
				}
				seenT[t] = true
			}
		}

		validateSourceVerify(v, p, s)

		if d := s.Dedupe; d != nil {
			validateSourceDedupe(v, p+".dedupe", d)
			// No store, no dedupe rows: under none only fleet claims dedupe.
			if c.WAL.Type == "none" && c.Dedupe.Scope != "fleet" {
				v.add(p+".dedupe", "needs dedupe.scope: fleet when wal.type is none (there is no local store to hold the keys)")
			}
		}

		if len(s.Sinks) == 0 {
			v.add(p+".sinks", "at least one sink is required")
		}
		seen := map[string]int{}
		for i, k := range s.Sinks {
			sp := fmt.Sprintf("%s.sinks[%d]", p, i)
			typeOK := validateSink(v, sp, &k)
			if k.ID == "" && !typeOK {
				continue // the id defaults to the type, already reported
			}
			if !sinkIDRE.MatchString(k.ID) {
				v.add(sp+".id", "must match [a-z0-9_-]{1,32}, got %q", k.ID)
				continue
			}
			if j, dup := seen[k.ID]; dup {
				// Rule texts avoid "; ", the separator of Errors.
				v.add(sp+".id", "duplicate sink id %q, also used by sinks[%d] (an id defaults to the sink type)", k.ID, j)
				continue
			}
			seen[k.ID] = i
		}
	}
}

func validateSourceDedupe(v *validator, p string, d *SourceDedupe) {
	var set []string
	if d.Preset != "" {
		set = append(set, "preset")
	}
	if d.Header != "" {
		set = append(set, "header")
	}
	if d.JSON != "" {
		set = append(set, "json")
	}
	switch len(set) {
	case 0:
		v.add(p, "exactly one of preset, header, json is required, got none")
	case 1:
	default:
		v.add(p, "exactly one of preset, header, json is allowed, got %s", strings.Join(set, " and "))
	}
	if d.Preset != "" {
		v.oneOf(p+".preset", d.Preset, DedupePresets(), nil, "")
	}
	if d.Header != "" && !headerRE.MatchString(d.Header) {
		v.add(p+".header", "must be an HTTP header name, got %q", d.Header)
	}
	if d.JSON != "" && slices.Contains(strings.Split(d.JSON, "."), "") {
		v.add(p+".json", "must be a dotted path like data.id, got %q", d.JSON)
	}
	intRange(v, p+".ttl_seconds", d.TTLSeconds, 1, 31_536_000)
}

// validator accumulates violations and remembers which keys failed, so
// cross-key rules stay quiet when one side is already reported.
type validator struct {
	errs Errors
	bad  map[string]bool
}

func (v *validator) add(key, format string, args ...any) {
	v.errs = append(v.errs, &Error{Key: key, Rule: fmt.Sprintf(format, args...)})
	v.bad[key] = true
}

// ok reports whether none of keys has failed its own rule.
func (v *validator) ok(keys ...string) bool {
	for _, k := range keys {
		if v.bad[k] {
			return false
		}
	}
	return true
}

// oneOf checks an enum. later lists values that are planned but not shipped,
// which get a clearer message than a typo; note is appended to the generic
// message.
func (v *validator) oneOf(key, got string, allowed, later []string, note string) bool {
	if slices.Contains(allowed, got) {
		return true
	}
	supported := strings.Join(allowed, "|")
	switch {
	case got == "":
		v.add(key, "must be set (one of %s)", supported)
	case slices.Contains(later, got):
		v.add(key, "%q is not available yet (supported: %s)", got, supported)
	case note != "":
		v.add(key, "must be one of %s, got %q (%s)", supported, got, note)
	default:
		v.add(key, "must be one of %s, got %q", supported, got)
	}
	return false
}

func (v *validator) ip(key, s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		v.add(key, "must be an IP address, got %q", s)
	}
	return a
}

func intRange[T int | int64](v *validator, key string, got, lo, hi T) {
	if got < lo || got > hi {
		v.add(key, "must be between %d and %d, got %d", lo, hi, got)
	}
}

// DedupePresets are the accepted sources.<id>.dedupe.preset values; the
// dedupe package maps each to its header or JSON path (and tests that it
// knows every one).
func DedupePresets() []string {
	return []string{"github", "standard_webhooks", "svix", "shopify", "stripe",
		"slack", "discord", "twilio", "paddle", "linear", "square", "intercom", "gitlab", "pagerduty", "mailgun"}
}
