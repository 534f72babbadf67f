package memory

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/intake"
)

// The memory log's file format. FROZEN: a file written by one version of
// Ankusa is read by the next (a drill's log outlives the binary that wrote
// it); the layout must not change without bumping frameFormat, and a reader
// skips (and counts) a frame whose format it does not know.
//
//	file   = frame*
//	frame  = bodyLen uint32 BE | crc uint32 BE | body      (frameHeadLen bytes of head)
//	body   = format byte (frameFormat)
//	         | nHeaders uvarint
//	         | nHeaders × ( nameLen uvarint | name | valueLen uvarint | value )
//	         | valueLen uvarint | value
//
// crc is the CRC-32C (Castagnoli) of body. The headers are the record's
// metadata under the intake.Header* names, as the text a Kafka or JetStream
// header carries (seq in decimal, the hook id as a canonical UUID), so the
// memory log exercises the same header handling as the broker adapters. A
// reader ignores header names it does not know (additive changes keep
// record version "1"). The value is the record's Value, byte for byte.
//
// A frame whose head or body is incomplete, whose bodyLen is 0 or above
// maxFrameBytes, or whose crc does not match is a torn frame: a crash cut
// an append short. Only the last batch can be torn (each batch is written
// and fsynced before the next one starts), so the first torn frame ends the
// log and everything from it on is discarded.
const (
	frameHeadLen      = 8
	frameFormat  byte = 1
	// maxFrameBytes bounds one frame body; a larger bodyLen is read as a
	// torn or corrupt head, never as a reason to allocate.
	maxFrameBytes = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	// errTorn marks an incomplete or corrupt frame.
	errTorn = errors.New("torn or corrupt frame")
	// errUnknownFormat marks an intact frame (crc ok) of a format this reader
	// does not know: skipped and counted, never a failed replay.
	errUnknownFormat = errors.New("unknown frame format")
	// errMalformed marks an intact frame whose body does not parse.
	errMalformed = errors.New("malformed frame body")
)

// recordHeaders is how many headers a frame carries.
const recordHeaders = 8

// appendFrame appends r's frame to dst and returns the extended slice and
// the frame's body length. The headers, in their frozen order, are version,
// kind, node, seq, id, incarnation, tenant and source; the seq and id are
// formatted on the stack, so a frame costs no allocation beyond dst's
// growth (TestFrame_BytesArePinned holds the bytes to the old encoder's).
func appendFrame(dst []byte, r *intake.Record) ([]byte, int) {
	head := len(dst)
	dst = append(dst, make([]byte, frameHeadLen)...)
	bodyStart := len(dst)
	dst = append(dst, frameFormat)
	var seq [20]byte
	var id [36]byte
	dst = binary.AppendUvarint(dst, recordHeaders)
	dst = appendHeader(dst, intake.HeaderVersion, r.Version)
	dst = appendHeader(dst, intake.HeaderKind, r.Kind)
	dst = appendHeader(dst, intake.HeaderNode, r.Node)
	dst = appendHeader(dst, intake.HeaderSeq, strconv.AppendUint(seq[:0], r.Seq, 10))
	dst = appendHeader(dst, intake.HeaderID, formatUUID(&id, r.ID))
	dst = appendHeader(dst, intake.HeaderIncarnation, r.Incarnation)
	dst = appendHeader(dst, intake.HeaderTenant, r.Tenant)
	dst = appendHeader(dst, intake.HeaderSource, r.Source)
	dst = appendField(dst, r.Value)
	body := dst[bodyStart:]
	binary.BigEndian.PutUint32(dst[head:], uint32(len(body)))
	binary.BigEndian.PutUint32(dst[head+4:], crc32.Checksum(body, castagnoli))
	return dst, len(body)
}

func appendHeader[V string | []byte](dst []byte, name string, value V) []byte {
	return appendField(appendField(dst, name), value)
}

// frameBound is at least the bytes appendFrame appends for r: every
// length prefix counted at a uvarint's longest (10 bytes), the seq at its
// longest decimal (20) and the id as its 36-character text.
func frameBound(r *intake.Record) int {
	names := len(intake.HeaderVersion) + len(intake.HeaderKind) + len(intake.HeaderNode) + len(intake.HeaderSeq) +
		len(intake.HeaderID) + len(intake.HeaderIncarnation) + len(intake.HeaderTenant) + len(intake.HeaderSource)
	values := len(r.Version) + len(r.Kind) + len(r.Node) + 20 + 36 + len(r.Incarnation) + len(r.Tenant) + len(r.Source)
	return frameHeadLen + 1 + 10 + (2*recordHeaders+1)*10 + names + values + len(r.Value)
}

