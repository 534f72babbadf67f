package quarantine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ankusa/ankusa/internal/store"
)

// The pen's rows are the store's 'p' family (store.PenKey, store/keys.go);
// the store keeps their values as bytes and this file owns the encoding.
//
// FROZEN FORMAT (on disk; changing it needs a store format version bump):
//
//	value = version(1) = 1
//	        reason        uvarint length + bytes (a verify.Reason)
//	        source id     uvarint length + bytes
//	        tenant id     uvarint length + bytes
//	        content type  uvarint length + bytes
//	        received_at   8, big-endian unix ns
//	        body size     uvarint
//	        envelope      store.EncodeEnvelope (its own version byte first)
//
// The fields between the version and the envelope are a copy of what the
// envelope holds: they let List, Purge and Release filter and describe a row
// without decoding (and copying) its body. The envelope is the truth; a
// release commits from it alone.

// rowVersion is the value layout this code reads and writes; a reader
// refuses any other.
const rowVersion byte = 1

// errCorruptRow is returned for a pen value that does not parse.
var errCorruptRow = errors.New("quarantine: corrupt pen row")

// encodeRow builds a pen value.
func encodeRow(env *store.Envelope, reason string) []byte {
	ev := store.EncodeEnvelope(env)
	b := make([]byte, 0, 1+5*binary.MaxVarintLen64+len(reason)+len(env.Source)+len(env.Tenant)+len(env.ContentType)+8+len(ev))
	b = append(b, rowVersion)
	b = appendStr(b, reason)
	b = appendStr(b, env.Source)
	b = appendStr(b, env.Tenant)
	b = appendStr(b, env.ContentType)
	b = binary.BigEndian.AppendUint64(b, uint64(env.ReceivedAt))
	b = binary.AppendUvarint(b, uint64(len(env.Body)))
	return append(b, ev...)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// row is a parsed pen value. Its slices alias the value they were parsed
// from, so they are valid only as long as it is.
type row struct {
	reason, source, tenant, contentType []byte
	receivedAtNs                        int64
	size                                int64
	envelope                            []byte
}

// parseRow parses a pen value without decoding the envelope.
func parseRow(v []byte) (row, error) {
	var r row
	if len(v) < 1 || v[0] != rowVersion {
		if len(v) >= 1 {
			return r, fmt.Errorf("%w: unknown version %d", errCorruptRow, v[0])
		}
		return r, errCorruptRow
	}
	p := v[1:]
	var ok bool
	for _, dst := range []*[]byte{&r.reason, &r.source, &r.tenant, &r.contentType} {
		if *dst, p, ok = readStr(p); !ok {
			return r, errCorruptRow
		}
	}
	if len(p) < 8 {
		return r, errCorruptRow
	}
	r.receivedAtNs = int64(binary.BigEndian.Uint64(p))
	p = p[8:]
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)) {
		return r, errCorruptRow
	}
	r.size = int64(n)
	r.envelope = p[k:]
	if len(r.envelope) == 0 {
		return r, errCorruptRow
	}
	return r, nil
}

func readStr(p []byte) (s, rest []byte, ok bool) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return nil, nil, false
	}
	return p[k : k+int(n)], p[k+int(n):], true
}

// accounted is what a row costs the pen's byte bound: its body size, or 0
// for a row that does not parse. Every counter update uses it, so the
// total stays consistent with the rows whatever they hold.
func accounted(v []byte) int64 {
	r, err := parseRow(v)
	if err != nil {
		return 0
	}
	return r.size
}
