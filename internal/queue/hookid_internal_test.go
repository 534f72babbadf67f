package queue

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The minted ids are RFC 9562 UUIDv7 carrying the clock's milliseconds,
// and sort in minting order: within one millisecond (more ids than the
// 12-bit sequence holds) and when the clock steps back.
func TestIDMinter_V7InMintingOrder(t *testing.T) {
	base := time.UnixMilli(1_764_590_000_000).Add(123 * time.Microsecond)
	tests := []struct {
		name  string
		clock func(i int) time.Time
	}{
		{"one instant, past the sequence's range", func(int) time.Time { return base }},
		{"a clock stepping back", func(i int) time.Time { return base.Add(-time.Duration(i) * time.Millisecond) }},
		{"a clock moving on", func(i int) time.Time { return base.Add(time.Duration(i) * 10 * time.Microsecond) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m idMinter
			var prev [16]byte
			for i := range 10_000 {
				id := m.mint(tc.clock(i))
				u := uuid.UUID(id)
				if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
					t.Fatalf("id %d %s: version %d variant %v, want 7 and RFC 4122", i, u, u.Version(), u.Variant())
				}
				if ms := int64(binary.BigEndian.Uint64(id[:8]) >> 16); i == 0 && ms != base.UnixMilli() {
					t.Fatalf("first id carries unix ms %d, want the clock's %d", ms, base.UnixMilli())
				}
				if i > 0 && bytes.Compare(id[:], prev[:]) <= 0 {
					t.Fatalf("id %d %s does not sort after %s", i, u, uuid.UUID(prev))
				}
				prev = id
			}
		})
	}
}

// Every id carries random bits of its own, also across the refills of the
// minter's random buffer: no two of 3 buffers' worth of ids share their
// random bytes (a buffer taken twice, or not advanced, repeats them).
func TestIDMinter_RandomBitsNeverRepeat(t *testing.T) {
	var m idMinter
	now := time.UnixMilli(1_764_590_000_000)
	seen := make(map[[mintRandBytes]byte]int)
	for i := range 3*mintRandBuf/mintRandBytes + 7 {
		id := m.mint(now)
		var r [mintRandBytes]byte
		copy(r[:], id[16-mintRandBytes:])
		r[0] &= 0x3f // the variant's bits are the same in every id
		if j, ok := seen[r]; ok {
			t.Fatalf("ids %d and %d carry the same random bits %x", j, i, r)
		}
		seen[r] = i
	}
}
