package sink

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
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

// DefaultDropHeaders are the request headers a queue message leaves out
// when a sink configures no drop_headers: the provider's credentials to
// Ankusa (or to a proxy in front of it) are not the consumers' business,
// and a topic is read by many. Signature headers are carried, so a consumer
// can verify the provider's signature itself.
func DefaultDropHeaders() []string {
	return []string{"authorization", "cookie", "proxy-authorization"}
}

// HeaderFilter is the set of request header names a queue sink leaves out
// of its messages (lower case). The zero value drops nothing.
type HeaderFilter struct{ drop map[string]bool }

// NewHeaderFilter drops names, in any case; nil means DefaultDropHeaders,
// an empty non-nil list drops nothing.
func NewHeaderFilter(names []string) HeaderFilter {
	if names == nil {
		names = DefaultDropHeaders()
	}
	f := HeaderFilter{drop: make(map[string]bool, len(names))}
	for _, n := range names {
		f.drop[strings.ToLower(n)] = true
	}
	return f
}

// Drops reports whether the header name (lower case, as stored) is left out.
func (f HeaderFilter) Drops(name string) bool { return f.drop[name] }

// EncodeJSON is the message JSON of m, without the headers f drops.
func EncodeJSON(m *Message, f HeaderFilter) []byte {
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
		if f.Drops(h.Name) {
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
