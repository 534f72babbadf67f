package store_test

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"testing"

	"github.com/ankusa/ankusa/internal/store"
)

// The key layout in keys.go is on disk and frozen. These tests pin the one
// property every scan relies on: comparing two keys byte by byte gives the
// same answer as comparing the values they encode.

// seqEdges are sequence numbers around every byte boundary of a uint64.
var seqEdges = []uint64{
	0, 1, 2, 127, 128, 254, 255, 256, 257,
	65535, 65536, 65537,
	1<<24 - 1, 1 << 24,
	math.MaxUint32 - 1, math.MaxUint32, 1 << 32, 1<<32 + 1,
	1<<40 - 1, 1 << 40, 1<<56 - 1, 1 << 56,
	math.MaxInt64, 1 << 63, math.MaxUint64 - 1, math.MaxUint64,
}

func TestHookKeyByteOrderIsNumericOrder(t *testing.T) {
	for _, a := range seqEdges {
		for _, b := range seqEdges {
			got := bytes.Compare(store.HookKey(a), store.HookKey(b))
			if want := cmp.Compare(a, b); got != want {
				t.Errorf("bytes.Compare(HookKey(%d), HookKey(%d)) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestHookKeyLayout(t *testing.T) {
	tests := []struct {
		seq  uint64
		want []byte
	}{
		{0, []byte{'h', 0, 0, 0, 0, 0, 0, 0, 0}},
		{255, []byte{'h', 0, 0, 0, 0, 0, 0, 0, 0xff}},
		{256, []byte{'h', 0, 0, 0, 0, 0, 0, 1, 0}},
		{1 << 32, []byte{'h', 0, 0, 0, 1, 0, 0, 0, 0}},
		{math.MaxUint64, []byte{'h', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
	}
	for _, tt := range tests {
		if got := store.HookKey(tt.seq); !bytes.Equal(got, tt.want) {
			t.Errorf("HookKey(%d) = %x, want %x", tt.seq, got, tt.want)
		}
	}
}

func TestHookKeyOrderPairs(t *testing.T) {
	// Explicit pairs that a little-endian or varint layout would get wrong.
	tests := []struct{ lo, hi uint64 }{
		{255, 256},
		{256, 257},
		{65535, 65536},
		{math.MaxUint32, 1 << 32},
		{1, 1 << 32},
		{math.MaxInt64, 1 << 63},
		{0, math.MaxUint64},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d<%d", tt.lo, tt.hi), func(t *testing.T) {
			if bytes.Compare(store.HookKey(tt.lo), store.HookKey(tt.hi)) >= 0 {
				t.Errorf("HookKey(%d) = %x is not below HookKey(%d) = %x",
					tt.lo, store.HookKey(tt.lo), tt.hi, store.HookKey(tt.hi))
			}
		})
	}
}

type dueTuple struct {
	at   int64
	seq  uint64
	sink uint16
}

func (a dueTuple) compare(b dueTuple) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	if c := cmp.Compare(a.seq, b.seq); c != 0 {
		return c
	}
	return cmp.Compare(a.sink, b.sink)
}

// Due times are unix milliseconds and never negative: DueKey stores them as
// uint64, so a negative time would sort after every positive one. The tuples
// below stay in that domain.
func TestDueKeyOrdersByTimeThenSeqThenSink(t *testing.T) {
	var tuples []dueTuple
	for _, at := range []int64{0, 1, 255, 256, 1 << 32, 1_700_000_000_000, math.MaxInt64} {
		for _, seq := range []uint64{0, 1, 255, 256, 1 << 32, math.MaxUint64} {
			for _, sink := range []uint16{0, 1, 255, 256, math.MaxUint16} {
				tuples = append(tuples, dueTuple{at, seq, sink})
			}
		}
	}
	for _, a := range tuples {
		ka := store.DueKey(a.at, a.seq, a.sink)
		if len(ka) != 19 || ka[0] != store.PrefixDue {
			t.Fatalf("DueKey%v = %x: want 19 bytes starting with %q", a, ka, store.PrefixDue)
		}
		for _, b := range tuples {
			got := bytes.Compare(ka, store.DueKey(b.at, b.seq, b.sink))
			if want := a.compare(b); got != want {
				t.Errorf("bytes.Compare(DueKey%v, DueKey%v) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestDueKeyPrecedence(t *testing.T) {
	// Each row: lo must sort strictly before hi although a later field of lo
	// is at its maximum and of hi at its minimum.
	tests := []struct {
		name   string
		lo, hi dueTuple
	}{
		{"time beats seq and sink", dueTuple{1, math.MaxUint64, math.MaxUint16}, dueTuple{2, 0, 0}},
		{"time across byte boundary", dueTuple{255, math.MaxUint64, math.MaxUint16}, dueTuple{256, 0, 0}},
		{"seq beats sink", dueTuple{5, 1, math.MaxUint16}, dueTuple{5, 2, 0}},
		{"seq across 2^32", dueTuple{5, math.MaxUint32, math.MaxUint16}, dueTuple{5, 1 << 32, 0}},
		{"sink last", dueTuple{5, 7, 255}, dueTuple{5, 7, 256}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo := store.DueKey(tt.lo.at, tt.lo.seq, tt.lo.sink)
			hi := store.DueKey(tt.hi.at, tt.hi.seq, tt.hi.sink)
			if bytes.Compare(lo, hi) >= 0 {
				t.Errorf("DueKey%v = %x is not below DueKey%v = %x", tt.lo, lo, tt.hi, hi)
			}
		})
	}
}

func TestDeliveryKeyOrderAndPrefix(t *testing.T) {
	seqs := []uint64{0, 255, 256, 1 << 32, math.MaxUint64}
	sinks := []uint16{0, 255, 256, math.MaxUint16}
	for _, s1 := range seqs {
		p := store.DeliveryPrefix(s1)
		end := store.PrefixEnd(p)
		for _, k1 := range sinks {
			a := store.DeliveryKey(s1, k1)
			for _, s2 := range seqs {
				for _, k2 := range sinks {
					b := store.DeliveryKey(s2, k2)
					want := cmp.Compare(s1, s2)
					if want == 0 {
						want = cmp.Compare(k1, k2)
					}
					if got := bytes.Compare(a, b); got != want {
						t.Errorf("bytes.Compare(DeliveryKey(%d,%d), DeliveryKey(%d,%d)) = %d, want %d", s1, k1, s2, k2, got, want)
					}
					// The [prefix, PrefixEnd(prefix)) range of one hook holds
					// exactly that hook's delivery rows.
					in := bytes.Compare(b, p) >= 0 && (end == nil || bytes.Compare(b, end) < 0)
					if in != (s1 == s2) {
						t.Errorf("DeliveryKey(%d,%d) in range of DeliveryPrefix(%d) = %v", s2, k2, s1, in)
					}
				}
			}
		}
	}
}

func TestExpiryKeyRoundTrip(t *testing.T) {
	tests := []struct {
		name                string
		at                  int64
		tenant, source, key string
	}{
		{"plain", 1_700_000_000_000, "acme", "github", "delivery-123"},
		{"empty key", 0, "t", "s", ""},
		{"empty tenant and source", 1, "", "", "k"},
		{"key with zero bytes", 42, "t", "s", "\x00a\x00\x00"},
		{"key of 0xff", math.MaxInt64, "t", "s", "\xff\xff\xff"},
		{"key of every byte", 1 << 40, "tenant", "source", allBytes()},
		{"invalid utf8 in key", 7, "t", "s", "\xc3\x28\xa0\xa1"},
		{"time across byte boundary", 256, "t", "s", "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dk := store.DedupeKey(tt.tenant, tt.source, tt.key)
			dkCopy := append([]byte(nil), dk...)
			ek := store.ExpiryKey(tt.at, dk)
			if !bytes.Equal(dk, dkCopy) {
				t.Fatalf("ExpiryKey modified its dedupe key argument")
			}
			if ek[0] != store.PrefixExpiry || len(ek) != 8+len(dk) {
				t.Fatalf("ExpiryKey = %x: want %q + 8 bytes + %d-byte body", ek, store.PrefixExpiry, len(dk)-1)
			}
			at, got, ok := store.ParseExpiryKey(ek)
			if !ok {
				t.Fatalf("ParseExpiryKey(%x) not ok", ek)
			}
			if at != tt.at {
				t.Errorf("expires at = %d, want %d", at, tt.at)
			}
			if !bytes.Equal(got, dk) {
				t.Errorf("dedupe key = %x, want %x", got, dk)
			}
			// The parsed key must not alias the expiry key: callers keep it
			// after the iterator that owned ek moves on.
			for i := range ek {
				ek[i] ^= 0xff
			}
			if !bytes.Equal(got, dk) {
				t.Errorf("parsed dedupe key aliases the expiry key")
			}
		})
	}
}

func TestExpiryKeyOrdersByTimeFirst(t *testing.T) {
	// A sweep scans e up to PrefixEnd of "now": every key that expired at
	// t must sort before every key that expires after t, whatever its body.
	bodies := [][]byte{
		store.DedupeKey("", "", ""),
		store.DedupeKey("a", "b", "c"),
		store.DedupeKey("\xff", "\xff", "\xff\xff"),
	}
	times := []int64{0, 1, 255, 256, 1 << 32, 1_700_000_000_000, math.MaxInt64}
	for _, t1 := range times {
		for _, b1 := range bodies {
			for _, t2 := range times {
				if t1 == t2 {
					continue
				}
				for _, b2 := range bodies {
					got := bytes.Compare(store.ExpiryKey(t1, b1), store.ExpiryKey(t2, b2))
					if want := cmp.Compare(t1, t2); got != want {
						t.Errorf("ExpiryKey(%d,%q) vs ExpiryKey(%d,%q) = %d, want %d", t1, b1, t2, b2, got, want)
					}
				}
			}
		}
	}
}

func TestParseExpiryKeyRejects(t *testing.T) {
	tests := []struct {
		name string
		k    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"prefix only", []byte{store.PrefixExpiry}},
		{"short time", []byte{store.PrefixExpiry, 0, 0, 0, 0, 0, 0, 0}},
		{"other family", append([]byte{store.PrefixDue}, make([]byte, 18)...)},
		{"dedupe key", store.DedupeKey("t", "s", "k")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, ok := store.ParseExpiryKey(tt.k); ok {
				t.Errorf("ParseExpiryKey(%x) ok, want rejected", tt.k)
			}
		})
	}
	// Exactly 9 bytes is a valid key for an empty dedupe body (u + nothing).
	at, dk, ok := store.ParseExpiryKey(store.ExpiryKey(9, []byte{store.PrefixDedupe}))
	if !ok || at != 9 || !bytes.Equal(dk, []byte{store.PrefixDedupe}) {
		t.Errorf("ParseExpiryKey of a bare expiry key = %d, %x, %v", at, dk, ok)
	}
}

func TestPrefixEnd(t *testing.T) {
	tests := []struct {
		name string
		p    []byte
		want []byte // nil: no upper bound
	}{
		{"single byte", []byte("h"), []byte("i")},
		{"normal", []byte("ab"), []byte("ac")},
		{"zero byte", []byte{0}, []byte{1}},
		{"last below 0xff", []byte{'a', 0xfe}, []byte{'a', 0xff}},
		{"trailing 0xff", []byte{'a', 0xff}, []byte("b")},
		{"several trailing 0xff", []byte{'a', 'b', 0xff, 0xff, 0xff}, []byte("ac")},
		{"0xff in the middle", []byte{'a', 0xff, 'b'}, []byte{'a', 0xff, 'c'}},
		{"one 0xff", []byte{0xff}, nil},
		{"all 0xff", []byte{0xff, 0xff, 0xff}, nil},
		{"empty", []byte{}, nil},
		{"nil", nil, nil},
		{"hook key", store.HookKey(256), store.HookKey(257)},
		{"hook key ending in 0xff is trimmed", store.HookKey(255), []byte{'h', 0, 0, 0, 0, 0, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]byte(nil), tt.p...)
			got := store.PrefixEnd(tt.p)
			if !bytes.Equal(tt.p, in) {
				t.Errorf("PrefixEnd modified its argument: %x, was %x", tt.p, in)
			}
			if tt.want == nil {
				if got != nil {
					t.Errorf("PrefixEnd(%x) = %x, want nil (no upper bound)", tt.p, got)
				}
				return
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("PrefixEnd(%x) = %x, want %x", tt.p, got, tt.want)
			}
			// The bound is above every extension of p and is not one itself.
			for _, ext := range [][]byte{nil, {0}, {0xff}, {0xff, 0xff, 0xff, 0xff}} {
				k := append(append([]byte(nil), tt.p...), ext...)
				if bytes.Compare(k, got) >= 0 {
					t.Errorf("key %x with prefix %x is not below PrefixEnd = %x", k, tt.p, got)
				}
			}
			if bytes.HasPrefix(got, tt.p) {
				t.Errorf("PrefixEnd(%x) = %x itself has the prefix", tt.p, got)
			}
		})
	}
}

// Tenant and source ids cannot contain a zero byte: config validation and
// routing reject them. DedupeKey relies on that to use 0 as a separator, and
// these tests only claim injectivity inside that domain. Keys (the client's
// dedupe header) may hold any byte, zero included.
type dedupeTriple struct{ tenant, source, key string }

func TestDedupeKeyScoping(t *testing.T) {
	// Each row: two different (tenant, source, key) triples that a naive
	// concatenation would map to the same bytes.
	tests := []struct {
		name string
		a, b dedupeTriple
	}{
		{"tenant/source boundary moves", dedupeTriple{"a", "bc", "k"}, dedupeTriple{"ab", "c", "k"}},
		{"source/key boundary moves", dedupeTriple{"a", "b", "ck"}, dedupeTriple{"a", "bc", "k"}},
		{"tenant/key across empty source", dedupeTriple{"ab", "", "k"}, dedupeTriple{"a", "", "bk"}},
		{"empty tenant", dedupeTriple{"", "ab", "k"}, dedupeTriple{"a", "b", "k"}},
		{"empty source", dedupeTriple{"a", "", "bk"}, dedupeTriple{"a", "b", "k"}},
		{"swapped tenant and source", dedupeTriple{"a", "b", "k"}, dedupeTriple{"b", "a", "k"}},
		{"key starts with zero", dedupeTriple{"a", "b", "\x00c"}, dedupeTriple{"a", "b", "c"}},
		{"key holds what looks like a separator", dedupeTriple{"a", "b", "c\x00d"}, dedupeTriple{"a", "bc", "d"}},
		{"key looks like a whole scope", dedupeTriple{"a", "b", "a\x00b\x00k"}, dedupeTriple{"a", "b", "k"}},
		{"0xff tenant", dedupeTriple{"\xff", "b", "k"}, dedupeTriple{"", "\xffb", "k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka := store.DedupeKey(tt.a.tenant, tt.a.source, tt.a.key)
			kb := store.DedupeKey(tt.b.tenant, tt.b.source, tt.b.key)
			if bytes.Equal(ka, kb) {
				t.Fatalf("DedupeKey%q == DedupeKey%q == %q", tt.a, tt.b, ka)
			}
			// A scan of one scope never reaches into another.
			if tt.a.tenant != tt.b.tenant || tt.a.source != tt.b.source {
				if inDedupeScope(kb, tt.a.tenant, tt.a.source) {
					t.Errorf("DedupeKey%q = %q falls in the scope of %q/%q", tt.b, kb, tt.a.tenant, tt.a.source)
				}
				if inDedupeScope(ka, tt.b.tenant, tt.b.source) {
					t.Errorf("DedupeKey%q = %q falls in the scope of %q/%q", tt.a, ka, tt.b.tenant, tt.b.source)
				}
			}
		})
	}
}

// inDedupeScope reports whether k lies in [scope, PrefixEnd(scope)) where
// scope is the dedupe key of tenant/source with an empty key.
func inDedupeScope(k []byte, tenant, source string) bool {
	scope := store.DedupeKey(tenant, source, "")
	end := store.PrefixEnd(scope)
	return bytes.Compare(k, scope) >= 0 && (end == nil || bytes.Compare(k, end) < 0)
}

// TestDedupeKeyInjectiveExhaustive builds every triple over a small
// alphabet chosen for its edge cases (0 only in keys, 0xff everywhere) and
// checks that no two share a key, and that each key lies in its own scope
// and in no other.
func TestDedupeKeyInjectiveExhaustive(t *testing.T) {
	ids := stringsOver("a\xff", 2)      // tenants and sources: never a zero byte
	keys := stringsOver("a\x00\xff", 3) // keys: any byte
	seen := make(map[string]dedupeTriple, len(ids)*len(ids)*len(keys))
	for _, tenant := range ids {
		for _, source := range ids {
			for _, key := range keys {
				tr := dedupeTriple{tenant, source, key}
				k := store.DedupeKey(tenant, source, key)
				if k[0] != store.PrefixDedupe {
					t.Fatalf("DedupeKey%q = %q: wrong family", tr, k)
				}
				if prev, dup := seen[string(k)]; dup {
					t.Fatalf("DedupeKey%q == DedupeKey%q == %q", tr, prev, k)
				}
				seen[string(k)] = tr
			}
		}
	}
	for k, tr := range seen {
		for _, tenant := range ids {
			for _, source := range ids {
				want := tenant == tr.tenant && source == tr.source
				if got := inDedupeScope([]byte(k), tenant, source); got != want {
					t.Fatalf("DedupeKey%q in scope %q/%q = %v, want %v", tr, tenant, source, got, want)
				}
			}
		}
	}
}

// TestDedupeKeyZeroInIDsCollides documents why the no-zero-byte rule for
// tenant and source ids is load-bearing: the layout is frozen, and with a
// zero inside an id two different scopes do produce the same key. If this
// test ever fails the layout changed, which needs a format version bump.
func TestDedupeKeyZeroInIDsCollides(t *testing.T) {
	a := store.DedupeKey("a", "b", "c\x00d")
	b := store.DedupeKey("a", "b\x00c", "d")
	c := store.DedupeKey("a\x00b", "c", "d")
	if !bytes.Equal(a, b) || !bytes.Equal(b, c) {
		t.Fatalf("expected the documented collision: %q %q %q", a, b, c)
	}
}

func TestSinkNumKeyScoping(t *testing.T) {
	// Source ids hold no zero byte (same rule as above); sink ids may. The
	// registry splits a stored key at its first zero.
	tests := []struct {
		source, sink string
		want         string
	}{
		{"github", "billing", "kgithub\x00billing"},
		{"", "s", "k\x00s"},
		{"s", "", "ks\x00"},
		{"a", "b\x00c", "ka\x00b\x00c"},
	}
	for _, tt := range tests {
		if got := store.SinkNumKey(tt.source, tt.sink); string(got) != tt.want {
			t.Errorf("SinkNumKey(%q, %q) = %q, want %q", tt.source, tt.sink, got, tt.want)
		}
	}
	if bytes.Equal(store.SinkNumKey("ab", "c"), store.SinkNumKey("a", "bc")) {
		t.Errorf("SinkNumKey does not separate source from sink")
	}
}

func TestU64RoundTrip(t *testing.T) {
	for _, v := range seqEdges {
		b := store.U64(v)
		if len(b) != 8 {
			t.Fatalf("U64(%d) has %d bytes", v, len(b))
		}
		if got, ok := store.ParseU64(b); !ok || got != v {
			t.Errorf("ParseU64(U64(%d)) = %d, %v", v, got, ok)
		}
	}
	for _, n := range []int{0, 1, 7, 9, 16} {
		if _, ok := store.ParseU64(make([]byte, n)); ok {
			t.Errorf("ParseU64 accepted %d bytes", n)
		}
	}
}

// stringsOver returns every string of length 0..maxLen over the bytes of
// alphabet.
func stringsOver(alphabet string, maxLen int) []string {
	out := []string{""}
	level := []string{""}
	for n := 1; n <= maxLen; n++ {
		var next []string
		for _, s := range level {
			for i := 0; i < len(alphabet); i++ {
				next = append(next, s+alphabet[i:i+1])
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// allBytes is a string holding every byte value once.
func allBytes() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}
