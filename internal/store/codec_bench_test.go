package store_test

import (
	"testing"

	"github.com/ankusa/ankusa/internal/store"
)

// BenchmarkEnvelopeCodec is a regression note for issue 14, not a gate:
// run with -benchmem. At the time of writing (1 KiB body, 6 headers)
// encode makes 1 allocation (2 before issue 14's levers: the guessed
// capacity overflowed), DecodeEnvelope 4 (35 before: two per string) and
// DecodeEnvelopeViewInto 1 (the headers' slice).
func BenchmarkEnvelopeCodec(b *testing.B) {
	env := sampleEnvelope()
	env.Body = make([]byte, 1024)
	env.Headers = []store.Header{
		{Name: "accept-encoding", Value: "gzip"}, {Name: "content-length", Value: "1024"},
		{Name: "content-type", Value: "application/json"}, {Name: "user-agent", Value: "Go-http-client/1.1"},
		{Name: "x-github-event", Value: "push"}, {Name: "x-hub-signature-256", Value: "sha256=0123456789abcdef"},
	}
	enc := store.EncodeEnvelope(&env)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = store.EncodeEnvelope(&env)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := store.DecodeEnvelope(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode view", func(b *testing.B) {
		b.ReportAllocs()
		var v store.Envelope
		for b.Loop() {
			if err := store.DecodeEnvelopeViewInto(&v, enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
