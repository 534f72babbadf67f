package store_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/ankusa/ankusa/internal/store"
)

// Codec invariants (codec.go is a frozen on-disk format):
//
//  1. Round trip: Decode(Encode(v)) equals v for every value, up to the two
//     representations of "nothing" (a nil Body decodes as an empty non-nil
//     slice, an empty non-nil Headers decodes as nil).
//  2. Rejection: a value whose first byte is not a known version, every
//     strict prefix of a valid encoding, and a valid encoding followed by
//     anything all fail with an error wrapping store.ErrCorrupt.
//  3. Robustness: no input makes a decoder panic.
//  4. Stability: if Decode(b) succeeds, Decode(Encode(Decode(b))) is the same
//     value, and Encode of it is a fixed point. (b itself need not be
//     canonical: e.g. a flag byte other than 0/1 decodes as false.)

func sampleEnvelope() store.Envelope {
	e := store.Envelope{
		Seq:         1 << 32,
		ReceivedAt:  1_700_000_000_123_456_789,
		Tenant:      "acme",
		Source:      "github",
		ContentType: "application/json",
		DedupeKey:   "delivery-42",
		Headers: []store.Header{
			{Name: "X-GitHub-Event", Value: "push"},
			{Name: "X-Hub-Signature-256", Value: "sha256=abc"},
		},
		Body: []byte(`{"ok":true}`),
	}
	for i := range e.ID {
		e.ID[i] = byte(i + 1)
	}
	for i := range e.SHA256 {
		e.SHA256[i] = byte(0xff - i)
	}
	return e
}

