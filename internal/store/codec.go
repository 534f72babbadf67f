package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/ankusa/ankusa/internal/hook"
)

// FROZEN FORMAT: each value starts with a version byte; a reader refuses a
// version it does not know instead of guessing. Add fields by bumping the
// version and keeping the old decoder.
const (
	envelopeV1 byte = 1
	deliveryV1 byte = 1
	dedupeV1   byte = 1
)

// ErrCorrupt is returned for a value that does not decode.
var ErrCorrupt = errors.New("store: corrupt value")

// Header is one request header kept with a hook, as received. It is the
// leaf package's type, so the sinks can carry it without importing store.
type Header = hook.Header

// Envelope is a stored hook: the raw body byte for byte plus what the edge
// learnt about it.
type Envelope struct {
	ID          [16]byte
	Seq         uint64
	ReceivedAt  int64 // unix nanoseconds
	Tenant      string
	Source      string
	ContentType string
	DedupeKey   string
	Flagged     bool
	SHA256      [32]byte
	Headers     []Header
	Body        []byte
}

// Delivery states.
const (
	StateDue       byte = 1
	StateInflight  byte = 2
	StateDelivered byte = 3
	StateDead      byte = 4
)

// StateName is the API spelling of a delivery state.
func StateName(s byte) string {
	switch s {
	case StateDue:
		return "due"
	case StateInflight:
		return "inflight"
	case StateDelivered:
		return "delivered"
	case StateDead:
		return "dead"
	}
	return "unknown"
}

// Delivery is one sink's obligation for one hook.
type Delivery struct {
	State     byte
	Attempts  uint32
	NextAtMs  int64
	Size      uint32
	SinkID    string
	LastError string
	ReplayID  string
}

// DedupeEntry is what a dedupe key points at.
type DedupeEntry struct {
	ExpiresAtMs int64
	ID          [16]byte
	Seq         uint64
}

type enc struct{ b []byte }

func (e *enc) u8(v byte)    { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) bytes(v []byte) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	e.b = append(e.b, v...)
}
func (e *enc) str(v string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	e.b = append(e.b, v...)
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) need(n int) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < n {
		d.err = ErrCorrupt
		return false
	}
	return true
}
func (d *dec) u8() byte {
	if !d.need(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}
func (d *dec) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}
func (d *dec) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}
func (d *dec) fixed(dst []byte) {
	if !d.need(len(dst)) {
		return
	}
	copy(dst, d.b)
	d.b = d.b[len(dst):]
}

// bytes is a length-prefixed field, copied out of the input.
func (d *dec) bytes() []byte {
	v := d.raw()
	if d.err != nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}
func (d *dec) str() string { return string(d.bytes()) }

// raw is a length-prefixed field as a sub-slice of the input, not copied.
func (d *dec) raw() []byte {
	if d.err != nil {
		return nil
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 || uint64(len(d.b)-k) < n {
		d.err = ErrCorrupt
		return nil
	}
	v := d.b[k : k+int(n)]
	d.b = d.b[k+int(n):]
	return v
}

func (d *dec) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrCorrupt
	}
	if d.err != nil {
		return fmt.Errorf("decode %s: %w", what, d.err)
	}
	return nil
}

// EncodeEnvelope encodes a hook for the h family into a buffer of exactly
// EnvelopeSize(v) bytes: one allocation, never grown (a request's headers
// used to overflow a guessed capacity and copy the body a second time).
func EncodeEnvelope(v *Envelope) []byte {
	return AppendEnvelope(make([]byte, 0, EnvelopeSize(v)), v)
}

