package logsink_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/hook"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/logsink"
)

// TestDeliverLine: one line per delivery with the documented fields
// (docs/delivery.md, "log"), never the body or a header value; nothing at
// all when the logger does not take INFO.
func TestDeliverLine(t *testing.T) {
	body := []byte(`{"secret":"do-not-log"}`)
	base := sink.Message{
		ID: uuid.MustParse("0190a5e0-0000-7000-8000-000000000001"), Seq: 42, Tenant: "acme", Source: "github",
		ContentType: "application/json", Body: body, Size: len(body), SHA256: sha256.Sum256(body), Attempt: 3,
		Headers: []hook.Header{{Name: "x-token", Value: "header-value-not-logged"}},
	}
	want := map[string]any{
		"level": "INFO", "msg": "hook delivered", "component": "sink.log",
		"id": base.ID.String(), "seq": 42.0, "tenant": "acme", "source": "github",
		"content_type": "application/json", "size": float64(len(body)),
		"sha256": hexOf(base.SHA256[:]), "attempt": 3.0,
	}
	tests := []struct {
		name  string
		level slog.Level
		mod   func(m *sink.Message)
		extra map[string]any // nil: no line expected
	}{
		{"plain", slog.LevelInfo, func(*sink.Message) {}, map[string]any{}},
		{"dedupe and replay ids", slog.LevelDebug, func(m *sink.Message) { m.DedupeKey, m.ReplayID = "k-1", "r-1" },
			map[string]any{"dedupe_key": "k-1", "replay_id": "r-1"}},
		{"warn level: no line", slog.LevelWarn, func(*sink.Message) {}, nil},
		// The dispatcher does not read the body back for the log sink
		// (sink.BodyFree): the line's size is the message's Size.
		{"no body handed over", slog.LevelInfo, func(m *sink.Message) { m.Body = nil }, map[string]any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{
				Level: tt.level,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			}))
			m := base
			tt.mod(&m)
			if err := logsink.New(log).Deliver(context.Background(), &m); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			if tt.extra == nil {
				if out.Len() != 0 {
					t.Fatalf("logged at %v: %s", tt.level, out.String())
				}
				return
			}
			if bytes.Contains(out.Bytes(), []byte("do-not-log")) || bytes.Contains(out.Bytes(), []byte("header-value-not-logged")) {
				t.Fatalf("the body reached the log: %s", out.String())
			}
			if n := bytes.Count(out.Bytes(), []byte("\n")); n != 1 {
				t.Fatalf("%d lines, want 1: %s", n, out.String())
			}
			var got map[string]any
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("line is not JSON: %v: %s", err, out.String())
			}
			exp := map[string]any{}
			for k, v := range want {
				exp[k] = v
			}
			for k, v := range tt.extra {
				exp[k] = v
			}
			if !reflect.DeepEqual(got, exp) {
				t.Fatalf("line fields:\n got %v\nwant %v", got, exp)
			}
		})
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&0xf])
	}
	return string(out)
}
