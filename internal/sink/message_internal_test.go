package sink

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/hook"
)

// legacyEncodeJSON is EncodeJSON as it was before issue 14's delivery pass
// (git show 289f856:internal/sink/message.go), verbatim: the whole message,
// the body's base64 string included, through encoding/json. It is the
// oracle for the bytes consumers parse.
func legacyEncodeJSON(m *Message, f HeaderFilter) []byte {
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

// nasty is a string with what JSON escaping treats specially: quotes,
// backslashes, controls, HTML characters, invalid UTF-8, U+2028/9.
func nasty(r *rand.Rand) string {
	pieces := []string{"a", "Z", "\"", "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "<", ">", "&",
		"\xff", "\xc3", "é", "\u2028", "\u2029", "日本", "/", " ", "\x7f", "+", "="}
	var b strings.Builder
	for range r.IntN(12) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// TestEncodeJSON_SameBytesAsEncodingJSON: the message a queue consumer
// parses is byte for byte what encoding/json made of it before (FROZEN
// FORMAT), for messages with every string escaping cares about, optional
// fields set and not, dropped headers, and bodies of every length mod 3.
func TestEncodeJSON_SameBytesAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 14))
	filters := []HeaderFilter{NewHeaderFilter(nil), NewHeaderFilter([]string{}), NewHeaderFilter([]string{"X-A"})}
	for i := range 2000 {
		body := make([]byte, r.IntN(70))
		for j := range body {
			body[j] = byte(r.UintN(256))
		}
		m := &Message{
			ID: uuid.New(), Seq: r.Uint64(), Tenant: nasty(r), Source: nasty(r),
			ReceivedAt: time.Unix(0, r.Int64N(4e18)), ContentType: nasty(r),
			Body: body, Flagged: r.IntN(2) == 0,
		}
		copy(m.SHA256[:], body)
		if r.IntN(2) == 0 {
			m.DedupeKey = nasty(r) + "k"
		}
		if r.IntN(2) == 0 {
			m.ReplayID = nasty(r) + "r"
		}
		for range r.IntN(4) {
			name := []string{"authorization", "x-a", "content-type", nasty(r)}[r.IntN(4)]
			m.Headers = append(m.Headers, hook.Header{Name: name, Value: nasty(r)})
		}
		f := filters[i%len(filters)]
		got, want := EncodeJSON(m, f), legacyEncodeJSON(m, f)
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func BenchmarkEncodeJSON(b *testing.B) {
	body := bytes.Repeat([]byte(`{"k":"v"}`), 114) // 1 KiB
	m := &Message{ID: uuid.New(), Seq: 7, Tenant: "default", Source: "orders", ReceivedAt: time.Now(),
		ContentType: "application/json", Body: body,
		Headers: []hook.Header{{Name: "content-type", Value: "application/json"}, {Name: "x-signature", Value: hex.EncodeToString(body[:32])}}}
	f := NewHeaderFilter(nil)
	b.ReportAllocs()
	for b.Loop() {
		_ = EncodeJSON(m, f)
	}
}
