package sink

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
)

// MessageVersion is the version of the queue sinks' message JSON.
const MessageVersion = 1

// messageJSON is the body a queue sink (Kafka, JetStream, RabbitMQ) carries.
// FROZEN FORMAT: consumers parse it; add fields only with a version bump.
type messageJSON struct {
	V              int          `json:"v"`
	ID             string       `json:"id"`
	SourceID       string       `json:"source_id"`
	TenantID       string       `json:"tenant_id"`
	ReceivedAt     string       `json:"received_at"`
	ContentType    string       `json:"content_type"`
	Size           int          `json:"size"`
	DedupeKey      *string      `json:"dedupe_key"`
	ReplayID       *string      `json:"replay_id"`
	IdempotencyKey string       `json:"idempotency_key"`
	Flagged        bool         `json:"flagged"`
	Headers        []headerJSON `json:"headers"`
	SHA256         string       `json:"sha256"`
	BodyBase64     string       `json:"body_base64"`
}

type headerJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// credentialHeaders are never forwarded to queue consumers.
var credentialHeaders = map[string]bool{"authorization": true, "proxy-authorization": true, "cookie": true}

// EncodeJSON is the message JSON of m.
func EncodeJSON(m *Message) []byte {
	j := messageJSON{
		V: MessageVersion, ID: m.ID.String(), SourceID: m.Source, TenantID: m.Tenant,
		ReceivedAt: m.ReceivedAt.UTC().Format(time.RFC3339Nano), ContentType: m.ContentType,
		Size: len(m.Body), IdempotencyKey: m.IdempotencyKey(), Flagged: m.Flagged,
		Headers: make([]headerJSON, 0, len(m.Headers)),
		SHA256:  hex.EncodeToString(m.SHA256[:]), BodyBase64: base64.StdEncoding.EncodeToString(m.Body),
	}
	if m.DedupeKey != "" {
		j.DedupeKey = &m.DedupeKey
	}
	if m.ReplayID != "" {
		j.ReplayID = &m.ReplayID
	}
	for _, h := range m.Headers {
		if credentialHeaders[h.Name] {
			// The provider's credentials to Ankusa are not the consumer's
			// business, and a topic is read by many.
			continue
		}
		j.Headers = append(j.Headers, headerJSON{h.Name, h.Value})
	}
	b, _ := json.Marshal(j) // cannot fail: strings, ints and bools only
	return b
}

// Header is one broker message header.
type Header struct{ Key, Value string }

// BrokerHeaders are the headers every queue sink attaches, so a consumer can
// route and dedupe without parsing the body.
func BrokerHeaders(m *Message) []Header {
	h := []Header{
		{"ankusa_id", m.ID.String()},
		{"ankusa_source_id", m.Source},
		{"ankusa_tenant_id", m.Tenant},
		{"ankusa_message_version", strconv.Itoa(MessageVersion)},
		{"ankusa_idempotency_key", m.IdempotencyKey()},
	}
	if m.DedupeKey != "" {
		h = append(h, Header{"ankusa_dedupe_key", m.DedupeKey})
	}
	if m.ReplayID != "" {
		h = append(h, Header{"ankusa_replay_id", m.ReplayID})
	}
	if m.Flagged {
		h = append(h, Header{"ankusa_flagged", "true"})
	}
	return h
}
