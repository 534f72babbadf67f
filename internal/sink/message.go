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

// messageHead is the body a queue sink (Kafka, JetStream, RabbitMQ)
// carries, but its last field, body_base64, which EncodeJSON appends.
// FROZEN FORMAT: consumers parse it; add fields only with a version bump.
type messageHead struct {
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

// head is m's message JSON fields but the body, without the headers f drops.
func head(m *Message, f HeaderFilter) messageHead {
	j := messageHead{
		V: MessageVersion, ID: m.ID.String(), SourceID: m.Source, TenantID: m.Tenant,
		ReceivedAt: m.ReceivedAt.UTC().Format(time.RFC3339Nano), ContentType: m.ContentType,
		Size: len(m.Body), IdempotencyKey: m.IdempotencyKey(), Flagged: m.Flagged,
		Headers: make([]headerJSON, 0, len(m.Headers)),
		SHA256:  hex.EncodeToString(m.SHA256[:]),
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
	return j
}

// bodyKey is what follows the head's last field: the body's key.
const bodyKey = `,"body_base64":"`

// EncodeJSON is the message JSON of m, without the headers f drops.
//
// encoding/json writes the fields but the body; the body's base64 is
// encoded straight into the result after them. The bytes are those of
// marshalling the whole message (TestEncodeJSON_SameBytesAsEncodingJSON):
// the body is the last field, and base64's alphabet (A–Z a–z 0–9 + / =)
// is nothing JSON escapes. Before, the body's base64 was a string of its
// own, which encoding/json then scanned and copied into a buffer that
// grew to hold it, and copied again into the result (issue 14).
func EncodeJSON(m *Message, f HeaderFilter) []byte {
	hb, _ := json.Marshal(head(m, f)) // cannot fail: strings, ints and bools only
	hb = hb[:len(hb)-1]               // the closing brace; the body's field follows
	n := base64.StdEncoding.EncodedLen(len(m.Body))
	b := make([]byte, 0, len(hb)+len(bodyKey)+n+2)
	b = append(append(b, hb...), bodyKey...)
	b = b[:len(b)+n]
	base64.StdEncoding.Encode(b[len(b)-n:], m.Body)
	return append(b, '"', '}')
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
