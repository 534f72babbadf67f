package config

import (
	"encoding/json"
	"fmt"
	"strings"
)

// apiSourceKey stands for an API-managed source's id while its block is
// validated, defaulted or redacted: such ids are "<tenant>.<name>", which
// the config's source id rule refuses, and the block rules do not depend on
// the id. It matches that rule and cannot be confused with a real id in a
// message, since every API id holds a '.'.
const apiSourceKey = "api_source_under_validation"

// ValidateSource checks one source block with the rules Validate applies to
// sources.<id>, in the context of c (a source that quarantines, say, is
// checked against c's quarantine and http limits). Keys in the returned
// Errors are "sources.<id>…" as for a config file.
//
// id is either a config source id or an API source id "<tenant>.<name>",
// whose tenant and name must each match [A-Za-z0-9_-]{1,64}. It returns nil
// or Errors; only the violations the block causes are reported, never those
// already in c. Defaults are not applied: see WithDefaults.
func (c *Config) ValidateSource(id string, s SourceConfig) error {
	var errs Errors
	vid := id
	if tenant, name, api := strings.Cut(id, "."); api {
		vid = apiSourceKey
		if !tenantIDRE.MatchString(tenant) {
			errs = append(errs, &Error{Key: "sources." + id, Rule: fmt.Sprintf("tenant must match [A-Za-z0-9_-]{1,64}, got %q", tenant)})
		}
		if !sourceIDRE.MatchString(name) {
			errs = append(errs, &Error{Key: "sources." + id, Rule: fmt.Sprintf("name must match [A-Za-z0-9_-]{1,64}, got %q", name)})
		}
	}

	// The same config without any source: whatever it reports is not the
	// block's doing.
	base := *c
	base.Sources = nil
	base.SourceStore.Type = SourceStorePersistent
	known := map[string]bool{}
	if err := base.Validate(); err != nil {
		for _, e := range asErrors(err) {
			known[e.Key+"\x00"+e.Rule] = true
		}
	}

	with := base
	with.Sources = map[string]SourceConfig{vid: s}
	if err := with.Validate(); err != nil {
		for _, e := range asErrors(err) {
			if known[e.Key+"\x00"+e.Rule] {
				continue
			}
			key, rule := e.Key, e.Rule
			if vid != id {
				if rest, ok := strings.CutPrefix(key, "sources."+vid); ok && (rest == "" || rest[0] == '.') {
					key = "sources." + id + rest
				}
				rule = strings.ReplaceAll(rule, vid, id)
			}
			errs = append(errs, &Error{Key: key, Rule: rule})
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

func asErrors(err error) Errors {
	if es, ok := err.(Errors); ok {
		return es
	}
	return Errors{{Key: "", Rule: err.Error()}}
}

// WithDefaults returns a deep copy of s with every key the loader would
// default filled in, for a block that did not come from YAML (the operator
// API's JSON). A zero value counts as absent: verify.type "" becomes none,
// a nil tolerance 300, on_verify_failure reject, dedupe.ttl_seconds 0 the
// default TTL, a sink id "" its type, a sink timeout 0 its default. s itself
// is not modified.
func (s SourceConfig) WithDefaults() SourceConfig {
	cp := s.clone()
	p := "sources." + apiSourceKey
	given := map[string]bool{
		p + ".verify.type":              cp.Verify.Type != "",
		p + ".verify.tolerance_seconds": cp.Verify.ToleranceSeconds != nil,
		p + ".on_verify_failure":        cp.OnVerifyFailure != "",
	}
	if d := cp.Dedupe; d != nil {
		given[p+".dedupe.ttl_seconds"] = d.TTLSeconds != 0
	}
	for i, k := range cp.Sinks {
		sp := fmt.Sprintf("%s.sinks[%d]", p, i)
		given[sp+".id"] = k.ID != ""
		if k.HTTP != nil {
			given[sp+".http.timeout_ms"] = k.HTTP.TimeoutMs != 0
		}
		if k.Kafka != nil {
			given[sp+".kafka.timeout_ms"] = k.Kafka.TimeoutMs != 0
		}
		if k.NATS != nil {
			given[sp+".nats.timeout_ms"] = k.NATS.TimeoutMs != 0
		}
		if k.RabbitMQ != nil {
			given[sp+".rabbitmq.timeout_ms"] = k.RabbitMQ.TimeoutMs != 0
		}
	}
	c := &Config{Sources: map[string]SourceConfig{apiSourceKey: cp}}
	// Keys outside the block are reported as given, so nothing else is
	// touched (no hostname lookup, no intake defaults).
	applyDefaults(c, func(key string) bool {
		g, ok := given[key]
		return !ok || g
	})
	return c.Sources[apiSourceKey]
}

// clone deep-copies s through its JSON form: every field has a JSON tag and
// only plain types, so the round trip is exact.
func (s SourceConfig) clone() SourceConfig {
	raw, err := json.Marshal(s)
	if err != nil {
		panic("config: marshal SourceConfig: " + err.Error()) // plain types only: cannot happen
	}
	var out SourceConfig
	if err := json.Unmarshal(raw, &out); err != nil {
		panic("config: unmarshal SourceConfig: " + err.Error())
	}
	return out
}

// Redacted is the block as GET /v1/config would show it under sources.<id>:
// verify secrets, sink secrets, passwords, tokens and header values are
// "[REDACTED]", and URLs lose their credentials and query values.
func (s SourceConfig) Redacted() map[string]any {
	c := &Config{Sources: map[string]SourceConfig{apiSourceKey: s}}
	tree := c.Redacted()
	srcs, _ := tree["sources"].(map[string]any)
	out, _ := srcs[apiSourceKey].(map[string]any)
	if out == nil {
		if e, ok := tree["error"]; ok {
			return map[string]any{"error": e}
		}
		return map[string]any{}
	}
	return out
}
