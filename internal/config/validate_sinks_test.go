package config_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

// allSinks returns Default() whose demo source has one valid sink of every
// type, at these indexes: 0 log, 1 http, 2 kafka, 3 nats, 4 rabbitmq.
func allSinks() *config.Config {
	c := config.Default()
	s := c.Sources["demo"]
	s.Sinks = append(s.Sinks,
		config.SinkConfig{ID: "hook", Type: "http", HTTP: &config.HTTPSink{
			URL: "https://example.com/hooks", TimeoutMs: 5_000,
		}},
		config.SinkConfig{ID: "events", Type: "kafka", Kafka: &config.KafkaSink{
			Brokers: []string{"kafka-1:9092"}, Topic: "webhooks", TimeoutMs: 10_000,
		}},
		config.SinkConfig{ID: "js", Type: "nats", NATS: &config.NATSSink{
			URL: "nats://localhost:4222", Subject: "webhooks.in", TimeoutMs: 10_000,
		}},
		config.SinkConfig{ID: "amqp", Type: "rabbitmq", RabbitMQ: &config.RabbitMQSink{
			URL: "amqp://guest:guest@localhost:5672/", RoutingKey: "webhooks", TimeoutMs: 10_000,
		}},
	)
	c.Sources["demo"] = s
	return c
}

const (
	sk0 = "sources.demo.sinks[0]"
	sk1 = "sources.demo.sinks[1]"
	sk2 = "sources.demo.sinks[2]"
	sk3 = "sources.demo.sinks[3]"
	sk4 = "sources.demo.sinks[4]"
)

// b64 is the whsec_ secret of n bytes.
func b64(n int) string {
	return "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, n))
}

