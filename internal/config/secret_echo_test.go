package config_test

import (
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

// A secret written unquoted as a number is refused naming the key and the
// rule, and the error never repeats it (the docs promise that rule texts
// never repeat a secret). A non-secret key still shows what it got.
func TestConfigErrorNeverEchoesAnUnquotedSecret(t *testing.T) {
	const secret = "987654321987654321"
	tests := []struct {
		name, yml, key string
	}{
		{"verify.secret", "sources:\n  s:\n    verify: {type: github, secret: " + secret + "}\n    sinks: [{type: log}]\n", "sources.s.verify.secret"},
		{"verify.secret list item", "sources:\n  s:\n    verify: {type: github, secret: [abcdefabcdefabcdef, " + secret + "]}\n    sinks: [{type: log}]\n", "sources.s.verify.secret[1]"},
		{"http.secret", "sources:\n  s:\n    sinks: [{id: h, type: http, http: {url: \"https://x.example/\", secret: " + secret + "}}]\n", "sources.s.sinks[0].http.secret"},
		{"http header value", "sources:\n  s:\n    sinks: [{id: h, type: http, http: {url: \"https://x.example/\", headers: {Authorization: " + secret + "}}}]\n", "sources.s.sinks[0].http.headers.Authorization"},
		{"kafka.sasl.password", "sources:\n  s:\n    sinks: [{id: k, type: kafka, kafka: {brokers: [\"127.0.0.1:9092\"], topic: t, sasl: {mechanism: plain, username: u, password: " + secret + "}}}]\n", "sources.s.sinks[0].kafka.sasl.password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.LoadBytes([]byte(tt.yml), noEnv)
			if err == nil {
				t.Fatal("loaded")
			}
			msg := err.Error()
			if strings.Contains(msg, secret) || strings.Contains(msg, "9.876") {
				t.Fatalf("the error repeats the secret: %s", msg)
			}
			if !strings.Contains(msg, tt.key) || !strings.Contains(msg, "put it in quotes") {
				t.Fatalf("the error does not name %s and the rule: %s", tt.key, msg)
			}
		})
	}
	_, err := config.LoadBytes([]byte("sources:\n  s:\n    tenant: 007\n    sinks: [{type: log}]\n"), noEnv)
	if err == nil || !strings.Contains(err.Error(), "got 7") {
		t.Fatalf("a non-secret key should still show the value it got: %v", err)
	}
}