// normEnvelope maps the two spellings of "empty" to the ones the decoder
// produces, so that reflect.DeepEqual compares what matters.
func normEnvelope(e store.Envelope) store.Envelope {
	if e.Body == nil {
		e.Body = []byte{}
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	return e
}

func TestEnvelopeRoundTrip(t *testing.T) {
	manyHeaders := make([]store.Header, 1000)
	for i := range manyHeaders {
		manyHeaders[i] = store.Header{Name: fmt.Sprintf("X-H-%d", i), Value: strings.Repeat("v", i%300)}
	}
	large := make([]byte, 4<<20)
	for i := range large {
		large[i] = byte(i * 7)
	}
	tests := []struct {
		name string
		mod  func(e *store.Envelope)
	}{
		{"sample", func(e *store.Envelope) {}},
		{"zero value", func(e *store.Envelope) { *e = store.Envelope{} }},
		{"nil body", func(e *store.Envelope) { e.Body = nil }},
		{"empty body", func(e *store.Envelope) { e.Body = []byte{} }},
		{"no headers", func(e *store.Envelope) { e.Headers = nil }},
		{"empty non-nil headers", func(e *store.Envelope) { e.Headers = []store.Header{} }},
		{"large body", func(e *store.Envelope) { e.Body = large }},
		{"many headers", func(e *store.Envelope) { e.Headers = manyHeaders }},
		{"empty header name and value", func(e *store.Envelope) { e.Headers = []store.Header{{}, {Name: "", Value: "v"}, {Name: "n"}} }},
		{"binary body", func(e *store.Envelope) { e.Body = []byte(allBytes() + "\x00\x00\xff") }},
		{"binary strings", func(e *store.Envelope) {
			e.Tenant, e.Source, e.ContentType, e.DedupeKey = "\xff", "\x00", "\xc3\x28", allBytes()
			e.Headers = []store.Header{{Name: "\x00\x01", Value: "\xff\xfe\x00"}}
		}},
		{"flagged", func(e *store.Envelope) { e.Flagged = true }},
		{"not flagged", func(e *store.Envelope) { e.Flagged = false }},
		{"extreme numbers", func(e *store.Envelope) { e.Seq, e.ReceivedAt = math.MaxUint64, math.MinInt64 }},
		{"negative time", func(e *store.Envelope) { e.ReceivedAt = -1 }},
		{"max time", func(e *store.Envelope) { e.ReceivedAt = math.MaxInt64 }},
		{"long strings (multi-byte length varint)", func(e *store.Envelope) {
			e.Tenant = strings.Repeat("t", 128)
			e.DedupeKey = strings.Repeat("k", 1<<14)
			e.ContentType = strings.Repeat("c", 1<<21)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleEnvelope()
			tt.mod(&in)
			b := store.EncodeEnvelope(&in)
			out, err := store.DecodeEnvelope(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if want := normEnvelope(in); !reflect.DeepEqual(*out, want) {
				t.Fatalf("round trip differs:\n got %s\nwant %s", brief(*out), brief(want))
			}
			// The decoded value must not alias the encoded bytes: values
			// read from Pebble live in buffers it reuses.
			for i := range b {
				b[i] ^= 0x5a
			}
			if want := normEnvelope(in); !reflect.DeepEqual(*out, want) {
				t.Fatalf("decoded envelope aliases the encoded bytes")
			}
			checkEncodingForms(t, &in)
		})
	}
}

// checkEncodingForms: EnvelopeSize is the encoding's exact length (so
// EncodeEnvelope allocates once and never grows), AppendEnvelope appends
// the same bytes after what dst holds, and DecodeEnvelopeViewInto decodes
// the same value with a Body and strings that are views of its input.
func checkEncodingForms(t *testing.T, in *store.Envelope) {
	t.Helper()
	enc := store.EncodeEnvelope(in)
	if got := store.EnvelopeSize(in); got != len(enc) {
		t.Fatalf("EnvelopeSize = %d, encoding is %d bytes", got, len(enc))
	}
	if cap(enc) != len(enc) {
		t.Fatalf("EncodeEnvelope: cap %d for %d bytes (the buffer was not exactly sized)", cap(enc), len(enc))
	}
	prefix := []byte("prefix")
	app := store.AppendEnvelope(slices.Clone(prefix), in)
	if !bytes.Equal(app[:len(prefix)], prefix) || !bytes.Equal(app[len(prefix):], enc) {
		t.Fatalf("AppendEnvelope did not append the encoding after dst")
	}
	// DecodeEnvelopeViewInto: the same value, nothing copied.
	view := slices.Clone(enc)
	var vv store.Envelope
	vv.Headers = []store.Header{{Name: "stale", Value: "from an earlier decode"}}
	if err := store.DecodeEnvelopeViewInto(&vv, view); err != nil {
		t.Fatalf("DecodeEnvelopeViewInto: %v", err)
	}
	want := normEnvelope(*in)
	if !reflect.DeepEqual(vv, want) {
		t.Fatalf("DecodeEnvelopeViewInto differs:\n got %s\nwant %s", brief(vv), brief(want))
	}
	inView := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		lo := uintptr(unsafe.Pointer(&view[0]))
		return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(view))
	}
	strs := []string{vv.Tenant, vv.Source, vv.ContentType, vv.DedupeKey}
	for _, h := range vv.Headers {
		strs = append(strs, h.Name, h.Value)
	}
	for _, s := range strs {
		if s != "" && !inView(s) {
			t.Fatalf("DecodeEnvelopeViewInto copied the string %q", s)
		}
	}
	if len(vv.Body) > 0 && (&vv.Body[0] != &view[len(view)-len(vv.Body)] || cap(vv.Body) != len(vv.Body)) {
		t.Fatalf("DecodeEnvelopeViewInto's body is not the input's last %d bytes, capped", len(vv.Body))
	}
}

// brief prints an envelope without dumping megabytes.
func brief(e store.Envelope) string {
	s := fmt.Sprintf("%+v", e)
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

func sampleDelivery() store.Delivery {
	return store.Delivery{
		State:     store.StateInflight,
		Attempts:  3,
		NextAtMs:  1_700_000_000_000,
		Size:      512,
		SinkID:    "billing",
		LastError: "502 Bad Gateway",
		ReplayID:  "r-1",
	}
}

func TestDeliveryRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		v    store.Delivery
	}{
		{"sample", sampleDelivery()},
		{"zero", store.Delivery{}},
		{"due", store.Delivery{State: store.StateDue, SinkID: "s"}},
		{"delivered", store.Delivery{State: store.StateDelivered, Attempts: 1, SinkID: "s"}},
		{"dead", store.Delivery{State: store.StateDead, Attempts: math.MaxUint32, LastError: strings.Repeat("e", 10000)}},
		{"unknown state byte kept", store.Delivery{State: 0xff}},
		{"extreme numbers", store.Delivery{NextAtMs: math.MinInt64, Size: math.MaxUint32, Attempts: math.MaxUint32}},
		{"binary strings", store.Delivery{SinkID: "\x00\xff", LastError: allBytes(), ReplayID: "\xc3\x28"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := store.DecodeDelivery(store.EncodeDelivery(&tt.v))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(*got, tt.v) {
				t.Fatalf("round trip: got %+v, want %+v", *got, tt.v)
			}
		})
	}
}

