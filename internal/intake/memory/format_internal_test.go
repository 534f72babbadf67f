package memory

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/intake"
)

func sampleRecord() intake.Record {
	return intake.Record{
		Version: intake.RecordVersion, Kind: intake.KindHook, Node: "node-a", Seq: 42,
		ID:          [16]byte{0x01, 0x8f, 0x2a, 0x00, 0xff, 0x10, 0x70, 0x01, 0x80, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x01},
		Incarnation: "0", Tenant: "default", Source: "gh", Value: []byte{0, 1, 2, 0xff},
	}
}

// The headers on disk are the frozen intake header names, with the seq in
// decimal and the id as a canonical UUID, as a broker header carries them.
func TestFrame_Headers(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := sampleRecord()
	if _, err := l.PublishBatch(t.Context(), []intake.Record{r}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "node-a.log"))
	if err != nil {
		t.Fatal(err)
	}
	fr := newFrameReader(bytes.NewReader(raw), 0)
	body, off, err := fr.next()
	if err != nil || off != 0 {
		t.Fatalf("first frame: off %d, %v", off, err)
	}
	if _, _, err := fr.next(); err != io.EOF {
		t.Fatalf("after the only frame: %v, want EOF", err)
	}
	if n := binary.BigEndian.Uint32(raw); int(n) != len(raw)-frameHeadLen {
		t.Fatalf("body length %d in a %d-byte file", n, len(raw))
	}
	d, err := decodeBody(body)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		intake.HeaderVersion:     "1",
		intake.HeaderKind:        "hook",
		intake.HeaderNode:        "node-a",
		intake.HeaderSeq:         "42",
		intake.HeaderID:          "018f2a00-ff10-7001-8000-deadbeef0001",
		intake.HeaderIncarnation: "0",
		intake.HeaderTenant:      "default",
		intake.HeaderSource:      "gh",
	}
	if len(d.headers) != len(want) {
		t.Fatalf("headers %v", d.headers)
	}
	for k, v := range want {
		if d.headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, d.headers[k], v)
		}
	}
	if !bytes.Equal(d.value, r.Value) {
		t.Fatalf("value %x", d.value)
	}
}

// sampleFrameHex is sampleRecord's frame as the encoder of 515ebd6 (the
// one that built the headers as strings) printed it. The format is frozen
// (format.go): an encoder change that alters one byte fails here, not only
// a round trip that the decoder would read either way.
const sampleFrameHex = "000000e7831e9b9b01080f616e6b7573615f696e74616b655f76013112616e6b7573" +
	"615f696e74616b655f6b696e6404686f6f6b12616e6b7573615f696e74616b655f6e6f" +
	"6465066e6f64652d6111616e6b7573615f696e74616b655f73657102343210616e6b75" +
	"73615f696e74616b655f69642430313866326130302d666631302d373030312d383030" +
	"302d64656164626565663030303119616e6b7573615f696e74616b655f696e6361726e" +
	"6174696f6e013014616e6b7573615f696e74616b655f74656e616e740764656661756c" +
	"7414616e6b7573615f696e74616b655f736f7572636502676804000102ff"

func TestFrame_BytesArePinned(t *testing.T) {
	want, err := hex.DecodeString(sampleFrameHex)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		dst  []byte
	}{
		{"into nil", nil},
		{"after other bytes", []byte{0xaa, 0xbb}},
		{"into a reused buffer", make([]byte, 0, 4096)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sampleRecord()
			pre := len(c.dst)
			got, n := appendFrame(c.dst, &r)
			if !bytes.Equal(got[pre:], want) || n != len(want)-frameHeadLen {
				t.Fatalf("frame (body %d)\n got %x\nwant %x", n, got[pre:], want)
			}
		})
	}
	// Seqs of every length the header can carry, and ids of every byte.
	for i, seq := range []uint64{0, 9, 10, 1 << 63, ^uint64(0)} {
		r := sampleRecord()
		r.Seq = seq
		for j := range r.ID {
			r.ID[j] = byte(i*16 + j*17)
		}
		buf, _ := appendFrame(nil, &r)
		d, err := decodeBody(buf[frameHeadLen:])
		if err != nil {
			t.Fatal(err)
		}
		if got, err := d.record(); err != nil || got.Seq != seq || got.ID != r.ID {
			t.Fatalf("seq %d: read back %d, id %x (%v)", seq, got.Seq, got.ID, err)
		}
		if h, want := d.headers[intake.HeaderID], uuid.UUID(r.ID).String(); h != want {
			t.Fatalf("id header %q, want %q", h, want)
		}
	}
}

