package app

import (
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
)

// TestHTTPSinkOptions_RefusesUndecodableWhsec: the secret is decoded here,
// once, by config's decoder; a whsec_ value that is not base64 fails the
// sink's construction without repeating the secret. (Was
// httpsink.TestNew_RefusesUndecodableWhsec before the sink took Options.)
func TestHTTPSinkOptions_RefusesUndecodableWhsec(t *testing.T) {
	_, err := newSink(config.SinkConfig{Type: "http", HTTP: &config.HTTPSink{URL: "http://127.0.0.1:1", TimeoutMs: 1000, Secret: "whsec_%%%not-base64"}}, 0, nil)
	if err == nil {
		t.Fatal("the sink accepted a whsec_ secret that is not base64")
	}
	if strings.Contains(err.Error(), "not-base64") {
		t.Errorf("error repeats the secret: %v", err)
	}
}

// TestOptions_Translate: each config block lands in the adapter's Options
// with its unit converted (milliseconds to a duration, a whsec_ secret to
// its key), nil staying nil.
func TestOptions_Translate(t *testing.T) {
	h, err := httpSinkOptions(&config.HTTPSink{URL: "http://h/in", TimeoutMs: 1500, Headers: map[string]string{"a": "b"}, Secret: "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="})
	if err != nil {
		t.Fatal(err)
	}
	if h.URL != "http://h/in" || h.Timeout != 1500*time.Millisecond || h.Headers["a"] != "b" || string(h.Secret) != "0123456789abcdef" {
		t.Errorf("http options %+v", h)
	}
	if h, _ := httpSinkOptions(&config.HTTPSink{URL: "http://h"}); h.Secret != nil {
		t.Errorf("no secret gave key %q", h.Secret)
	}
	k := kafkaSinkOptions(&config.KafkaSink{Brokers: []string{"b:9092"}, Topic: "t", TimeoutMs: 200,
		SASL: &config.SASL{Mechanism: "plain", Username: "u", Password: "p"},
		TLS:  &config.TLS{Enabled: true, CAFile: "ca", CertFile: "c", KeyFile: "k", InsecureSkipVerify: true}, DropHeaders: []string{}}, nil)
	if k.Timeout != 200*time.Millisecond || k.SASL == nil || k.SASL.Password != "p" || k.TLS == nil || !k.TLS.InsecureSkipVerify || k.TLS.KeyFile != "k" || k.DropHeaders == nil {
		t.Errorf("kafka options %+v", k)
	}
	if k := kafkaSinkOptions(&config.KafkaSink{}, nil); k.SASL != nil || k.TLS != nil || k.DropHeaders != nil {
		t.Errorf("kafka options without sasl, tls, drop_headers: %+v", k)
	}
	n := natsSinkOptions(&config.NATSSink{URL: "nats://h", Subject: "s", TimeoutMs: 300, NKeyFile: "seed"}, 42, nil)
	if n.Timeout != 300*time.Millisecond || n.NKeyFile != "seed" || n.MaxBody != 42 {
		t.Errorf("nats options %+v", n)
	}
	r := rabbitMQSinkOptions(&config.RabbitMQSink{URL: "amqp://h", Exchange: "x", RoutingKey: "k", TimeoutMs: 400}, nil)
	if r.Timeout != 400*time.Millisecond || r.Exchange != "x" || r.RoutingKey != "k" {
		t.Errorf("rabbitmq options %+v", r)
	}
}