func sampleDedupe() store.DedupeEntry {
	d := store.DedupeEntry{ExpiresAtMs: 1_700_000_000_000, Seq: 77}
	for i := range d.ID {
		d.ID[i] = byte(0xa0 + i)
	}
	return d
}

func TestDedupeRoundTrip(t *testing.T) {
	var allFF [16]byte
	for i := range allFF {
		allFF[i] = 0xff
	}
	tests := []struct {
		name string
		v    store.DedupeEntry
	}{
		{"sample", sampleDedupe()},
		{"zero", store.DedupeEntry{}},
		{"extreme", store.DedupeEntry{ExpiresAtMs: math.MaxInt64, ID: allFF, Seq: math.MaxUint64}},
		{"negative expiry", store.DedupeEntry{ExpiresAtMs: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := store.EncodeDedupe(&tt.v)
			if len(b) != 33 {
				t.Errorf("encoded dedupe entry has %d bytes, want 33", len(b))
			}
			got, err := store.DecodeDedupe(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if *got != tt.v {
				t.Fatalf("round trip: got %+v, want %+v", *got, tt.v)
			}
		})
	}
}

// codecCase adapts one value family to the rejection tests.
type codecCase struct {
	name   string
	valid  []byte
	decode func([]byte) error
}

func codecCases() []codecCase {
	env := sampleEnvelope()
	envEmpty := store.Envelope{}
	del := sampleDelivery()
	ded := sampleDedupe()
	decEnv := func(b []byte) error { _, err := store.DecodeEnvelope(b); return err }
	decEnvView := func(b []byte) error { var v store.Envelope; return store.DecodeEnvelopeViewInto(&v, b) }
	decDel := func(b []byte) error { _, err := store.DecodeDelivery(b); return err }
	decDed := func(b []byte) error { _, err := store.DecodeDedupe(b); return err }
	return []codecCase{
		{"envelope", store.EncodeEnvelope(&env), decEnv},
		{"empty envelope", store.EncodeEnvelope(&envEmpty), decEnv},
		{"envelope, viewed", store.EncodeEnvelope(&env), decEnvView},
		{"delivery", store.EncodeDelivery(&del), decDel},
		{"empty delivery", store.EncodeDelivery(&store.Delivery{}), decDel},
		{"dedupe", store.EncodeDedupe(&ded), decDed},
	}
}

// mustCorrupt runs decode and checks that it neither panics nor succeeds,
// and that its error wraps ErrCorrupt.
func mustCorrupt(t *testing.T, what string, decode func([]byte) error, b []byte) {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: decoder panicked on %x: %v", what, b, r)
			}
		}()
		err = decode(b)
	}()
	if err == nil {
		t.Fatalf("%s: decoded %x without error", what, b)
	}
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%s: error %v does not wrap ErrCorrupt", what, err)
	}
}

func TestDecodeRejectsUnknownVersion(t *testing.T) {
	for _, c := range codecCases() {
		t.Run(c.name, func(t *testing.T) {
			if err := c.decode(c.valid); err != nil {
				t.Fatalf("valid encoding rejected: %v", err)
			}
			if c.valid[0] != 1 {
				t.Fatalf("version byte = %d, want 1 (FormatVersion 1 layout)", c.valid[0])
			}
			for _, ver := range []byte{0, 2, 3, 0x7f, 0x80, 0xff} {
				b := append([]byte(nil), c.valid...)
				b[0] = ver
				mustCorrupt(t, fmt.Sprintf("version %d", ver), c.decode, b)
				if err := c.decode(b); !strings.Contains(err.Error(), "version") {
					t.Errorf("version %d: error %q does not name the version", ver, err)
				}
			}
		})
	}
}

