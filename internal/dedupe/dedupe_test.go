package dedupe_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dedupe"
)

func TestExtractor_Key(t *testing.T) {
	long := strings.Repeat("a", 201)
	tests := []struct {
		name   string
		cfg    *config.SourceDedupe
		header http.Header
		body   string
		want   string
	}{
		{"no dedupe configured", nil, http.Header{"X-Github-Delivery": {"d1"}}, `{}`, ""},
		{"github preset", &config.SourceDedupe{Preset: "github"}, http.Header{"X-Github-Delivery": {"d1"}}, `{}`, "d1"},
		{"standard webhooks preset", &config.SourceDedupe{Preset: "standard_webhooks"}, http.Header{"Webhook-Id": {"msg_1"}}, ``, "msg_1"},
		{"svix preset", &config.SourceDedupe{Preset: "svix"}, http.Header{"Svix-Id": {"msg_2"}}, ``, "msg_2"},
		{"svix preset falls back to webhook-id", &config.SourceDedupe{Preset: "svix"}, http.Header{"Webhook-Id": {"msg_3"}}, ``, "msg_3"},
		{"standard webhooks preset falls back to svix-id", &config.SourceDedupe{Preset: "standard_webhooks"}, http.Header{"Svix-Id": {"msg_4"}}, ``, "msg_4"},
		{"slack preset reads event_id", &config.SourceDedupe{Preset: "slack"}, nil, `{"type":"event_callback","event_id":"Ev08MFMKH6"}`, "Ev08MFMKH6"},
		{"discord preset reads the interaction id", &config.SourceDedupe{Preset: "discord"}, nil, `{"id":"123","type":2}`, "123"},
		{"twilio preset", &config.SourceDedupe{Preset: "twilio"}, http.Header{"I-Twilio-Idempotency-Token": {"tok-1"}}, ``, "tok-1"},
		{"paddle preset", &config.SourceDedupe{Preset: "paddle"}, nil, `{"event_id":"evt_01h","event_type":"transaction.paid"}`, "evt_01h"},
		{"linear preset", &config.SourceDedupe{Preset: "linear"}, http.Header{"Linear-Delivery": {"d-9"}}, ``, "d-9"},
		{"square preset", &config.SourceDedupe{Preset: "square"}, nil, `{"merchant_id":"M","event_id":"e-sq"}`, "e-sq"},
		{"intercom preset", &config.SourceDedupe{Preset: "intercom"}, nil, `{"type":"notification_event","id":"notif_1"}`, "notif_1"},
		{"gitlab preset prefers Idempotency-Key", &config.SourceDedupe{Preset: "gitlab"}, http.Header{"Idempotency-Key": {"ik"}, "X-Gitlab-Event-Uuid": {"uu"}}, ``, "ik"},
		{"gitlab preset falls back to the event UUID", &config.SourceDedupe{Preset: "gitlab"}, http.Header{"X-Gitlab-Event-Uuid": {"uu"}}, ``, "uu"},
		{"pagerduty preset", &config.SourceDedupe{Preset: "pagerduty"}, nil, `{"event":{"id":"01DEN","event_type":"incident.triggered"}}`, "01DEN"},
		{"mailgun preset", &config.SourceDedupe{Preset: "mailgun"}, nil, `{"signature":{},"event-data":{"id":"mg-1"}}`, "mg-1"},
		{"shopify preset", &config.SourceDedupe{Preset: "shopify"}, http.Header{"X-Shopify-Webhook-Id": {"s1"}}, ``, "s1"},
		{"stripe preset reads the body id", &config.SourceDedupe{Preset: "stripe"}, nil, `{"id":"evt_1","object":"event"}`, "evt_1"},
		{"custom header, any case", &config.SourceDedupe{Header: "x-event-id"}, http.Header{"X-Event-Id": {"  e7 "}}, ``, "e7"},
		{"json path", &config.SourceDedupe{JSON: "data.id"}, nil, `{"data":{"id":"abc"}}`, "abc"},
		{"json number", &config.SourceDedupe{JSON: "n"}, nil, `{"n":12345678901234567890}`, "12345678901234567890"},
		{"json object is no key", &config.SourceDedupe{JSON: "data"}, nil, `{"data":{"id":"abc"}}`, ""},
		{"invalid json is no key", &config.SourceDedupe{JSON: "id"}, nil, `not json`, ""},
		{"missing header is no key", &config.SourceDedupe{Preset: "github"}, http.Header{}, ``, ""},
		{"long key hashed", &config.SourceDedupe{Header: "X-Id"}, http.Header{"X-Id": {long}}, ``, "sha256:" + hexSHA(long)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := dedupe.New(tc.cfg).Key(tc.header, []byte(tc.body))
			if got != tc.want {
				t.Fatalf("key = %q, want %q", got, tc.want)
			}
		})
	}
	if got := dedupe.Normalize(strings.Repeat("b", 200)); len(got) != 200 {
		t.Fatalf("a 200-byte key must be kept as is, got %q", got)
	}
}

func hexSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestPresets_EveryConfigPreset: every preset the config accepts has a
// source of keys here (else it would silently dedupe nothing).
func TestPresets_EveryConfigPreset(t *testing.T) {
	for _, p := range config.DedupePresets() {
		if !dedupe.HasPreset(p) {
			t.Errorf("config accepts dedupe preset %q, which dedupe does not know", p)
		}
	}
}