func TestSinkRules(t *testing.T) {
	type sinks = []config.SinkConfig
	tests := []struct {
		name string
		mod  func(k sinks)
		key  string
		rule string // "" means the config must be valid
	}{
		// Types and blocks.
		{"every type", func(k sinks) {}, "", ""},
		{"type empty", func(k sinks) { k[0].Type = "" }, sk0 + ".type", "must be set (one of log|http|kafka|nats|rabbitmq)"},
		{"http block on kafka sink", func(k sinks) { k[2].HTTP = &config.HTTPSink{URL: "https://x.example"} },
			sk2 + ".http", "only allowed when type is http (this sink's type is kafka)"},
		{"kafka block on log sink", func(k sinks) { k[0].Kafka = k[2].Kafka }, sk0 + ".kafka", "only allowed when type is kafka"},
		{"nats block on http sink", func(k sinks) { k[1].NATS = k[3].NATS }, sk1 + ".nats", "only allowed when type is nats"},
		{"rabbitmq block on nats sink", func(k sinks) { k[3].RabbitMQ = k[4].RabbitMQ }, sk3 + ".rabbitmq", "only allowed when type is rabbitmq"},
		{"http block missing", func(k sinks) { k[1].HTTP = nil }, sk1 + ".http", "required when type is http"},
		{"kafka block missing", func(k sinks) { k[2].Kafka = nil }, sk2 + ".kafka", "required when type is kafka"},
		{"nats block missing", func(k sinks) { k[3].NATS = nil }, sk3 + ".nats", "required when type is nats"},
		{"rabbitmq block missing", func(k sinks) { k[4].RabbitMQ = nil }, sk4 + ".rabbitmq", "required when type is rabbitmq"},

		// http.url
		{"http url empty", func(k sinks) { k[1].HTTP.URL = "" }, sk1 + ".http.url", "must be set (an absolute http:// or https:// URL)"},
		{"http url ftp", func(k sinks) { k[1].HTTP.URL = "ftp://x.example/in" }, sk1 + ".http.url", `must start with http:// or https://, got scheme "ftp"`},
		{"http url relative", func(k sinks) { k[1].HTTP.URL = "example.com/hook" }, sk1 + ".http.url", "got no scheme"},
		{"http url host:port", func(k sinks) { k[1].HTTP.URL = "localhost:8080" }, sk1 + ".http.url", "got host:port without a scheme"},
		{"http url no host", func(k sinks) { k[1].HTTP.URL = "https:///hooks" }, sk1 + ".http.url", "URL with a host"},
		{"http url opaque", func(k sinks) { k[1].HTTP.URL = "http:x.example" }, sk1 + ".http.url", "URL with a host"},
		{"http url port 0", func(k sinks) { k[1].HTTP.URL = "https://x.example:0/" }, sk1 + ".http.url", "must have a port between 1 and 65535"},
		{"http url port high", func(k sinks) { k[1].HTTP.URL = "https://x.example:65536/" }, sk1 + ".http.url", "must have a port between 1 and 65535"},
		{"http url unparsable", func(k sinks) { k[1].HTTP.URL = "https://x.example/%zz" }, sk1 + ".http.url", "it does not parse"},
		{"http url http ok", func(k sinks) { k[1].HTTP.URL = "http://10.0.0.7:8080/in?x=1" }, "", ""},
		{"http url ipv6 ok", func(k sinks) { k[1].HTTP.URL = "http://[::1]:8080/in" }, "", ""},
		{"http url upper-case scheme ok", func(k sinks) { k[1].HTTP.URL = "HTTPS://x.example/" }, "", ""},
		{"http url userinfo ok", func(k sinks) { k[1].HTTP.URL = "https://u:p@x.example/" }, "", ""},

		// http.headers
		{"headers ok", func(k sinks) {
			k[1].HTTP.Headers = map[string]string{"Authorization": "Bearer x", "X-Ankusa": "ok", "X-Tab": "a\tb", "X-Empty": ""}
		}, "", ""},
		{"header name bad", func(k sinks) { k[1].HTTP.Headers = map[string]string{"X Token": "a"} },
			sk1 + ".http.headers.X Token", `must be a valid HTTP header name (an RFC 9110 token), got "X Token"`},
		{"header content-type", func(k sinks) { k[1].HTTP.Headers = map[string]string{"Content-Type": "text/plain"} },
			sk1 + ".http.headers.Content-Type", "is set by Ankusa and cannot be configured"},
		{"header content-length", func(k sinks) { k[1].HTTP.Headers = map[string]string{"content-length": "1"} },
			sk1 + ".http.headers.content-length", "is set by Ankusa"},
		{"header host", func(k sinks) { k[1].HTTP.Headers = map[string]string{"HOST": "x"} }, sk1 + ".http.headers.HOST", "is set by Ankusa"},
		{"header x-ankusa-*", func(k sinks) { k[1].HTTP.Headers = map[string]string{"X-Ankusa-Id": "x"} },
			sk1 + ".http.headers.X-Ankusa-Id", "is set by Ankusa"},
		{"header webhook-id", func(k sinks) { k[1].HTTP.Headers = map[string]string{"Webhook-Id": "x"} },
			sk1 + ".http.headers.Webhook-Id", "is set by Ankusa"},
		{"header webhook-timestamp", func(k sinks) { k[1].HTTP.Headers = map[string]string{"webhook-timestamp": "x"} },
			sk1 + ".http.headers.webhook-timestamp", "is set by Ankusa"},
		{"header webhook-signature", func(k sinks) { k[1].HTTP.Headers = map[string]string{"Webhook-Signature": "x"} },
			sk1 + ".http.headers.Webhook-Signature", "is set by Ankusa"},
		{"header duplicate case", func(k sinks) { k[1].HTTP.Headers = map[string]string{"X-Token": "a", "x-token": "b"} },
			sk1 + ".http.headers.x-token", `duplicate of header "X-Token" (header names are case-insensitive)`},
		{"header value CRLF", func(k sinks) { k[1].HTTP.Headers = map[string]string{"X-A": "a\r\nX-B: b"} },
			sk1 + ".http.headers.X-A", "value must not contain control characters"},

		// http.secret
		{"secret raw 16", func(k sinks) { k[1].HTTP.Secret = "0123456789abcdef" }, "", ""},
		{"secret raw 15", func(k sinks) { k[1].HTTP.Secret = "0123456789abcde" }, sk1 + ".http.secret", "must be at least 16 bytes (or whsec_ followed by base64), got 15"},
		{"secret raw spaces", func(k sinks) { k[1].HTTP.Secret = " 0123456789abcdef\n" }, sk1 + ".http.secret", "must not start or end with white space"},
		{"secret whsec 24", func(k sinks) { k[1].HTTP.Secret = b64(24) }, "", ""},
		{"secret whsec 16", func(k sinks) { k[1].HTTP.Secret = b64(16) }, "", ""},
		{"secret whsec 15", func(k sinks) { k[1].HTTP.Secret = b64(15) }, sk1 + ".http.secret", "must decode to at least 16 bytes after whsec_, got 15"},
		{"secret whsec bad base64", func(k sinks) { k[1].HTTP.Secret = "whsec_not*base64*at*all*!" }, sk1 + ".http.secret", "the part after whsec_ does not decode"},
		{"secret whsec unpadded", func(k sinks) { k[1].HTTP.Secret = strings.TrimRight(b64(16), "=") }, sk1 + ".http.secret", "does not decode"},
		{"secret whsec empty", func(k sinks) { k[1].HTTP.Secret = "whsec_" }, sk1 + ".http.secret", "must decode to at least 16 bytes after whsec_, got 0"},

		// kafka.brokers
		{"brokers none", func(k sinks) { k[2].Kafka.Brokers = nil }, sk2 + ".kafka.brokers", "at least one broker (host:port) is required"},
		{"broker no port", func(k sinks) { k[2].Kafka.Brokers = []string{"kafka-1"} }, sk2 + ".kafka.brokers[0]", `must be host:port (the port is missing), got "kafka-1"`},
		{"broker scheme", func(k sinks) { k[2].Kafka.Brokers = []string{"kafka://k:9092"} }, sk2 + ".kafka.brokers[0]", "must be host:port without a scheme"},
		{"broker ipv6 unbracketed", func(k sinks) { k[2].Kafka.Brokers = []string{"::1:9092"} }, sk2 + ".kafka.brokers[0]", "(IPv6 addresses in brackets)"},
		{"broker no host", func(k sinks) { k[2].Kafka.Brokers = []string{":9092"} }, sk2 + ".kafka.brokers[0]", "valid host name or IP address"},
		{"broker bad host", func(k sinks) { k[2].Kafka.Brokers = []string{"bad host:9092"} }, sk2 + ".kafka.brokers[0]", "valid host name or IP address"},
		{"broker port 0", func(k sinks) { k[2].Kafka.Brokers = []string{"k:0"} }, sk2 + ".kafka.brokers[0]", "port between 1 and 65535"},
		{"broker port high", func(k sinks) { k[2].Kafka.Brokers = []string{"k:65536"} }, sk2 + ".kafka.brokers[0]", "port between 1 and 65535"},
		{"broker port name", func(k sinks) { k[2].Kafka.Brokers = []string{"k:kafka"} }, sk2 + ".kafka.brokers[0]", "port between 1 and 65535"},
		{"broker port signed", func(k sinks) { k[2].Kafka.Brokers = []string{"k:+9092"} }, sk2 + ".kafka.brokers[0]", "port between 1 and 65535"},
		{"broker second bad", func(k sinks) { k[2].Kafka.Brokers = []string{"k1:9092", "k2"} }, sk2 + ".kafka.brokers[1]", `got "k2"`},
		{"broker duplicate", func(k sinks) { k[2].Kafka.Brokers = []string{"k1:9092", "k1:9092"} }, sk2 + ".kafka.brokers[1]", `duplicate of brokers[0] ("k1:9092")`},
		{"brokers ok", func(k sinks) {
			k[2].Kafka.Brokers = []string{"10.0.0.1:9092", "[::1]:9092", "kafka_1:9093", "b.example.com.:65535", "k:1"}
		}, "", ""},

		// kafka.topic
		{"topic empty", func(k sinks) { k[2].Kafka.Topic = "" }, sk2 + ".kafka.topic", "must be set"},
		{"topic slash", func(k sinks) { k[2].Kafka.Topic = "a/b" }, sk2 + ".kafka.topic", `must match [a-zA-Z0-9._-]{1,249}, got "a/b"`},
		{"topic 250", func(k sinks) { k[2].Kafka.Topic = strings.Repeat("t", 250) }, sk2 + ".kafka.topic", "must match [a-zA-Z0-9._-]{1,249}"},
		{"topic 249", func(k sinks) { k[2].Kafka.Topic = strings.Repeat("t", 249) }, "", ""},
		{"topic dot", func(k sinks) { k[2].Kafka.Topic = "." }, sk2 + ".kafka.topic", `must not be "."`},
		{"topic dotdot", func(k sinks) { k[2].Kafka.Topic = ".." }, sk2 + ".kafka.topic", `must not be ".."`},
		{"topic every char", func(k sinks) { k[2].Kafka.Topic = "Hooks.v1_in-2" }, "", ""},

		// kafka.sasl
		{"sasl ok", func(k sinks) {
			k[2].Kafka.SASL = &config.SASL{Mechanism: "scram-sha-512", Username: "u", Password: "p"}
		}, "", ""},
		{"sasl plain ok", func(k sinks) { k[2].Kafka.SASL = &config.SASL{Mechanism: "plain", Username: "u", Password: "p"} }, "", ""},
		{"sasl 256 ok", func(k sinks) {
			k[2].Kafka.SASL = &config.SASL{Mechanism: "scram-sha-256", Username: "u", Password: "p"}
		}, "", ""},
		{"sasl mechanism empty", func(k sinks) { k[2].Kafka.SASL = &config.SASL{Username: "u", Password: "p"} },
			sk2 + ".kafka.sasl.mechanism", "must be set (one of plain|scram-sha-256|scram-sha-512)"},
		{"sasl mechanism upper", func(k sinks) {
			k[2].Kafka.SASL = &config.SASL{Mechanism: "SCRAM-SHA-256", Username: "u", Password: "p"}
		},
			sk2 + ".kafka.sasl.mechanism", "(write it in lower case)"},
		{"sasl mechanism gssapi", func(k sinks) { k[2].Kafka.SASL = &config.SASL{Mechanism: "gssapi", Username: "u", Password: "p"} },
			sk2 + ".kafka.sasl.mechanism", `must be one of plain|scram-sha-256|scram-sha-512, got "gssapi"`},
		{"sasl username missing", func(k sinks) { k[2].Kafka.SASL = &config.SASL{Mechanism: "plain", Password: "p"} },
			sk2 + ".kafka.sasl.username", "required when sasl is set"},
		{"sasl password missing", func(k sinks) { k[2].Kafka.SASL = &config.SASL{Mechanism: "plain", Username: "u"} },
			sk2 + ".kafka.sasl.password", "required when sasl is set"},

		// kafka.tls
		{"tls on", func(k sinks) { k[2].Kafka.TLS = &config.TLS{Enabled: true} }, "", ""},
		{"tls off", func(k sinks) { k[2].Kafka.TLS = &config.TLS{} }, "", ""},
		{"tls all files", func(k sinks) {
			k[2].Kafka.TLS = &config.TLS{Enabled: true, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"}
		}, "", ""},
		{"tls cert without key", func(k sinks) { k[2].Kafka.TLS = &config.TLS{Enabled: true, CertFile: "c.pem"} },
			sk2 + ".kafka.tls.key_file", "required when tls.cert_file is set"},
		{"tls key without cert", func(k sinks) { k[2].Kafka.TLS = &config.TLS{Enabled: true, KeyFile: "k.pem"} },
			sk2 + ".kafka.tls.cert_file", "required when tls.key_file is set"},
		{"tls cert only while off", func(k sinks) { k[2].Kafka.TLS = &config.TLS{CertFile: "c.pem", KeyFile: "k.pem"} },
			sk2 + ".kafka.tls.enabled", "must be true when cert_file and key_file are set"},
		{"tls files while off", func(k sinks) { k[2].Kafka.TLS = &config.TLS{CAFile: "ca.pem", InsecureSkipVerify: true} },
			sk2 + ".kafka.tls.enabled", "must be true when ca_file and insecure_skip_verify are set (they would be ignored with TLS off)"},

		// nats.url
		{"nats url empty", func(k sinks) { k[3].NATS.URL = "" }, sk3 + ".nats.url", "must be set (a nats:// or tls:// URL, or a comma-separated list of them)"},
		{"nats url list", func(k sinks) { k[3].NATS.URL = "nats://a:4222,tls://b:4222, nats://c" }, "", ""},
		{"nats url http", func(k sinks) { k[3].NATS.URL = "http://a:4222" }, sk3 + ".nats.url", `must start with nats:// or tls://, got scheme "http"`},
		{"nats url bare", func(k sinks) { k[3].NATS.URL = "localhost:4222" }, sk3 + ".nats.url", "got host:port without a scheme"},
		{"nats url trailing comma", func(k sinks) { k[3].NATS.URL = "nats://a:4222," }, sk3 + ".nats.url", "entry 2 of the list must not be empty"},
		{"nats url list bad entry", func(k sinks) { k[3].NATS.URL = "nats://a:4222,wss://b" }, sk3 + ".nats.url", `entry 2 of the list must start with nats:// or tls://, got scheme "wss"`},
		{"nats url bad port", func(k sinks) { k[3].NATS.URL = "nats://a:99999" }, sk3 + ".nats.url", "must have a port between 1 and 65535"},
		{"nats url no host", func(k sinks) { k[3].NATS.URL = "nats://:4222" }, sk3 + ".nats.url", "URL with a host"},

		// nats.subject
		{"subject empty", func(k sinks) { k[3].NATS.Subject = "" }, sk3 + ".nats.subject", "must be set"},
		{"subject star", func(k sinks) { k[3].NATS.Subject = "hooks.*" }, sk3 + ".nats.subject", "must not contain wildcards (* or >)"},
		{"subject gt", func(k sinks) { k[3].NATS.Subject = "hooks.>" }, sk3 + ".nats.subject", "must not contain wildcards"},
		{"subject star inside token", func(k sinks) { k[3].NATS.Subject = "hooks.a*b" }, sk3 + ".nats.subject", "must not contain wildcards"},
		{"subject double dot", func(k sinks) { k[3].NATS.Subject = "hooks..in" }, sk3 + ".nats.subject", "must not have empty tokens"},
		{"subject leading dot", func(k sinks) { k[3].NATS.Subject = ".hooks" }, sk3 + ".nats.subject", "must not have empty tokens"},
		{"subject trailing dot", func(k sinks) { k[3].NATS.Subject = "hooks." }, sk3 + ".nats.subject", "must not have empty tokens"},
		{"subject space", func(k sinks) { k[3].NATS.Subject = "hooks in" }, sk3 + ".nats.subject", "must not contain white space"},
		{"subject single token", func(k sinks) { k[3].NATS.Subject = "hooks" }, "", ""},

		// nats auth
		{"nats user password", func(k sinks) { k[3].NATS.User, k[3].NATS.Password = "u", "p" }, "", ""},
		{"nats token", func(k sinks) { k[3].NATS.Token = "t" }, "", ""},
		{"nats creds", func(k sinks) { k[3].NATS.CredsFile = "/etc/ankusa/nats.creds" }, "", ""},
		{"nats nkey", func(k sinks) { k[3].NATS.NKeyFile = "/etc/ankusa/nats.nk" }, "", ""},
		{"nats url creds", func(k sinks) { k[3].NATS.URL = "nats://u:p@a:4222" }, "", ""},
		{"nats user without password", func(k sinks) { k[3].NATS.User = "u" }, sk3 + ".nats.password", "required when user is set"},
		{"nats password without user", func(k sinks) { k[3].NATS.Password = "p" }, sk3 + ".nats.user", "required when password is set"},
		{"nats token and creds", func(k sinks) { k[3].NATS.Token, k[3].NATS.CredsFile = "t", "c.creds" },
			sk3 + ".nats", "at most one auth method is allowed (user/password, token, creds_file, nkey_file or credentials in url), got token and creds_file"},
		{"nats user and nkey", func(k sinks) { k[3].NATS.User, k[3].NATS.Password, k[3].NATS.NKeyFile = "u", "p", "n.nk" },
			sk3 + ".nats", "got user/password and nkey_file"},
		{"nats url creds and token", func(k sinks) { k[3].NATS.URL, k[3].NATS.Token = "nats://tok@a:4222", "t" },
			sk3 + ".nats", "got token and credentials in url"},

		// rabbitmq
		{"amqp url empty", func(k sinks) { k[4].RabbitMQ.URL = "" }, sk4 + ".rabbitmq.url", "must be set (an absolute amqp:// or amqps:// URL)"},
		{"amqp url http", func(k sinks) { k[4].RabbitMQ.URL = "http://h" }, sk4 + ".rabbitmq.url", `must start with amqp:// or amqps://, got scheme "http"`},
		{"amqp url no host", func(k sinks) { k[4].RabbitMQ.URL = "amqp://" }, sk4 + ".rabbitmq.url", "URL with a host"},
		{"amqps url vhost", func(k sinks) { k[4].RabbitMQ.URL = "amqps://u:p@mq.example:5671/prod" }, "", ""},
		{"routing key empty", func(k sinks) { k[4].RabbitMQ.RoutingKey = "" }, sk4 + ".rabbitmq.routing_key", "must be set"},
		{"routing key 255", func(k sinks) { k[4].RabbitMQ.RoutingKey = strings.Repeat("r", 255) }, "", ""},
		{"routing key 256", func(k sinks) { k[4].RabbitMQ.RoutingKey = strings.Repeat("r", 256) }, sk4 + ".rabbitmq.routing_key", "must be at most 255 bytes, got 256"},
		{"exchange named", func(k sinks) { k[4].RabbitMQ.Exchange = "amq.topic" }, "", ""},
		{"exchange 256", func(k sinks) { k[4].RabbitMQ.Exchange = strings.Repeat("e", 256) }, sk4 + ".rabbitmq.exchange", "must be at most 255 bytes, got 256"},

		// drop_headers (every queue sink)
		{"drop_headers empty carries all", func(k sinks) { k[2].Kafka.DropHeaders = []string{} }, "", ""},
		{"drop_headers own list", func(k sinks) { k[3].NATS.DropHeaders = []string{"Authorization", "x-token"} }, "", ""},
		{"drop_headers not a header name", func(k sinks) { k[4].RabbitMQ.DropHeaders = []string{"authorization", "x bad"} },
			sk4 + ".rabbitmq.drop_headers[1]", `must be an HTTP header name, got "x bad"`},
		{"drop_headers duplicate in another case", func(k sinks) { k[3].NATS.DropHeaders = []string{"cookie", "Cookie"} },
			sk3 + ".nats.drop_headers[1]", "duplicate of " + sk3 + ".nats.drop_headers[0]"},
		{"drop_headers too many", func(k sinks) { k[2].Kafka.DropHeaders = make([]string, 65) },
			sk2 + ".kafka.drop_headers", "must have at most 64 entries, got 65"},
	}
	cases := make([]ruleCase, len(tests))
	for i, tt := range tests {
		cases[i] = ruleCase{tt.name, func(c *config.Config) { tt.mod(c.Sources["demo"].Sinks) }, tt.key, tt.rule}
	}
	runRules(t, allSinks, cases)
}

// A block that does not match a valid type is reported once: its contents
// are not checked, since it is going to be deleted or the type changed.
func TestForeignBlockReportedOnce(t *testing.T) {
	c := allSinks()
	c.Sources["demo"].Sinks[2].HTTP = &config.HTTPSink{} // no url, no timeout
	errs := asErrors(t, c.Validate())
	if len(errs) != 1 || errs[0].Key != sk2+".http" {
		t.Fatalf("want only %s.http, got %v", sk2, errs)
	}
}

// With an unknown type the intended block is unknown, so every present
// block is checked.
func TestUnknownTypeStillChecksBlocks(t *testing.T) {
	c := allSinks()
	k := &c.Sources["demo"].Sinks[2]
	k.Type = "kafak"
	k.Kafka.Topic = ""
	errs := asErrors(t, c.Validate())
	if findKey(errs, sk2+".type") == nil || findKey(errs, sk2+".kafka.topic") == nil {
		t.Fatalf("want type and topic violations, got %v", errs)
	}
	if findKey(errs, sk2+".kafka") != nil {
		t.Fatalf("block reported as foreign under an unknown type: %v", errs)
	}
}

// Rule texts end up in logs: they never echo a secret, a header value, or
// the password of a URL.
func TestSinkErrorsDoNotLeakSecrets(t *testing.T) {
	c := allSinks()
	k := c.Sources["demo"].Sinks
	k[1].HTTP.URL = "ftp://user:hunter2@x.example/?token=tok_abc"
	k[1].HTTP.Headers = map[string]string{"X-Key": "sk_live\n_1", "Host": "sk_live_2"}
	k[1].HTTP.Secret = "whsec_sk_live_3!"
	k[3].NATS.URL = "nats://tok_nats@a:99999"
	k[4].RabbitMQ.URL = "amqp://guest:pw_amqp@h:0/"
	err := c.Validate()
	for _, secret := range []string{"hunter2", "tok_abc", "sk_live", "tok_nats", "pw_amqp"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error leaks %q: %v", secret, err)
		}
	}
	k[1].HTTP.URL = "https://key_http@x.example:0/" // basic auth user alone: a key
	k[3].NATS.URL = "nats://n:4222,nats://tok_nats@n:99999"
	err = c.Validate()
	if strings.Contains(err.Error(), "key_http") || strings.Contains(err.Error(), "tok_nats") {
		t.Errorf("error leaks a lone user name: %v", err)
	}
	if !strings.Contains(err.Error(), `"https://[REDACTED]@x.example:0/"`) || !strings.Contains(err.Error(), `"nats://[REDACTED]@n:99999"`) {
		t.Errorf("URLs not shown redacted: %v", err)
	}
	// Opaque URLs ("user:pw@host" parses as scheme "user") are not echoed.
	k[1].HTTP.URL = "user:hunter2@x.example/in"
	k[4].RabbitMQ.URL = "amqp:guest:pw_amqp@h"
	if err := c.Validate(); strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "pw_amqp") {
		t.Errorf("error leaks an opaque URL's password: %v", err)
	}
}

func TestSigningKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xa5}, 24)
	tests := []struct {
		secret string
		want   []byte
	}{
		{"", nil},
		{b64(24), raw},
		{"0123456789abcdef", []byte("0123456789abcdef")},
	}
	for _, tt := range tests {
		got, err := (&config.HTTPSink{Secret: tt.secret}).SigningKey()
		if err != nil || !bytes.Equal(got, tt.want) {
			t.Errorf("SigningKey(%q) = %x, %v; want %x", tt.secret, got, err, tt.want)
		}
	}
	if _, err := (&config.HTTPSink{Secret: "whsec_!!"}).SigningKey(); err == nil {
		t.Error("invalid whsec_ secret accepted")
	}
}

// everySink is a file with one sink of each type, some keys left to their
// defaults and some given.
const everySink = `
sources:
  orders:
    sinks:
      - type: log
      - id: hook
        type: http
        http:
          url: https://orders.example/hooks
          headers:
            Authorization: "Bearer tok_http"
          secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
      - id: slow-hook
        type: http
        http: {url: "http://10.0.0.9:8080/in", timeout_ms: 60000}
      - id: events
        type: kafka
        kafka:
          brokers: [kafka-1:9092, kafka-2:9092]
          topic: orders.webhooks
          sasl: {mechanism: scram-sha-512, username: ankusa, password: "pw_kafka"}
          tls: {enabled: true, ca_file: /etc/ssl/kafka-ca.pem}
      - id: js
        type: nats
        nats:
          url: nats://n1:4222,nats://n2:4222
          subject: webhooks.orders
          creds_file: /etc/ankusa/nats.creds
          timeout_ms: 2000
      - id: mq
        type: rabbitmq
        rabbitmq:
          url: amqps://ankusa:pw_amqp@mq.example:5671/prod
          exchange: webhooks
          routing_key: orders
`

