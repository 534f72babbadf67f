package config

import (
	"bytes"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

const redacted = "[REDACTED]"

// shownInClear lists the dotted key patterns whose string values are not
// secret. It is an allowlist on purpose: a key added later is redacted until
// someone decides it is safe to show. "*" matches one map key (a source
// id); "[]" marks a list item.
func shownInClear() []string {
	return []string{
		"node.instance",
		"node.data_dir",
		"backup.primary",
		"backup.secondary",
		"backup.prefix",
		"archive.url",
		"intake.kafka.brokers[]",
		"intake.kafka.topic",
		"intake.kafka.sasl.mechanism",
		"intake.kafka.sasl.username",
		"intake.kafka.tls.ca_file",
		"intake.kafka.tls.cert_file",
		"intake.kafka.tls.key_file",
		"intake.jetstream.url",
		"intake.jetstream.stream",
		"intake.jetstream.user",
		"intake.jetstream.creds_file",
		"intake.jetstream.nkey_file",
		"node.roles[]",
		"http.ip",
		"http.routing",
		"http.prefix",
		"admin.ip",
		"admin.open[]",
		"retention.delivered",
		"admin.tls.cert_file", // paths, not the files' contents
		"admin.tls.key_file",
		"admin.tls.client_ca_file",
		"http.tls.cert_file",
		"http.tls.key_file",
		// Names and roles of the operator tokens; token and token_sha256
		// are not listed, so they are hidden.
		"admin.tokens[].name",
		"admin.tokens[].role",
		"log.level",
		"log.format",
		"wal.type",
		"intake.type",
		"intake.node_id",
		"intake.fleet",
		"intake.memory.path",
		"dedupe.scope",
		"fleet.redis.url", // shown without its password (redactURL)
		"fleet.key_prefix",
		"sources.*.tenant",
		"sources.*.tenants[]",
		"sources.*.verify.type",
		// The scheme's shape: header names, templates, enums. Only the
		// secret (not listed) is hidden.
		"sources.*.verify.signature_header",
		"sources.*.verify.parse",
		"sources.*.verify.sig_prefix",
		"sources.*.verify.sig_key",
		"sources.*.verify.timestamp_key",
		"sources.*.verify.signed",
		"sources.*.verify.hash",
		"sources.*.verify.encoding",
		"sources.*.verify.secret_decode",
		"sources.*.verify.timestamp_header",
		// Public keys and the public URL are not secret (verify_token is).
		"sources.*.verify.public_key[]",
		"sources.*.verify.public_url",
		"sources.*.handshake",
		"sources.*.on_verify_failure",
		"source_store.type",
		"rate_limits.unlisted_tenants",
		"sources.*.dedupe.preset",
		"sources.*.dedupe.header",
		"sources.*.dedupe.json",
		"sources.*.sinks[].id",
		"sources.*.sinks[].type",
		// http: the URL only. Header values and the secret stay hidden;
		// header names are map keys, and keys are always shown.
		"sources.*.sinks[].http.url",
		"sources.*.sinks[].kafka.brokers[]",
		"sources.*.sinks[].kafka.topic",
		"sources.*.sinks[].kafka.sasl.mechanism",
		"sources.*.sinks[].kafka.sasl.username",
		"sources.*.sinks[].kafka.tls.ca_file",
		"sources.*.sinks[].kafka.tls.cert_file",
		"sources.*.sinks[].kafka.tls.key_file", // a path, not the key
		"sources.*.sinks[].nats.url",
		"sources.*.sinks[].nats.subject",
		"sources.*.sinks[].nats.user",
		"sources.*.sinks[].nats.creds_file",
		"sources.*.sinks[].nats.nkey_file",
		"sources.*.sinks[].rabbitmq.url",
		"sources.*.sinks[].rabbitmq.exchange",
		"sources.*.sinks[].rabbitmq.routing_key",
		// Header names only.
		"sources.*.sinks[].kafka.drop_headers[]",
		"sources.*.sinks[].nats.drop_headers[]",
		"sources.*.sinks[].rabbitmq.drop_headers[]",
	}
}

// listIndexRE matches a list index in a dotted key ("sinks[2]").
var listIndexRE = regexp.MustCompile(`\[\d+\]`)

// shownInClearKey reports whether the dotted key (as the loader names it,
// with list indexes) is one of shownInClear's: only such a key's value may
// be repeated in an error. A map key holding a "." never matches, so it is
// treated as secret.
func shownInClearKey(key string) bool {
	segs := strings.Split(listIndexRE.ReplaceAllString(key, "[]"), ".")
	for _, p := range shownInClear() {
		pat := strings.Split(p, ".")
		if len(pat) != len(segs) {
			continue
		}
		match := true
		for i := range pat {
			if pat[i] != "*" && pat[i] != segs[i] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// shownAs overrides how an allowlisted value is shown; the default is
// redactURL. Sink URLs always parse in a validated config, so one that does
// not is hidden whole rather than shown with its password in an unknown
// place.
func shownAs() map[string]func(string) string {
	return map[string]func(string) string{
		"sources.*.sinks[].http.url":     redactTokenURL,
		"sources.*.sinks[].rabbitmq.url": redactURLStrict,
		"sources.*.sinks[].nats.url":     redactNATSURLs,
		// The same form as the NATS sink's: a list, and nats://TOKEN@host.
		"intake.jetstream.url": redactNATSURLs,
		// A template such as v0:{ts}:{body} parses as a URL with scheme
		// v0; nothing here is a URL, so it is shown as written.
		"sources.*.verify.signed":     asIs,
		"sources.*.verify.sig_prefix": asIs,
	}
}

// allowRule is one parsed entry of shownInClear.
type allowRule struct {
	pattern []string
	show    func(string) string
}

// Redacted returns the effective configuration as a JSON-ready tree for
// GET /v1/config. String values are shown only on allowlisted keys; every
// other string becomes "[REDACTED]". Even allowlisted values that are URLs
// lose their password and query values, since credentials end up there in
// practice. Numbers and booleans are shown: no secret is numeric today.
func (c *Config) Redacted() map[string]any {
	raw, err := json.Marshal(c)
	if err != nil {
		// Config holds only plain types, so this cannot happen; an HTTP
		// handler is still better served by a marked value than a panic.
		return map[string]any{"error": "config: marshal: " + err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep 64-bit sizes exact
	var tree map[string]any
	if err := dec.Decode(&tree); err != nil {
		return map[string]any{"error": "config: unmarshal: " + err.Error()}
	}
	overrides := shownAs()
	allow := make([]allowRule, 0, 48)
	for _, p := range shownInClear() {
		show := overrides[p]
		if show == nil {
			show = redactURL
		}
		allow = append(allow, allowRule{strings.Split(p, "."), show})
	}
	redactTree(tree, nil, allow)
	return tree
}

// redactTree rewrites v in place and returns it. path holds one segment per
// map key; list items add "[]" to their parent's segment, so patterns never
// depend on indexes. Map keys themselves (source ids, HTTP header names)
// are always shown; only string values are redacted.
func redactTree(v any, path []string, allow []allowRule) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = redactTree(e, append(slices.Clip(path), k), allow)
		}
	case []any:
		item := slices.Clone(path)
		if len(item) > 0 {
			item[len(item)-1] += "[]"
		}
		for i, e := range x {
			x[i] = redactTree(e, item, allow)
		}
	case string:
		i := slices.IndexFunc(allow, func(r allowRule) bool { return matchPath(r.pattern, path) })
		if i < 0 {
			return redacted
		}
		return allow[i].show(x)
	}
	return v
}

func matchPath(pattern, path []string) bool {
	if len(pattern) != len(path) {
		return false
	}
	for i := range pattern {
		if pattern[i] != "*" && pattern[i] != path[i] {
			return false
		}
	}
	return true
}

func asIs(s string) string { return s }

// redactURL hides the password and every query value of an absolute URL and
// returns anything else unchanged.
func redactURL(s string) string { return hideURLSecrets(s, false) }

// redactURLStrict is redactURL for values that must be URLs: one that does
// not parse is hidden whole.
func redactURLStrict(s string) string {
	if _, err := url.Parse(s); err != nil {
		return redacted
	}
	return redactURL(s)
}

// redactTokenURL is redactURLStrict that also hides a user name standing
// alone: in https://key@host (basic auth without a password) and
// nats://token@host, it is the credential.
func redactTokenURL(s string) string {
	if _, err := url.Parse(s); err != nil {
		return redacted
	}
	return hideURLSecrets(s, true)
}

// redactNATSURLs applies redactTokenURL to each URL of a comma-separated
// list.
func redactNATSURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactTokenURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// hideURLSecrets hides the password, every query value and the fragment
// of an absolute URL, and the user name too when it stands alone and userIsSecret (a
// token). Anything else is returned unchanged. It rebuilds the string by
// hand because url.URL.String would percent-encode "[REDACTED]".
func hideURLSecrets(s string, userIsSecret bool) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || (u.Host == "" && u.User == nil) {
		return s
	}
	_, hasPass := u.User.Password()
	hideUser := userIsSecret && u.User != nil && !hasPass
	if !hasPass && !hideUser && u.RawQuery == "" && u.Fragment == "" {
		return s
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	if u.User != nil {
		if hideUser {
			b.WriteString(redacted)
		} else {
			b.WriteString(url.User(u.User.Username()).String())
		}
		if hasPass {
			b.WriteString(":" + redacted)
		}
		b.WriteString("@")
	}
	b.WriteString(u.Host)
	b.WriteString(u.EscapedPath())
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, kv := range pairs {
			k, _, _ := strings.Cut(kv, "=")
			pairs[i] = k + "=" + redacted
		}
		b.WriteString("?" + strings.Join(pairs, "&"))
	}
	if u.Fragment != "" {
		// Like a query, a fragment is where a secret ends up in practice.
		b.WriteString("#" + redacted)
	}
	return b.String()
}
