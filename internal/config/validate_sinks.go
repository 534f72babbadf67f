package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// sinkTypes are the values of sinks[i].type. Every type but log has a block
// of the same name.
var sinkTypes = []string{"log", "http", "kafka", "nats", "rabbitmq"}

var (
	kafkaTopicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	hostLabelRE  = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$`)
)

// reservedHeaders are the outgoing headers the HTTP sink sets itself;
// x-ankusa-* is reserved as a whole (see reservedHeader).
var reservedHeaders = []string{
	"content-type", "content-length", "host",
	"webhook-id", "webhook-timestamp", "webhook-signature",
}

const (
	// minSecretBytes is the shortest HMAC key accepted for http.secret, in
	// either form: 128 bits.
	minSecretBytes = 16
	// maxAMQPShortStr bounds exchange names and routing keys (AMQP 0-9-1
	// shortstr).
	maxAMQPShortStr = 255
)

// validateSink checks one sink's type and blocks, and reports whether the
// type is valid. sp is the sink's dotted key, e.g. "sources.demo.sinks[0]".
//
// Exactly the block named by the type may be set. With a valid type, a
// foreign block is reported without checking its contents (it is going to
// be deleted or the type changed). With an invalid type the intended block
// is unknown, so every present block is checked.
func validateSink(v *validator, sp string, k *SinkConfig) bool {
	typeOK := v.oneOf(sp+".type", k.Type, sinkTypes, nil, "")
	blocks := []struct {
		name  string
		set   bool
		check func(p string)
	}{
		{"http", k.HTTP != nil, func(p string) { validateHTTPSink(v, p, k.HTTP) }},
		{"kafka", k.Kafka != nil, func(p string) { validateKafkaSink(v, p, k.Kafka) }},
		{"nats", k.NATS != nil, func(p string) { validateNATSSink(v, p, k.NATS) }},
		{"rabbitmq", k.RabbitMQ != nil, func(p string) { validateRabbitMQSink(v, p, k.RabbitMQ) }},
	}
	for _, b := range blocks {
		p := sp + "." + b.name
		switch {
		case typeOK && b.set && k.Type != b.name:
			v.add(p, "only allowed when type is %s (this sink's type is %s)", b.name, k.Type)
		case typeOK && !b.set && k.Type == b.name:
			v.add(p, "required when type is %s", b.name)
		case b.set:
			b.check(p)
		}
	}
	return typeOK
}

func validateHTTPSink(v *validator, p string, h *HTTPSink) {
	if msg, _ := checkURL(h.URL, redactTokenURL(h.URL), "http", "https"); msg != "" {
		v.add(p+".url", "%s", msg)
	}
	intRange(v, p+".timeout_ms", h.TimeoutMs, 100, 600_000)

	// Header names are map keys, so each one is its own dotted key. They
	// are visited sorted, so a case-insensitive duplicate is reported on
	// the same one every time.
	seen := map[string]string{}
	for _, name := range sortedKeys(h.Headers) {
		key := p + ".headers." + name
		lower := strings.ToLower(name)
		switch {
		case !headerRE.MatchString(name):
			v.add(key, "must be a valid HTTP header name (an RFC 9110 token), got %q", name)
		case reservedHeader(lower):
			v.add(key, "is set by Ankusa and cannot be configured")
		case seen[lower] != "":
			v.add(key, "duplicate of header %q (header names are case-insensitive)", seen[lower])
		default:
			seen[lower] = name
			// The value is not echoed: header values often carry tokens.
			if strings.ContainsFunc(h.Headers[name], func(r rune) bool { return r != '\t' && unicode.IsControl(r) }) {
				v.add(key, "value must not contain control characters (CR, LF, NUL…); tab is allowed")
			}
		}
	}

	if h.Secret != "" {
		if _, err := signingKey(h.Secret); err != nil {
			v.add(p+".secret", "%v", err)
		}
	}
}

func reservedHeader(lower string) bool {
	return strings.HasPrefix(lower, "x-ankusa-") || slices.Contains(reservedHeaders, lower)
}

// SigningKey returns the HMAC-SHA256 key of Secret: the base64-decoded part
// after "whsec_" (the Standard Webhooks form), else Secret's own bytes. It
// returns nil when no secret is set. A validated Config never makes it fail.
func (h *HTTPSink) SigningKey() ([]byte, error) {
	if h.Secret == "" {
		return nil, nil
	}
	return signingKey(h.Secret)
}

// signingKey decodes an http.secret. Its errors are rule texts and never
// contain the secret.
func signingKey(s string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(s, "whsec_"); ok {
		key, err := base64.StdEncoding.Strict().DecodeString(rest)
		switch {
		case err != nil:
			// A whsec_ value is never taken as a raw secret: a truncated
			// copy-paste must not silently become a different key.
			return nil, errors.New("must be whsec_ followed by standard base64 (with padding), the part after whsec_ does not decode")
		case len(key) < minSecretBytes:
			return nil, fmt.Errorf("must decode to at least %d bytes after whsec_, got %d", minSecretBytes, len(key))
		}
		return key, nil
	}
	switch {
	case len(s) < minSecretBytes:
		return nil, fmt.Errorf("must be at least %d bytes (or whsec_ followed by base64), got %d", minSecretBytes, len(s))
	case strings.TrimSpace(s) != s:
		return nil, errors.New("must not start or end with white space")
	}
	return []byte(s), nil
}

func validateKafkaSink(v *validator, p string, k *KafkaSink) {
	if len(k.Brokers) == 0 {
		v.add(p+".brokers", "at least one broker (host:port) is required")
	}
	seen := map[string]int{}
	for i, b := range k.Brokers {
		key := fmt.Sprintf("%s.brokers[%d]", p, i)
		if msg := checkHostPort(b); msg != "" {
			v.add(key, "%s", msg)
			continue
		}
		if j, dup := seen[b]; dup {
			v.add(key, "duplicate of brokers[%d] (%q)", j, b)
			continue
		}
		seen[b] = i
	}

	switch t := k.Topic; {
	case t == "":
		v.add(p+".topic", "must be set (an existing topic: Ankusa never creates one)")
	case t == "." || t == "..":
		v.add(p+".topic", "must not be %q (refused by Kafka)", t)
	case !kafkaTopicRE.MatchString(t):
		v.add(p+".topic", "must match [a-zA-Z0-9._-]{1,249}, got %q", t)
	}
	intRange(v, p+".timeout_ms", k.TimeoutMs, 100, 600_000)
	validateDropHeaders(v, p+".drop_headers", k.DropHeaders)

	if s := k.SASL; s != nil {
		sp := p + ".sasl"
		mechanisms := []string{"plain", "scram-sha-256", "scram-sha-512"}
		if slices.Contains(mechanisms, strings.ToLower(s.Mechanism)) && !slices.Contains(mechanisms, s.Mechanism) {
			v.add(sp+".mechanism", "must be one of %s, got %q (write it in lower case)", strings.Join(mechanisms, "|"), s.Mechanism)
		} else {
			v.oneOf(sp+".mechanism", s.Mechanism, mechanisms, nil, "")
		}
		if s.Username == "" {
			v.add(sp+".username", "required when sasl is set")
		}
		if s.Password == "" {
			v.add(sp+".password", "required when sasl is set")
		}
	}

	if t := k.TLS; t != nil {
		tp := p + ".tls"
		switch {
		case t.CertFile != "" && t.KeyFile == "":
			v.add(tp+".key_file", "required when tls.cert_file is set (a client certificate needs its key)")
		case t.KeyFile != "" && t.CertFile == "":
			v.add(tp+".cert_file", "required when tls.key_file is set (a client key needs its certificate)")
		}
		var set []string
		for _, f := range []struct {
			name string
			set  bool
		}{{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""}, {"insecure_skip_verify", t.InsecureSkipVerify}} {
			if f.set {
				set = append(set, f.name)
			}
		}
		if !t.Enabled && len(set) > 0 {
			verb, it := "is", "it"
			if len(set) > 1 {
				verb, it = "are", "they"
			}
			v.add(tp+".enabled", "must be true when %s %s set (%s would be ignored with TLS off)", strings.Join(set, " and "), verb, it)
		}
	}
}

// checkHostPort returns a rule text for a broker address that is not
// host:port, or "".
func checkHostPort(s string) string {
	host, port, err := net.SplitHostPort(s)
	switch {
	case err != nil && strings.Contains(s, "://"):
		return fmt.Sprintf("must be host:port without a scheme, got %q", s)
	case err != nil && !strings.Contains(s, ":"):
		return fmt.Sprintf("must be host:port (the port is missing), got %q", s)
	case err != nil:
		return fmt.Sprintf("must be host:port (IPv6 addresses in brackets), got %q", s)
	case !hostOK(host):
		return fmt.Sprintf("must be host:port with a valid host name or IP address, got %q", s)
	case !validPort(port):
		return fmt.Sprintf("must be host:port with a port between 1 and 65535, got %q", s)
	}
	return ""
}

// hostOK accepts an IP address or a DNS name. Underscores are allowed
// because container runtimes hand out names like kafka_1.
func hostOK(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if !hostLabelRE.MatchString(label) {
			return false
		}
	}
	return true
}

func validPort(s string) bool {
	if s == "" || len(s) > 5 || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		return false
	}
	n, _ := strconv.Atoi(s)
	return n >= 1 && n <= 65535
}

// checkURL returns a rule text when s is not an absolute URL with one of
// schemes and a host, or "" and the parsed URL. shown is how s may appear
// in the message (credentials hidden). It is used only once s is known to
// have a host: before that, the password cannot be located reliably
// ("user:pw@host" parses as scheme "user"), so s is not echoed.
func checkURL(s, shown string, schemes ...string) (string, *url.URL) {
	want := strings.Join(schemes, ":// or ") + "://"
	if s == "" {
		return fmt.Sprintf("must be set (an absolute %s URL)", want), nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("must be a valid %s URL (it does not parse: check the scheme, and percent-encode special characters in the user name and password)", want), nil
	case u.Scheme == "":
		return fmt.Sprintf("must start with %s, got no scheme", want), nil
	case !slices.Contains(schemes, u.Scheme) && u.Opaque != "" && validPort(u.Opaque):
		return fmt.Sprintf("must start with %s, got host:port without a scheme", want), nil
	case !slices.Contains(schemes, u.Scheme):
		return fmt.Sprintf("must start with %s, got scheme %q", want, u.Scheme), nil
	case u.Opaque != "" || u.Hostname() == "":
		return fmt.Sprintf("must be an absolute %s URL with a host, like %shost:port", want, schemes[0]+"://"), nil
	case u.Port() != "" && !validPort(u.Port()):
		return fmt.Sprintf("must have a port between 1 and 65535, got %q", shown), nil
	}
	return "", u
}

func validateNATSSink(v *validator, p string, n *NATSSink) {
	urlCreds := false
	var parts []string
	if n.URL == "" {
		v.add(p+".url", "must be set (a nats:// or tls:// URL, or a comma-separated list of them)")
	} else {
		parts = strings.Split(n.URL, ",")
	}
	for i, part := range parts {
		part = strings.TrimSpace(part)
		entry := ""
		if len(parts) > 1 {
			entry = fmt.Sprintf("entry %d of the list ", i+1)
		}
		if part == "" {
			v.add(p+".url", "%smust not be empty", entry)
			continue
		}
		msg, u := checkURL(part, redactTokenURL(part), "nats", "tls")
		if msg != "" {
			v.add(p+".url", "%s%s", entry, msg)
			continue
		}
		urlCreds = urlCreds || u.User != nil
	}

	switch s := n.Subject; {
	case s == "":
		v.add(p+".subject", "must be set (a subject covered by an existing JetStream stream)")
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		v.add(p+".subject", "must not contain white space or control characters, got %q", s)
	case strings.ContainsAny(s, "*>"):
		v.add(p+".subject", "must not contain wildcards (* or >): a publish needs one concrete subject, got %q", s)
	case slices.Contains(strings.Split(s, "."), ""):
		v.add(p+".subject", "must not have empty tokens (leading, trailing or repeated dots), got %q", s)
	}
	intRange(v, p+".timeout_ms", n.TimeoutMs, 100, 600_000)
	validateDropHeaders(v, p+".drop_headers", n.DropHeaders)

	var methods []string
	if n.User != "" || n.Password != "" {
		methods = append(methods, "user/password")
		if n.User == "" {
			v.add(p+".user", "required when password is set")
		}
		if n.Password == "" {
			v.add(p+".password", "required when user is set")
		}
	}
	if n.Token != "" {
		methods = append(methods, "token")
	}
	if n.CredsFile != "" {
		methods = append(methods, "creds_file")
	}
	if n.NKeyFile != "" {
		methods = append(methods, "nkey_file")
	}
	if urlCreds {
		methods = append(methods, "credentials in url")
	}
	if len(methods) > 1 {
		v.add(p, "at most one auth method is allowed (user/password, token, creds_file, nkey_file or credentials in url), got %s",
			strings.Join(methods, " and "))
	}
}

func validateRabbitMQSink(v *validator, p string, r *RabbitMQSink) {
	if msg, _ := checkURL(r.URL, redactURL(r.URL), "amqp", "amqps"); msg != "" {
		v.add(p+".url", "%s", msg)
	}
	if n := len(r.Exchange); n > maxAMQPShortStr {
		v.add(p+".exchange", "must be at most %d bytes, got %d", maxAMQPShortStr, n)
	}
	switch n := len(r.RoutingKey); {
	case n == 0:
		v.add(p+".routing_key", "must be set: a message no queue is bound for would be dropped (with the default exchange, the routing key is the queue name)")
	case n > maxAMQPShortStr:
		v.add(p+".routing_key", "must be at most %d bytes, got %d", maxAMQPShortStr, n)
	}
	intRange(v, p+".timeout_ms", r.TimeoutMs, 100, 600_000)
	validateDropHeaders(v, p+".drop_headers", r.DropHeaders)
}

// maxDropHeaders bounds a queue sink's drop_headers list.
const maxDropHeaders = 64

// validateDropHeaders checks a queue sink's drop_headers: header names, at
// most maxDropHeaders, no duplicates (any case).
func validateDropHeaders(v *validator, p string, names []string) {
	if len(names) > maxDropHeaders {
		v.add(p, "must have at most %d entries, got %d", maxDropHeaders, len(names))
		return
	}
	seen := map[string]int{}
	for i, n := range names {
		ip := fmt.Sprintf("%s[%d]", p, i)
		if !headerRE.MatchString(n) {
			v.add(ip, "must be an HTTP header name, got %q", n)
			continue
		}
		if j, dup := seen[strings.ToLower(n)]; dup {
			v.add(ip, "duplicate of %s[%d] (names match in any case)", p, j)
			continue
		}
		seen[strings.ToLower(n)] = i
	}
}