func TestEverySinkTypeLoads(t *testing.T) {
	c := mustLoad(t, everySink, noEnv)
	k := c.Sources["orders"].Sinks
	if len(k) != 6 {
		t.Fatalf("got %d sinks", len(k))
	}
	if k[0].ID != "log" || k[0].HTTP != nil || k[0].Kafka != nil || k[0].NATS != nil || k[0].RabbitMQ != nil {
		t.Errorf("log sink: %+v", k[0])
	}
	if h := k[1].HTTP; h.URL != "https://orders.example/hooks" || h.Headers["Authorization"] != "Bearer tok_http" || h.TimeoutMs != 5_000 {
		t.Errorf("http sink: %+v", h)
	}
	if key, err := k[1].HTTP.SigningKey(); err != nil || len(key) != 24 {
		t.Errorf("http signing key: %d bytes, %v", len(key), err)
	}
	if h := k[2].HTTP; h.TimeoutMs != 60_000 {
		t.Errorf("explicit http timeout lost: %+v", h)
	}
	if kf := k[3].Kafka; len(kf.Brokers) != 2 || kf.Topic != "orders.webhooks" || kf.TimeoutMs != 10_000 ||
		kf.SASL.Password != "pw_kafka" || !kf.TLS.Enabled || kf.TLS.CAFile != "/etc/ssl/kafka-ca.pem" {
		t.Errorf("kafka sink: %+v %+v %+v", kf, kf.SASL, kf.TLS)
	}
	if n := k[4].NATS; n.Subject != "webhooks.orders" || n.TimeoutMs != 2_000 || n.CredsFile == "" {
		t.Errorf("nats sink: %+v", n)
	}
	if r := k[5].RabbitMQ; r.Exchange != "webhooks" || r.RoutingKey != "orders" || r.TimeoutMs != 10_000 {
		t.Errorf("rabbitmq sink: %+v", r)
	}
}