// AppendEnvelope appends the encoding of v to dst: a caller that owns the
// buffer (Batch.AppendHook, encoding into the batch's own bytes) encodes
// without allocating.
func AppendEnvelope(dst []byte, v *Envelope) []byte {
	e := enc{b: dst}
	e.u8(envelopeV1)
	e.b = append(e.b, v.ID[:]...)
	e.u64(v.Seq)
	e.u64(uint64(v.ReceivedAt))
	e.str(v.Tenant)
	e.str(v.Source)
	e.str(v.ContentType)
	e.str(v.DedupeKey)
	if v.Flagged {
		e.u8(1)
	} else {
		e.u8(0)
	}
	e.b = append(e.b, v.SHA256[:]...)
	e.u32(uint32(len(v.Headers)))
	for _, h := range v.Headers {
		e.str(h.Name)
		e.str(h.Value)
	}
	e.bytes(v.Body)
	return e.b
}

// EnvelopeSize is len(EncodeEnvelope(v)).
func EnvelopeSize(v *Envelope) int {
	n := 1 + 16 + 8 + 8 + lenField(len(v.Tenant)) + lenField(len(v.Source)) +
		lenField(len(v.ContentType)) + lenField(len(v.DedupeKey)) + 1 + 32 + 4
	for _, h := range v.Headers {
		n += lenField(len(h.Name)) + lenField(len(h.Value))
	}
	return n + lenField(len(v.Body))
}

// lenField is the encoded size of a length-prefixed field of n bytes.
func lenField(n int) int { return (bits.Len64(uint64(n)|1)+6)/7 + n }

// DecodeEnvelope decodes an h value. The result shares no memory with b
// (values read during a scan live in buffers Pebble reuses): the strings
// come from one allocation, the body from another.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	v := &Envelope{}
	if _, err := decodeEnvelope(v, b, bodyCopy); err != nil {
		return nil, err
	}
	return v, nil
}

// DecodeEnvelopeViewInto decodes an h value into the caller's v with
// nothing copied: the body and every string are views of b (the
// dispatcher's attempt, v on its stack: its reads of a hook cost no
// allocation but the headers' slice). REQUIRES: b is never written again,
// not only while v is in use: a string is immutable, and a sink may keep
// one (a log attribute, a map key) after its attempt. The dispatcher's
// values are Store.Get's own copy or the commit path's encoding, which
// nothing writes once made. On an error v's contents are unspecified.
func DecodeEnvelopeViewInto(v *Envelope, b []byte) error {
	_, err := decodeEnvelope(v, b, viewAll)
	return err
}

// bodyMode is what decodeEnvelope does with the body, and with the
// strings: they are copied out of b (one allocation) in every mode but
// viewAll.
type bodyMode uint8

const (
	bodyCopy bodyMode = iota // v.Body is a copy of its own
	bodyNone                 // v.Body is nil; only its length is reported (Store.ReadHookMeta)
	viewAll                  // v.Body and the strings are views of b (DecodeEnvelopeViewInto)
)

// offset is where rest starts inside whole. REQUIRES: rest was obtained
// from whole by reslicing forward only (the decoder never does otherwise),
// so their capacities differ by exactly that offset.
func offset(whole, rest []byte) int { return cap(whole) - cap(rest) }

