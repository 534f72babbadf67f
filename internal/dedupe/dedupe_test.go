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
		cfg    *dedupe.Options
		header http.Header
		body   string
		want   string
	}{
		{"no dedupe configured", nil, http.Header{"X-Github-Delivery": {"d1"}}, `{}`, ""},
		{"github preset", &dedupe.Options{Preset: "github"}, http.Header{"X-Github-Delivery": {"d1"}}, `{}`, "d1"},
		{"standard webhooks preset", &dedupe.Options{Preset: "standard_webhooks"}, http.Header{"Webhook-Id": {"msg_1"}}, ``, "msg_1"},
		{"svix preset", &dedupe.Options{Preset: "svix"}, http.Header{"Svix-Id": {"msg_2"}}, ``, "msg_2"},
		{"svix preset falls back to webhook-id", &dedupe.Options{Preset: "svix"}, http.Header{"Webhook-Id": {"msg_3"}}, ``, "msg_3"},
		{"standard webhooks preset falls back to svix-id", &dedupe.Options{Preset: "standard_webhooks"}, http.Header{"Svix-Id": {"msg_4"}}, ``, "msg_4"},
		{"slack preset reads event_id", &dedupe.Options{Preset: "slack"}, nil, `{"type":"event_callback","event_id":"Ev08MFMKH6"}`, "Ev08MFMKH6"},
		{"discord preset reads the interaction id", &dedupe.Options{Preset: "discord"}, nil, `{"id":"123","type":2}`, "123"},
		{"twilio preset", &dedupe.Options{Preset: "twilio"}, http.Header{"I-Twilio-Idempotency-Token": {"tok-1"}}, ``, "tok-1"},
		{"paddle preset", &dedupe.Options{Preset: "paddle"}, nil, `{"event_id":"evt_01h","event_type":"transaction.paid"}`, "evt_01h"},
		{"linear preset", &dedupe.Options{Preset: "linear"}, http.Header{"Linear-Delivery": {"d-9"}}, ``, "d-9"},
		{"square preset", &dedupe.Options{Preset: "square"}, nil, `{"merchant_id":"M","event_id":"e-sq"}`, "e-sq"},
		{"intercom preset", &dedupe.Options{Preset: "intercom"}, nil, `{"type":"notification_event","id":"notif_1"}`, "notif_1"},
		{"gitlab preset prefers Idempotency-Key", &dedupe.Options{Preset: "gitlab"}, http.Header{"Idempotency-Key": {"ik"}, "X-Gitlab-Event-Uuid": {"uu"}}, ``, "ik"},
		{"gitlab preset falls back to the event UUID", &dedupe.Options{Preset: "gitlab"}, http.Header{"X-Gitlab-Event-Uuid": {"uu"}}, ``, "uu"},
		{"pagerduty preset", &dedupe.Options{Preset: "pagerduty"}, nil, `{"event":{"id":"01DEN","event_type":"incident.triggered"}}`, "01DEN"},
		{"mailgun preset", &dedupe.Options{Preset: "mailgun"}, nil, `{"signature":{},"event-data":{"id":"mg-1"}}`, "mg-1"},
		{"shopify preset", &dedupe.Options{Preset: "shopify"}, http.Header{"X-Shopify-Webhook-Id": {"s1"}}, ``, "s1"},
		{"stripe preset reads the body id", &dedupe.Options{Preset: "stripe"}, nil, `{"id":"evt_1","object":"event"}`, "evt_1"},
		{"custom header, any case", &dedupe.Options{Header: "x-event-id"}, http.Header{"X-Event-Id": {"  e7 "}}, ``, "e7"},
		{"json path", &dedupe.Options{JSON: "data.id"}, nil, `{"data":{"id":"abc"}}`, "abc"},
		{"json number", &dedupe.Options{JSON: "n"}, nil, `{"n":12345678901234567890}`, "12345678901234567890"},
		{"json object is no key", &dedupe.Options{JSON: "data"}, nil, `{"data":{"id":"abc"}}`, ""},
		{"invalid json is no key", &dedupe.Options{JSON: "id"}, nil, `not json`, ""},
		{"missing header is no key", &dedupe.Options{Preset: "github"}, http.Header{}, ``, ""},
		{"long key hashed", &dedupe.Options{Header: "X-Id"}, http.Header{"X-Id": {long}}, ``, "sha256:" + hexSHA(long)},
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