func TestDecodeRejectsEveryTruncation(t *testing.T) {
	for _, c := range codecCases() {
		t.Run(c.name, func(t *testing.T) {
			for n := 0; n < len(c.valid); n++ {
				// A fresh copy of exactly n bytes, so that reading past the
				// end cannot find the rest of the original in spare capacity.
				b := append(make([]byte, 0, n), c.valid[:n]...)
				mustCorrupt(t, fmt.Sprintf("prefix of %d/%d bytes", n, len(c.valid)), c.decode, b)
			}
		})
	}
}

func TestDecodeRejectsTrailingGarbage(t *testing.T) {
	for _, c := range codecCases() {
		t.Run(c.name, func(t *testing.T) {
			for _, tail := range [][]byte{{0}, {1}, {0xff}, []byte("garbage"), c.valid} {
				b := append(append([]byte(nil), c.valid...), tail...)
				mustCorrupt(t, fmt.Sprintf("trailing %x", tail), c.decode, b)
			}
		})
	}
}

// envelopeHeaderCountOffset is where the u32 header count sits in an
// encoding of sampleEnvelope: version, id, seq, received_at, four strings,
// flag, sha256.
func envelopeHeaderCountOffset(e *store.Envelope) int {
	n := 1 + 16 + 8 + 8
	for _, s := range []string{e.Tenant, e.Source, e.ContentType, e.DedupeKey} {
		n += uvarintLen(uint64(len(s))) + len(s)
	}
	return n + 1 + 32
}

func uvarintLen(v uint64) int { return len(binary.AppendUvarint(nil, v)) }

func TestDecodeEnvelopeRejectsBadLengths(t *testing.T) {
	env := sampleEnvelope()
	valid := store.EncodeEnvelope(&env)
	hc := envelopeHeaderCountOffset(&env)
	if got := binary.BigEndian.Uint32(valid[hc:]); got != uint32(len(env.Headers)) {
		t.Fatalf("header count offset is wrong: read %d at %d", got, hc)
	}
	tenantLen := 1 + 16 + 8 + 8
	tests := []struct {
		name string
		mod  func(b []byte) []byte
	}{
		{"header count huge", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[hc:], math.MaxUint32)
			return b
		}},
		{"header count one too many", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[hc:], uint32(len(env.Headers)+1))
			return b
		}},
		{"header count one too few", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[hc:], uint32(len(env.Headers)-1))
			return b
		}},
		{"string length past the end", func(b []byte) []byte {
			b[tenantLen] = 0x7f
			return b
		}},
		{"string length varint overflows", func(b []byte) []byte {
			over := bytes.Repeat([]byte{0xff}, 10)
			over = append(over, 0x01)
			return append(append(append([]byte(nil), b[:tenantLen]...), over...), b[tenantLen+1:]...)
		}},
		{"string length near max uint64", func(b []byte) []byte {
			huge := binary.AppendUvarint(nil, math.MaxUint64)
			return append(append(append([]byte(nil), b[:tenantLen]...), huge...), b[tenantLen+1:]...)
		}},
		{"body length too long", func(b []byte) []byte {
			// The body is last: its length byte sits len(body)+1 from the end.
			b[len(b)-len(env.Body)-1]++
			return b
		}},
		{"body length too short", func(b []byte) []byte {
			b[len(b)-len(env.Body)-1]--
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.mod(append([]byte(nil), valid...))
			mustCorrupt(t, tt.name, func(b []byte) error { _, err := store.DecodeEnvelope(b); return err }, b)
		})
	}
}

