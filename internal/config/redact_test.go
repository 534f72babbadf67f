package config_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

func TestRedacted(t *testing.T) {
	c := config.Default()
	c.Node.DataDir = "s3://backup:hunter2@bucket.example/ankusa?token=tok_abc&region=zz-north-9"
	c.HTTP.Prefix = "/hooks"
	s := c.Sources["demo"]
	s.Tenant = "acme"
	s.Verify.Secret = []string{"whsec_first", "whsec_second"}
	s.Verify.VerifyToken = "meta-verify-token"
	s.Verify.PublicKey = []string{"whpk_cHVibGlj"}
	s.Verify.PublicURL = "https://hooks.example.com/webhooks/demo"
	s.Handshake = "msgraph"
	s.Dedupe = &config.SourceDedupe{Header: "X-Request-Id", TTLSeconds: 60}
	c.Sources["demo"] = s

	r := c.Redacted()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	for _, secret := range []string{"whsec_first", "whsec_second", "hunter2", "tok_abc", "zz-north-9", "meta-verify-token"} {
		if strings.Contains(out, secret) {
			t.Errorf("redacted output leaks %q: %s", secret, out)
		}
	}

	get := func(path ...any) any {
		var v any = r
		for _, p := range path {
			switch k := p.(type) {
			case string:
				v = v.(map[string]any)[k]
			case int:
				v = v.([]any)[k]
			}
		}
		return v
	}
	tests := []struct {
		path []any
		want any
	}{
		{[]any{"sources", "demo", "verify", "secret", 0}, "[REDACTED]"},
		{[]any{"sources", "demo", "verify", "secret", 1}, "[REDACTED]"},
		{[]any{"sources", "demo", "verify", "verify_token"}, "[REDACTED]"},
		// A public key and the public URL are not secret.
		{[]any{"sources", "demo", "verify", "public_key", 0}, "whpk_cHVibGlj"},
		{[]any{"sources", "demo", "verify", "public_url"}, "https://hooks.example.com/webhooks/demo"},
		{[]any{"sources", "demo", "handshake"}, "msgraph"},
		{[]any{"node", "data_dir"}, "s3://backup:[REDACTED]@bucket.example/ankusa?token=[REDACTED]&region=[REDACTED]"},
		{[]any{"http", "prefix"}, "/hooks"},
		{[]any{"http", "ip"}, "0.0.0.0"},
		{[]any{"node", "roles", 1}, "dispatch"},
		{[]any{"log", "level"}, "info"},
		{[]any{"wal", "type"}, "disk"},
		{[]any{"sources", "demo", "tenant"}, "acme"},
		{[]any{"sources", "demo", "verify", "type"}, "none"},
		{[]any{"sources", "demo", "dedupe", "header"}, "X-Request-Id"},
		{[]any{"sources", "demo", "sinks", 0, "id"}, "log"},
		{[]any{"sources", "demo", "sinks", 0, "type"}, "log"},
	}
	for _, tt := range tests {
		if got := get(tt.path...); got != tt.want {
			t.Errorf("%v = %v, want %v", tt.path, got, tt.want)
		}
	}
	// Numbers are shown, and 64-bit sizes stay exact.
	if got := get("batcher", "max_queue_bytes"); got != json.Number("268435456") {
		t.Errorf("max_queue_bytes = %#v", got)
	}
}

// Redacted must not touch the Config it was called on.
func TestRedactedLeavesConfigAlone(t *testing.T) {
	c := config.Default()
	s := c.Sources["demo"]
	s.Verify.Secret = []string{"whsec_x"}
	c.Sources["demo"] = s
	_ = c.Redacted()
	if c.Sources["demo"].Verify.Secret[0] != "whsec_x" {
		t.Fatal("Redacted mutated the config")
	}
}

func TestRedactedURLWithoutCredentialsUnchanged(t *testing.T) {
	c := config.Default()
	c.Node.DataDir = "file:///var/lib/ankusa"
	if got := c.Redacted()["node"].(map[string]any)["data_dir"]; got != "file:///var/lib/ankusa" {
		t.Fatalf("got %v", got)
	}
}