// An intact frame of a format this reader does not know is skipped and
// counted, never a failed replay.
func TestFrame_UnknownFormatIsSkipped(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	r := sampleRecord()
	r.Node = "n1"
	if _, err := l.PublishBatch(t.Context(), []intake.Record{r}); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()

	// Append a frame of format 2 by hand, then a normal one.
	var buf []byte
	buf, _ = appendFrame(buf, &r)
	body := bytes.Clone(buf[frameHeadLen:])
	body[0] = 2
	alien := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	alien = binary.BigEndian.AppendUint32(alien, crc32.Checksum(body, castagnoli))
	alien = append(alien, body...)
	f, err := os.OpenFile(filepath.Join(dir, "n1.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(append(alien, buf...)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	l, err = Open(Options{Dir: dir, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var got []intake.Position
	if err := l.Replay(t.Context(), -1, func(_ intake.Record, p intake.Position) error {
		got = append(got, p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != 0 || got[1] != 2 || l.Skipped() != 1 {
		t.Fatalf("replayed positions %v, skipped %d; want [0 2], 1", got, l.Skipped())
	}
}

// FuzzDecodeBody: decoding arbitrary bytes never panics, and a body that
// appendFrame wrote decodes to the record it was written from.
func FuzzDecodeBody(f *testing.F) {
	r := sampleRecord()
	buf, _ := appendFrame(nil, &r)
	f.Add(buf[frameHeadLen:])
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decodeBody(body)
		if err != nil {
			if !errors.Is(err, errMalformed) && !errors.Is(err, errUnknownFormat) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		rec, err := d.record()
		if err != nil {
			return
		}
		// A decodable record re-encodes to a frame that decodes the same.
		again, _ := appendFrame(nil, &rec)
		d2, err := decodeBody(again[frameHeadLen:])
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		rec2, err := d2.record()
		if err != nil || rec2.Seq != rec.Seq || rec2.ID != rec.ID || !bytes.Equal(rec2.Value, rec.Value) ||
			rec2.Version != rec.Version || rec2.Kind != rec.Kind || rec2.Node != rec.Node {
			t.Fatalf("round trip changed the record: %+v -> %+v (%v)", rec, rec2, err)
		}
	})
}

// FuzzFrameReader: any byte stream reads as some good frames then a clean
// end or a torn frame, never a panic, and the good frames are a prefix.
func FuzzFrameReader(f *testing.F) {
	r := sampleRecord()
	buf, _ := appendFrame(nil, &r)
	buf, _ = appendFrame(buf, &r)
	f.Add(buf)
	f.Add(buf[:len(buf)-1])
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := newFrameReader(bytes.NewReader(data), 0)
		for {
			_, off, err := fr.next()
			if err == io.EOF {
				if fr.off != int64(len(data)) {
					t.Fatalf("clean end at %d of %d", fr.off, len(data))
				}
				return
			}
			if err != nil {
				if !errors.Is(err, errTorn) || off != fr.off {
					t.Fatalf("error %v at %d (reader at %d)", err, off, fr.off)
				}
				return
			}
			if fr.off > int64(len(data)) {
				t.Fatalf("frame ends at %d past %d", fr.off, len(data))
			}
		}
	})
}

// TestFrameBound_CoversEveryFrame: encodeBatch sizes its buffer by
// frameBound, so a frame longer than its bound would only regrow it; this
// holds the bound to the encoder for the longest seq, long fields (whose
// length prefixes take several bytes) and an empty value.
func TestFrameBound_CoversEveryFrame(t *testing.T) {
	long := strings.Repeat("x", 70000)
	for _, mod := range []func(r *intake.Record){
		func(*intake.Record) {},
		func(r *intake.Record) { r.Seq = ^uint64(0) },
		func(r *intake.Record) { r.Value = nil },
		func(r *intake.Record) { r.Value = []byte(long) },
		func(r *intake.Record) { r.Tenant, r.Source, r.Node, r.Incarnation = long, long, long, long },
	} {
		r := sampleRecord()
		mod(&r)
		buf, _ := appendFrame(nil, &r)
		if b := frameBound(&r); len(buf) > b {
			t.Fatalf("frame of %d bytes, bound %d (seq %d, value %d bytes, tenant %d)", len(buf), b, r.Seq, len(r.Value), len(r.Tenant))
		}
	}
}