// TestDecodeEnvelopeHeaderCountBoundsAllocation: a forged header count must
// be refused before the decoder allocates for it.
func TestDecodeEnvelopeHeaderCountBoundsAllocation(t *testing.T) {
	env := store.Envelope{}
	b := store.EncodeEnvelope(&env)
	hc := envelopeHeaderCountOffset(&env)
	binary.BigEndian.PutUint32(b[hc:], math.MaxUint32)
	var err error
	allocs := testing.AllocsPerRun(10, func() { _, err = store.DecodeEnvelope(b) })
	if err == nil {
		t.Fatal("forged header count accepted")
	}
	if allocs > 10 {
		t.Errorf("decoder made %.0f allocations for a forged header count", allocs)
	}
}

// A flag byte other than 0 or 1 decodes as not flagged. This pins today's
// lenient reading so a change to it is deliberate (stricter decoding would
// make such a stored hook unreadable).
func TestDecodeEnvelopeFlagByte(t *testing.T) {
	env := sampleEnvelope()
	flagAt := envelopeHeaderCountOffset(&env) - 33
	for _, tt := range []struct {
		b    byte
		want bool
	}{{0, false}, {1, true}, {2, false}, {0xff, false}} {
		b := store.EncodeEnvelope(&env)
		b[flagAt] = tt.b
		got, err := store.DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("flag byte %d: %v", tt.b, err)
		}
		if got.Flagged != tt.want {
			t.Errorf("flag byte %d: Flagged = %v, want %v", tt.b, got.Flagged, tt.want)
		}
	}
}

func TestStateName(t *testing.T) {
	for _, tt := range []struct {
		s    byte
		want string
	}{
		{store.StateDue, "due"},
		{store.StateInflight, "inflight"},
		{store.StateDelivered, "delivered"},
		{store.StateDead, "dead"},
		{0, "unknown"},
		{5, "unknown"},
		{0xff, "unknown"},
	} {
		if got := store.StateName(tt.s); got != tt.want {
			t.Errorf("StateName(%d) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

// FuzzDecodeEnvelope feeds arbitrary bytes to the envelope decoder.
//
// Invariants:
//   - DecodeEnvelope never panics; on failure its error wraps ErrCorrupt.
//   - If it succeeds with v, then DecodeEnvelope(EncodeEnvelope(v)) succeeds
//     with a value equal to v, and EncodeEnvelope of that is byte-identical
//     to EncodeEnvelope(v) (the encoding of a decoded value is canonical).
//   - Decoding does not alias the input: scribbling over it afterwards
//     leaves v unchanged.
func FuzzDecodeEnvelope(f *testing.F) {
	env := sampleEnvelope()
	f.Add(store.EncodeEnvelope(&env))
	f.Add(store.EncodeEnvelope(&store.Envelope{}))
	env.Flagged = true
	env.Body = []byte(allBytes())
	f.Add(store.EncodeEnvelope(&env))
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2})
	f.Add(bytes.Repeat([]byte{0xff}, 80))
	withHuge := store.EncodeEnvelope(&store.Envelope{})
	binary.BigEndian.PutUint32(withHuge[envelopeHeaderCountOffset(&store.Envelope{}):], math.MaxUint32)
	f.Add(withHuge)
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		v, err := store.DecodeEnvelope(in)
		if err != nil {
			if v != nil {
				t.Fatalf("decode returned a value with error %v", err)
			}
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		var vv store.Envelope
		if verr := store.DecodeEnvelopeViewInto(&vv, slices.Clone(in)); verr != nil || !reflect.DeepEqual(vv, *v) {
			t.Fatalf("DecodeEnvelopeViewInto disagrees with DecodeEnvelope: %v", verr)
		}
		snapshot := cloneEnvelope(*v)
		for i := range in {
			in[i] = ^in[i]
		}
		if !reflect.DeepEqual(*v, snapshot) {
			t.Fatalf("decoded envelope aliases its input")
		}
		enc := store.EncodeEnvelope(v)
		v2, err := store.DecodeEnvelope(enc)
		if err != nil {
			t.Fatalf("re-decode of %x failed: %v", enc, err)
		}
		if !reflect.DeepEqual(normEnvelope(*v2), normEnvelope(*v)) {
			t.Fatalf("re-decode differs:\n got %s\nwant %s", brief(*v2), brief(*v))
		}
		if enc2 := store.EncodeEnvelope(v2); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not a fixed point:\n%x\n%x", enc, enc2)
		}
	})
}