func TestSinkTimeoutDefaults(t *testing.T) {
	tests := []struct {
		block string
		want  int
		get   func(k config.SinkConfig) int
	}{
		{"http: {url: https://x.example}", 5_000, func(k config.SinkConfig) int { return k.HTTP.TimeoutMs }},
		{`kafka: {brokers: ["k:9092"], topic: t}`, 10_000, func(k config.SinkConfig) int { return k.Kafka.TimeoutMs }},
		{"nats: {url: nats://n:4222, subject: s}", 10_000, func(k config.SinkConfig) int { return k.NATS.TimeoutMs }},
		{"rabbitmq: {url: amqp://mq, routing_key: r}", 10_000, func(k config.SinkConfig) int { return k.RabbitMQ.TimeoutMs }},
	}
	for _, tt := range tests {
		typ, _, _ := strings.Cut(tt.block, ":")
		t.Run(typ, func(t *testing.T) {
			yml := "sources:\n  demo:\n    sinks:\n      - type: " + typ + "\n        " + tt.block + "\n"
			if got := tt.get(mustLoad(t, yml, noEnv).Sources["demo"].Sinks[0]); got != tt.want {
				t.Fatalf("timeout_ms = %d, want %d", got, tt.want)
			}
			// An explicit value, even an invalid one, is kept and reported.
			yml = strings.Replace(yml, "{", "{timeout_ms: 99, ", 1)
			_, err := config.LoadBytes([]byte(yml), noEnv)
			wantViolation(t, err, "sources.demo.sinks[0]."+typ+".timeout_ms", "must be between 100 and 600000, got 99")
		})
	}
}