// appendField appends one length-prefixed field (uvarint length, bytes).
func appendField[V string | []byte](dst []byte, v V) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// formatUUID writes id into b as a canonical UUID, the text uuid.UUID's
// String gives (lower-case hex, 8-4-4-4-12), and returns it.
func formatUUID(b *[36]byte, id [16]byte) []byte {
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], id[10:16])
	return b[:]
}

// decodedFrame is a parsed frame body: its headers by name and its value
// (a fresh copy, never aliasing the read buffer).
type decodedFrame struct {
	headers map[string]string
	value   []byte
}

// decodeBody parses an intact frame body (its crc already checked).
func decodeBody(body []byte) (decodedFrame, error) {
	if len(body) == 0 {
		return decodedFrame{}, errMalformed
	}
	if body[0] != frameFormat {
		return decodedFrame{}, fmt.Errorf("%w %d", errUnknownFormat, body[0])
	}
	b := body[1:]
	bytesField := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, true
	}
	n, k := binary.Uvarint(b)
	// Every header takes at least two bytes, which bounds a corrupt count.
	if k <= 0 || n > uint64(len(b)-k)/2 {
		return decodedFrame{}, errMalformed
	}
	b = b[k:]
	d := decodedFrame{headers: make(map[string]string, n)}
	for range n {
		name, ok := bytesField()
		if !ok {
			return decodedFrame{}, errMalformed
		}
		value, ok := bytesField()
		if !ok {
			return decodedFrame{}, errMalformed
		}
		d.headers[string(name)] = string(value)
	}
	value, ok := bytesField()
	if !ok || len(b) != 0 {
		return decodedFrame{}, errMalformed
	}
	d.value = append([]byte{}, value...)
	return d, nil
}

// record builds the intake.Record a frame carries. It fails when the seq or
// id header does not parse; the other fields are taken as they are.
func (d decodedFrame) record() (intake.Record, error) {
	r := intake.Record{
		Version:     d.headers[intake.HeaderVersion],
		Kind:        d.headers[intake.HeaderKind],
		Node:        d.headers[intake.HeaderNode],
		Incarnation: d.headers[intake.HeaderIncarnation],
		Tenant:      d.headers[intake.HeaderTenant],
		Source:      d.headers[intake.HeaderSource],
		Value:       d.value,
	}
	var errs []error
	seq, err := strconv.ParseUint(d.headers[intake.HeaderSeq], 10, 64)
	if err != nil {
		errs = append(errs, fmt.Errorf("header %s: %w", intake.HeaderSeq, err))
	}
	r.Seq = seq
	id, err := uuid.Parse(d.headers[intake.HeaderID])
	if err != nil {
		errs = append(errs, fmt.Errorf("header %s: %w", intake.HeaderID, err))
	}
	r.ID = id
	return r, errors.Join(errs...)
}

// frameReader reads frames in order from a byte stream that starts at file
// offset off.
type frameReader struct {
	br   *bufio.Reader
	off  int64 // file offset of the next frame
	head [frameHeadLen]byte
	buf  []byte
}

func newFrameReader(r io.Reader, off int64) *frameReader {
	return &frameReader{br: bufio.NewReaderSize(r, 64<<10), off: off}
}

// next returns the next frame's body, valid until the following call, and
// the frame's file offset. It returns io.EOF at a clean end, an error
// wrapping errTorn for an incomplete or corrupt frame, and any other error
// as an I/O failure.
func (fr *frameReader) next() ([]byte, int64, error) {
	off := fr.off
	if _, err := io.ReadFull(fr.br, fr.head[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, off, fmt.Errorf("%w at offset %d: incomplete head", errTorn, off)
		}
		return nil, off, err // io.EOF: a clean end
	}
	n := binary.BigEndian.Uint32(fr.head[:4])
	if n == 0 || n > maxFrameBytes {
		return nil, off, fmt.Errorf("%w at offset %d: body length %d", errTorn, off, n)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	body := fr.buf[:n]
	if _, err := io.ReadFull(fr.br, body); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, off, fmt.Errorf("%w at offset %d: incomplete body (%d bytes)", errTorn, off, n)
		}
		return nil, off, err
	}
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(fr.head[4:]) {
		return nil, off, fmt.Errorf("%w at offset %d: crc mismatch", errTorn, off)
	}
	fr.off = off + frameHeadLen + int64(n)
	return body, off, nil
}