func TestRedactedSinks(t *testing.T) {
	c := mustLoad(t, `
sources:
  orders:
    sinks:
      - id: hook
        type: http
        http:
          url: "https://hookuser:pw_http@orders.example/in?sig=q_http&v=1"
          headers:
            Authorization: "Bearer hv_auth"
            X-Api-Key: "hv_key"
          secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
      - id: events
        type: kafka
        kafka:
          brokers: ["kafka-1:9092", "kafka-2:9092"]
          topic: orders.webhooks
          sasl: {mechanism: scram-sha-256, username: ankusa-producer, password: "pw_sasl"}
          tls: {enabled: true, ca_file: /etc/ssl/ca.pem, cert_file: /etc/ssl/c.pem, key_file: /etc/ssl/k.pem}
      - id: js
        type: nats
        nats: {url: "nats://n1:4222, tls://natsuser:pw_natsurl@n2:4222", subject: webhooks.orders}
      - id: js-url-token
        type: nats
        nats: {url: "nats://tok_naturl@n1:4222", subject: a}
      - id: js-user
        type: nats
        nats: {url: "nats://n1:4222", subject: webhooks.orders, user: natsuser, password: "pw_nats"}
      - id: js-token
        type: nats
        nats: {url: "nats://n1:4222", subject: a, token: "tok_nats"}
      - id: js-creds
        type: nats
        nats: {url: "nats://n1:4222", subject: b, creds_file: /etc/ankusa/nats.creds}
      - id: js-nkey
        type: nats
        nats: {url: "nats://n1:4222", subject: c, nkey_file: /etc/ankusa/nats.nk}
      - id: keyed
        type: http
        http: {url: "https://key_http@api.example:8443/in"}
      - id: mq
        type: rabbitmq
        rabbitmq: {url: "amqp://guest:guest@mq.example:5672/prod", exchange: hooks, routing_key: orders.in}
`, noEnv)
	r := c.Redacted()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	// Every secret is hidden, wherever it sits.
	for _, secret := range []string{
		"pw_http", "q_http", "hv_auth", "hv_key", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"pw_sasl", "pw_natsurl", "pw_nats", "tok_naturl", "tok_nats", "guest@", "key_http",
	} {
		if strings.Contains(out, secret) {
			t.Errorf("redacted output leaks %q: %s", secret, out)
		}
	}

	sink := func(i int, path ...string) any {
		var v any = r["sources"].(map[string]any)["orders"].(map[string]any)["sinks"].([]any)[i]
		for _, p := range path {
			v = v.(map[string]any)[p]
		}
		return v
	}
	tests := []struct {
		sink int
		path string
		want any
	}{
		// Secrets.
		{0, "http.secret", "[REDACTED]"},
		{0, "http.headers.Authorization", "[REDACTED]"}, // the name stays visible as a key
		{0, "http.headers.X-Api-Key", "[REDACTED]"},
		{1, "kafka.sasl.password", "[REDACTED]"},
		{4, "nats.password", "[REDACTED]"},
		{5, "nats.token", "[REDACTED]"},
		// Shown, URLs minus their credentials and query values.
		{0, "http.url", "https://hookuser:[REDACTED]@orders.example/in?sig=[REDACTED]&v=[REDACTED]"},
		{0, "http.timeout_ms", json.Number("5000")},
		{1, "kafka.topic", "orders.webhooks"},
		{1, "kafka.sasl.mechanism", "scram-sha-256"},
		{1, "kafka.sasl.username", "ankusa-producer"},
		{1, "kafka.tls.ca_file", "/etc/ssl/ca.pem"},
		{1, "kafka.tls.cert_file", "/etc/ssl/c.pem"},
		{1, "kafka.tls.key_file", "/etc/ssl/k.pem"},
		{1, "kafka.tls.enabled", true},
		{2, "nats.url", "nats://n1:4222,tls://natsuser:[REDACTED]@n2:4222"},
		{2, "nats.subject", "webhooks.orders"},
		{3, "nats.url", "nats://[REDACTED]@n1:4222"}, // a lone user name is a token
		{4, "nats.user", "natsuser"},
		{6, "nats.creds_file", "/etc/ankusa/nats.creds"},
		{7, "nats.nkey_file", "/etc/ankusa/nats.nk"},
		{8, "http.url", "https://[REDACTED]@api.example:8443/in"}, // basic auth without a password: a key
		{9, "rabbitmq.url", "amqp://guest:[REDACTED]@mq.example:5672/prod"},
		{9, "rabbitmq.exchange", "hooks"},
		{9, "rabbitmq.routing_key", "orders.in"},
		{9, "type", "rabbitmq"},
	}
	for _, tt := range tests {
		if got := sink(tt.sink, strings.Split(tt.path, ".")...); got != tt.want {
			t.Errorf("sinks[%d].%s = %#v, want %#v", tt.sink, tt.path, got, tt.want)
		}
	}
	brokers := sink(1, "kafka", "brokers").([]any)
	if len(brokers) != 2 || brokers[0] != "kafka-1:9092" || brokers[1] != "kafka-2:9092" {
		t.Errorf("brokers = %v", brokers)
	}
	// Header names are visible as keys.
	if h := sink(0, "http", "headers").(map[string]any); len(h) != 2 {
		t.Errorf("headers = %v", h)
	}
}

