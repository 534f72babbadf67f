package store

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// API-managed sources (s + id → the sources package's JSON record). The
// store keeps the bytes; internal/sources owns their encoding.

// PutSource records the stored form of API source id.
func (b *Batch) PutSource(id string, v []byte) error { return b.Set(SourceKey(id), v, nil) }

// DeleteSource removes API source id.
func (b *Batch) DeleteSource(id string) error { return b.Delete(SourceKey(id), nil) }

// ScanSources calls fn for every stored API source, by id, until fn
// returns false. v is only valid during the call.
func (s *Store) ScanSources(fn func(id string, v []byte) bool) error {
	return s.Scan([]byte{PrefixSource}, []byte{PrefixSource + 1}, func(k, v []byte) bool {
		return fn(string(k[1:]), v)
	})
}

// Runtime rate-limit overrides (r + tenant → the ratelimit package's JSON).

// PutRateOverride records tenant's override.
func (b *Batch) PutRateOverride(tenant string, v []byte) error {
	return b.Set(RateKey(tenant), v, nil)
}

// DeleteRateOverride removes tenant's override.
func (b *Batch) DeleteRateOverride(tenant string) error { return b.Delete(RateKey(tenant), nil) }

// ScanRateOverrides calls fn for every stored override, by tenant, until fn
// returns false. v is only valid during the call.
func (s *Store) ScanRateOverrides(fn func(tenant string, v []byte) bool) error {
	return s.Scan([]byte{PrefixRate}, []byte{PrefixRate + 1}, func(k, v []byte) bool {
		return fn(string(k[1:]), v)
	})
}

// The quarantine pen (p + received_at + id → the quarantine package's row
// encoding). Rows sort by the time they arrived.

// PenRef names one pen row.
type PenRef struct {
	ReceivedAtMs int64
	ID           [16]byte
}

// HeldRef is the pen row a hook with envelope env is held under: its
// receive time in ms and its id. A released hook keeps both (its record
// carries the held hook's id and receive time), so every writer of a hook
// knows the row it was released from, even from an intake-log record,
// which names no pen row (ack rule 7, internal/queue).
func HeldRef(env *Envelope) PenRef {
	return PenRef{ReceivedAtMs: time.Unix(0, env.ReceivedAt).UnixMilli(), ID: env.ID}
}

// Cursor is the row's position in the pen, for ScanPen's after (a release
// job keeps it between steps, so its bytes are stored in the job row).
func (r PenRef) Cursor() []byte { return PenKey(r.ReceivedAtMs, r.ID) }

// PenRow is one pen row as ScanPen passes it.
type PenRow struct {
	PenRef
	// Value is only valid during the ScanPen callback.
	Value []byte
}

// PenOpen is ScanPen's untilMs for "no upper bound".
const PenOpen = math.MaxInt64

// PutPen records one pen row.
func (b *Batch) PutPen(r PenRef, v []byte) error { return b.Set(r.Cursor(), v, nil) }

// DeletePen removes one pen row.
func (b *Batch) DeletePen(r PenRef) error { return b.Delete(r.Cursor(), nil) }

// TakePen removes pen row r (whose value is v) in b, the batch that writes
// the rows of the hook released from it (ack rule 7, internal/queue), and
// returns the row that puts it back if that batch is undone (the fence).
func (b *Batch) TakePen(r PenRef, v []byte) (Row, error) {
	k := r.Cursor()
	return Row{Key: k, Value: v}, b.Delete(k, nil)
}

// ReadPen returns the value of one pen row, nil if absent.
func (s *Store) ReadPen(r PenRef) ([]byte, error) { return s.Get(r.Cursor()) }

// ScanPen calls fn, oldest first, for every pen row whose received_at (ms)
// is in [sinceMs, untilMs] and whose key is after the cursor after (nil:
// from the first row), until fn returns false. A time below 0 counts as 0;
// untilMs = PenOpen leaves the range open at the top. A key in the family
// that is not a pen key (no writer makes one) is passed over.
func (s *Store) ScanPen(after []byte, sinceMs, untilMs int64, fn func(r PenRow) bool) error {
	lower := penTimeBound(max(sinceMs, 0))
	if sinceMs <= 0 {
		lower = []byte{PrefixPen}
	}
	if len(after) > 0 {
		strict := append(append(make([]byte, 0, len(after)+1), after...), 0)
		if string(strict) > string(lower) {
			lower = strict
		}
	}
	upper := []byte{PrefixPen + 1}
	if untilMs != PenOpen {
		upper = penTimeBound(max(untilMs+1, 0))
	}
	if string(lower) >= string(upper) {
		return nil
	}
	return s.Scan(lower, upper, func(k, v []byte) bool {
		at, id, ok := ParsePenKey(k)
		if !ok {
			return true
		}
		return fn(PenRow{PenRef: PenRef{ReceivedAtMs: at, ID: id}, Value: v})
	})
}

// LookupHookID reads the id index row of id (i + id): ok false if there is
// none; a row that does not hold a seq is ErrCorrupt with ok true, since
// the id is indexed either way: the operator API's hook lookup and a resend
// report the corruption, and a quarantine release and an archive replay
// count the id as stored (never written twice).
func (s *Store) LookupHookID(id [16]byte) (seq uint64, ok bool, err error) {
	v, err := s.Get(HookIDKey(id))
	if err != nil || v == nil {
		return 0, false, err
	}
	seq, ok = ParseU64(v)
	if !ok {
		return 0, true, fmt.Errorf("hook index %x: %w", id, ErrCorrupt)
	}
	return seq, true, nil
}

// HookIDStored reports whether a hook holds id: its id row exists, also
// one that does not hold a seq (LookupHookID's ErrCorrupt: the id is
// indexed either way). It is the check of the writers that must never
// write an id twice: boot recovery's replay, a quarantine release, an
// archive replay.
func (s *Store) HookIDStored(id [16]byte) (bool, error) {
	_, ok, err := s.LookupHookID(id)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return false, fmt.Errorf("look up hook %x: %w", id, err)
	}
	return ok, nil
}
