package queue

import (
	"crypto/rand"
	"sync"
	"time"
)

// idMinter mints the ids of new hooks: UUIDv7 (RFC 9562), 48 bits of unix
// milliseconds, a 12-bit sub-millisecond sequence, 62 random bits. As
// google/uuid's NewV7 does, the (milliseconds, sequence) pair rises with
// every id, so the ids one minter makes sort in minting order even within a
// millisecond or when the clock steps back.
//
// Why not uuid.NewV7: it reads its random bits through an io.Reader into an
// array that escapes, one allocation per hook (issue 14); crypto/rand.Read
// reads into the caller's array without it escaping.
//
// The random bits come from crypto/rand a buffer at a time (issue 14:
// one crypto/rand.Read per hook was a getrandom call per hook on the
// commit path); each id takes bytes no other id took.
type idMinter struct {
	mu   sync.Mutex
	last int64 // REQUIRES: mu held; milliseconds<<12 | sequence of the last id
	// rnd[len(rnd)-left:] are random bytes no id has taken yet. REQUIRES:
	// mu held.
	rnd  [mintRandBuf]byte
	left int
}

// mintRandBuf is the random bytes read at once: 512 ids' worth.
const mintRandBuf = 512 * mintRandBytes

// mintRandBytes is what one id takes: id[8:16] (62 of its bits survive the
// variant).
const mintRandBytes = 8

const nanosPerMilli = int64(time.Millisecond)

func (m *idMinter) mint(now time.Time) [16]byte {
	var id [16]byte
	nano := now.UnixNano()
	ms := nano / nanosPerMilli
	t := ms<<12 | (nano-ms*nanosPerMilli)>>8 // the sequence is < 3907
	m.mu.Lock()
	if t <= m.last {
		t = m.last + 1
	}
	m.last = t
	if m.left < mintRandBytes {
		_, _ = rand.Read(m.rnd[:]) // never fails: a failing source ends the process
		m.left = len(m.rnd)
	}
	copy(id[16-mintRandBytes:], m.rnd[len(m.rnd)-m.left:])
	m.left -= mintRandBytes
	m.mu.Unlock()
	ms, seq := t>>12, t&0xfff
	id[0], id[1], id[2], id[3], id[4], id[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	id[6] = 0x70 | byte(seq>>8) // version 7
	id[7] = byte(seq)
	id[8] = 0x80 | id[8]&0x3f // variant 10
	return id
}