// decodeEnvelope decodes b into v and returns the body's length.
func decodeEnvelope(v *Envelope, b []byte, mode bodyMode) (int, error) {
	d := dec{b: b}
	if ver := d.u8(); d.err == nil && ver != envelopeV1 {
		return 0, fmt.Errorf("decode envelope: unknown version %d: %w", ver, ErrCorrupt)
	}
	*v = Envelope{}
	d.fixed(v.ID[:])
	v.Seq = d.u64()
	v.ReceivedAt = int64(d.u64())
	// First pass: validate the string fields and headers and find where
	// they end, without allocating; then copy that one region into one
	// string and cut every field out of it.
	strStart := offset(b, d.b)
	var fields [4][]byte
	for i := range fields {
		fields[i] = d.raw()
	}
	v.Flagged = d.u8() == 1
	d.fixed(v.SHA256[:])
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b)) { // each header takes ≥ 2 bytes
		d.err = ErrCorrupt
	}
	hdrStart := offset(b, d.b)
	for i := uint32(0); i < n && d.err == nil; i++ {
		d.raw()
		d.raw()
	}
	strEnd := offset(b, d.b)
	body := d.raw()
	if err := d.done("envelope"); err != nil {
		return 0, err
	}
	var region string
	if mode == viewAll {
		region = unsafe.String(unsafe.SliceData(b[strStart:]), strEnd-strStart)
	} else {
		region = string(b[strStart:strEnd])
	}
	sub := func(x []byte) string {
		o := offset(b, x) - strStart
		return region[o : o+len(x)]
	}
	v.Tenant, v.Source, v.ContentType, v.DedupeKey = sub(fields[0]), sub(fields[1]), sub(fields[2]), sub(fields[3])
	if n > 0 {
		v.Headers = make([]Header, n)
		h := dec{b: b[hdrStart:strEnd]}
		for i := range v.Headers {
			v.Headers[i] = Header{Name: sub(h.raw()), Value: sub(h.raw())}
		}
	}
	switch mode {
	case bodyCopy:
		v.Body = make([]byte, len(body))
		copy(v.Body, body)
	case viewAll:
		v.Body = body[:len(body):len(body)]
	}
	return len(body), nil
}

// EncodeDelivery encodes a d value.
func EncodeDelivery(v *Delivery) []byte {
	return appendDelivery(make([]byte, 0, deliverySize(v)), v)
}

// deliverySize bounds v's encoding (uvarint lengths of at most 3 bytes
// cover strings under 2 MiB; a longer one only grows the buffer).
func deliverySize(v *Delivery) int {
	return 1 + 1 + 4 + 8 + 4 + 3*3 + len(v.SinkID) + len(v.LastError) + len(v.ReplayID)
}

func appendDelivery(dst []byte, v *Delivery) []byte {
	e := enc{b: dst}
	e.u8(deliveryV1)
	e.u8(v.State)
	e.u32(v.Attempts)
	e.u64(uint64(v.NextAtMs))
	e.u32(v.Size)
	e.str(v.SinkID)
	e.str(v.LastError)
	e.str(v.ReplayID)
	return e.b
}

// DecodeDelivery decodes a d value.
func DecodeDelivery(b []byte) (*Delivery, error) {
	d := dec{b: b}
	if ver := d.u8(); d.err == nil && ver != deliveryV1 {
		return nil, fmt.Errorf("decode delivery: unknown version %d: %w", ver, ErrCorrupt)
	}
	v := &Delivery{State: d.u8(), Attempts: d.u32(), NextAtMs: int64(d.u64()), Size: d.u32()}
	v.SinkID = d.str()
	v.LastError = d.str()
	v.ReplayID = d.str()
	if err := d.done("delivery"); err != nil {
		return nil, err
	}
	return v, nil
}

// EncodeDedupe encodes a u value.
func EncodeDedupe(v *DedupeEntry) []byte { return appendDedupe(make([]byte, 0, 33), v) }

func appendDedupe(dst []byte, v *DedupeEntry) []byte {
	e := enc{b: dst}
	e.u8(dedupeV1)
	e.u64(uint64(v.ExpiresAtMs))
	e.b = append(e.b, v.ID[:]...)
	e.u64(v.Seq)
	return e.b
}

// DecodeDedupe decodes a u value.
func DecodeDedupe(b []byte) (*DedupeEntry, error) {
	d := dec{b: b}
	if ver := d.u8(); d.err == nil && ver != dedupeV1 {
		return nil, fmt.Errorf("decode dedupe: unknown version %d: %w", ver, ErrCorrupt)
	}
	v := &DedupeEntry{ExpiresAtMs: int64(d.u64())}
	d.fixed(v.ID[:])
	v.Seq = d.u64()
	if err := d.done("dedupe"); err != nil {
		return nil, err
	}
	return v, nil
}