func TestSinkBlockShapes(t *testing.T) {
	tests := []struct {
		name, sink, key, rule string
	}{
		{"null block", "{type: http, http: ~}", sk0 + ".http", "required when type is http"},
		{"empty block", "{type: http, http: {}}", sk0 + ".http.url", "must be set"},
		{"header value number", "{type: http, http: {url: https://x.example, headers: {X-N: 1}}}", sk0 + ".http.headers.X-N", "must be a string"},
		{"brokers scalar", `{type: kafka, kafka: {brokers: "k:9092", topic: t}}`, sk0 + ".kafka.brokers", "must be a list"},
		{"tls enabled string", `{type: kafka, kafka: {brokers: ["k:9092"], topic: t, tls: {enabled: yes}}}`, sk0 + ".kafka.tls.enabled", "must be true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.LoadBytes([]byte("sources:\n  demo:\n    sinks:\n      - "+tt.sink+"\n"), noEnv)
			wantViolation(t, err, tt.key, tt.rule)
		})
	}
}

func TestSinkViolationsInOnePass(t *testing.T) {
	yml := `
dispatch: {concurrency: 64, max_inflight: 10, poll_ms: 1}
retry: {base_ms: 500, max_ms: 100}
sources:
  demo:
    sinks:
      - {type: log, http: {url: https://x.example}}
      - type: http
        http: {url: ftp://x, headers: {Host: h}, secret: short}
      - type: kafka
        kafka: {brokers: [k], topic: "a/b", sasl: {mechanism: plain}, tls: {cert_file: c.pem}}
      - type: nats
        nats: {url: "nats://n:4222,", subject: "a.*", user: u, token: t}
      - type: rabbitmq
`
	_, err := config.LoadBytes([]byte(yml), noEnv)
	errs := asErrors(t, err)
	want := []string{
		"dispatch.poll_ms", "dispatch.max_inflight", "retry.max_ms",
		sk0 + ".http",
		sk1 + ".http.url", sk1 + ".http.headers.Host", sk1 + ".http.secret",
		sk2 + ".kafka.brokers[0]", sk2 + ".kafka.topic", sk2 + ".kafka.sasl.username", sk2 + ".kafka.sasl.password",
		sk2 + ".kafka.tls.key_file", sk2 + ".kafka.tls.enabled",
		sk3 + ".nats.url", sk3 + ".nats.subject", sk3 + ".nats.password", sk3 + ".nats",
		sk4 + ".rabbitmq",
	}
	for _, k := range want {
		if findKey(errs, k) == nil {
			t.Errorf("missing violation for %q", k)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("got %d violations, want %d: %v", len(errs), len(want), err)
	}
}