func cloneEnvelope(e store.Envelope) store.Envelope {
	e.Body = bytes.Clone(e.Body)
	e.Headers = slices.Clone(e.Headers)
	return e
}

// FuzzEnvelopeRoundTrip builds an envelope from fuzz inputs.
//
// Invariant: DecodeEnvelope(EncodeEnvelope(v)) succeeds and equals v (up to
// nil vs empty Body/Headers), and the encoding is deterministic.
//
// headerBlob is cut into headers: each name and each value is one length
// byte followed by that many bytes (fewer at the end of the blob), so names
// and values can hold any byte.
func FuzzEnvelopeRoundTrip(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), uint64(1), int64(1_700_000_000_000_000_000), "acme", "github",
		"application/json", "k-1", false, []byte{}, []byte("\x04Name\x05Value"), []byte(`{"a":1}`))
	f.Add([]byte{}, uint64(0), int64(0), "", "", "", "", false, []byte{}, []byte{}, []byte{})
	f.Add([]byte{0xff}, uint64(math.MaxUint64), int64(math.MinInt64), "\x00", "\xff", "\xc3\x28", allBytes(),
		true, bytes.Repeat([]byte{0xee}, 40), []byte("\x00\x00\x00\x00\xff"), []byte(allBytes()))
	f.Fuzz(func(t *testing.T, id []byte, seq uint64, receivedAt int64, tenant, source, contentType, dedupeKey string,
		flagged bool, sha []byte, headerBlob []byte, body []byte) {
		v := store.Envelope{
			Seq:         seq,
			ReceivedAt:  receivedAt,
			Tenant:      tenant,
			Source:      source,
			ContentType: contentType,
			DedupeKey:   dedupeKey,
			Flagged:     flagged,
			Headers:     headersFromBlob(headerBlob),
			Body:        body,
		}
		copy(v.ID[:], id)
		copy(v.SHA256[:], sha)
		enc := store.EncodeEnvelope(&v)
		if again := store.EncodeEnvelope(&v); !bytes.Equal(enc, again) {
			t.Fatalf("encoding is not deterministic")
		}
		if n := store.EnvelopeSize(&v); n != len(enc) {
			t.Fatalf("EnvelopeSize = %d, encoding is %d bytes", n, len(enc))
		}
		got, err := store.DecodeEnvelope(enc)
		if err != nil {
			t.Fatalf("decode of a fresh encoding failed: %v", err)
		}
		if want := normEnvelope(v); !reflect.DeepEqual(*got, want) {
			t.Fatalf("round trip differs:\n got %s\nwant %s", brief(*got), brief(want))
		}
	})
}

func headersFromBlob(b []byte) []store.Header {
	next := func() string {
		n := int(b[0])
		b = b[1:]
		n = min(n, len(b))
		s := string(b[:n])
		b = b[n:]
		return s
	}
	var hs []store.Header
	for len(b) > 0 {
		h := store.Header{Name: next()}
		if len(b) > 0 {
			h.Value = next()
		}
		hs = append(hs, h)
	}
	return hs
}

// FuzzDecodeDelivery: arbitrary bytes never panic the delivery decoder, and
// a successful decode re-encodes to exactly the input (every field of a
// delivery is kept verbatim, so a valid encoding is the only encoding apart
// from non-minimal length varints, which re-encode minimally and still
// decode to the same value).
func FuzzDecodeDelivery(f *testing.F) {
	d := sampleDelivery()
	f.Add(store.EncodeDelivery(&d))
	f.Add(store.EncodeDelivery(&store.Delivery{}))
	f.Add([]byte{})
	f.Add([]byte{1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := store.DecodeDelivery(b)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc := store.EncodeDelivery(v)
		v2, err := store.DecodeDelivery(enc)
		if err != nil {
			t.Fatalf("re-decode failed: %v", err)
		}
		if !reflect.DeepEqual(*v2, *v) {
			t.Fatalf("re-decode differs: %+v vs %+v", *v2, *v)
		}
		if len(enc) > len(b) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(b), len(enc))
		}
	})
}