func TestRedactedDispatchAndRetryShown(t *testing.T) {
	r := config.Default().Redacted()
	d := r["dispatch"].(map[string]any)
	if d["concurrency"] != json.Number("512") || d["max_inflight_bytes"] != json.Number("67108864") {
		t.Errorf("dispatch = %v", d)
	}
	if got := r["retry"].(map[string]any)["max_attempts"]; got != json.Number("84") {
		t.Errorf("retry.max_attempts = %v", got)
	}
}

// A sink URL that does not parse is hidden whole (each URL of a NATS list
// on its own): where its password sits cannot be told. (Validate refuses such a URL; Redacted does not rely on
// that.)
func TestRedactedUnparsableSinkURLHidden(t *testing.T) {
	c := allSinks()
	k := c.Sources["demo"].Sinks
	k[1].HTTP.URL = "https://u:p/w@x.example/%zz"
	k[3].NATS.URL = "nats://a:4222,nats://u:p/w@b/%zz"
	k[4].RabbitMQ.URL = "amqp://u:p/w@h/%zz"
	sinks := c.Redacted()["sources"].(map[string]any)["demo"].(map[string]any)["sinks"].([]any)
	for i, want := range map[int]string{1: "[REDACTED]", 3: "nats://a:4222,[REDACTED]", 4: "[REDACTED]"} {
		block := c.Sources["demo"].Sinks[i].Type
		if got := sinks[i].(map[string]any)[block].(map[string]any)["url"]; got != want {
			t.Errorf("sinks[%d].%s.url = %v, want %v", i, block, got, want)
		}
	}
}

// TestRedactedIntakeJetStreamURL: a token or password written into
// intake.jetstream.url (nats://TOKEN@host, a comma-separated list) is
// hidden by GET /v1/config like the NATS sink's.
func TestRedactedIntakeJetStreamURL(t *testing.T) {
	c := config.Default()
	c.Intake.JetStream = &config.IntakeJetStream{
		URL:    "nats://s3cr3t-token@n1:4222,nats://jsuser:hunter2@n2:4222",
		Stream: "ANKUSA_INTAKE",
	}
	raw, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cr3t-token", "hunter2"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("GET /v1/config shows %q: %s", secret, raw)
		}
	}
	js := c.Redacted()["intake"].(map[string]any)["jetstream"].(map[string]any)
	if got, want := js["url"], "nats://[REDACTED]@n1:4222,nats://jsuser:[REDACTED]@n2:4222"; got != want {
		t.Errorf("intake.jetstream.url = %v, want %v", got, want)
	}
}

// A URL fragment is not shown by /v1/config: like a query, it is where a
// secret ends up in practice (https://host/in#token).
func TestRedactedURLFragmentHidden(t *testing.T) {
	c := mustLoad(t, `
sources:
  orders:
    sinks:
      - id: hook
        type: http
        http: {url: "https://orders.example/in#FRAG7777"}
`, noEnv)
	raw, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "FRAG7777") {
		t.Fatalf("/v1/config shows the URL fragment: %s", raw)
	}
	if !strings.Contains(string(raw), `https://orders.example/in#[REDACTED]`) {
		t.Fatalf("the URL is not shown with its fragment redacted: %s", raw)
	}
}
