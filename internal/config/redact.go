package config

import (
	"bytes"
	"encoding/json"
	"net/url"
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
		"node.roles[]",
		"http.ip",
		"http.routing",
		"http.prefix",
		"admin.ip",
		"log.level",
		"log.format",
		"wal.type",
		"dedupe.scope",
		"sources.*.tenant",
		"sources.*.verify.type",
		"sources.*.dedupe.preset",
		"sources.*.dedupe.header",
		"sources.*.dedupe.json",
		"sources.*.sinks[].id",
		"sources.*.sinks[].type",
	}
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
	allow := make([][]string, 0, 32)
	for _, p := range shownInClear() {
		allow = append(allow, strings.Split(p, "."))
	}
	redactTree(tree, nil, allow)
	return tree
}

// redactTree rewrites v in place and returns it. path holds one segment per
// map key; list items add "[]" to their parent's segment, so patterns never
// depend on indexes.
func redactTree(v any, path []string, allow [][]string) any {
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
		if !slices.ContainsFunc(allow, func(p []string) bool { return matchPath(p, path) }) {
			return redacted
		}
		return redactURL(x)
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

// redactURL hides the password and every query value of an absolute URL and
// returns anything else unchanged. It rebuilds the string by hand because
// url.URL.String would percent-encode "[REDACTED]".
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || (u.Host == "" && u.User == nil) {
		return s
	}
	_, hasPass := u.User.Password()
	if !hasPass && u.RawQuery == "" {
		return s
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	if u.User != nil {
		b.WriteString(url.User(u.User.Username()).String())
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
		b.WriteString("#" + u.EscapedFragment())
	}
	return b.String()
}
