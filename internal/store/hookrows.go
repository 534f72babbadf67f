package store

import (
	"encoding/binary"
	"fmt"
)

// hookrows.go owns the rows a new hook is stored as — the hook row, its id
// index, its source and tenant listing indexes, one delivery row and one due
// row per sink, and its dedupe and expiry rows — so the three writers of new
// hooks (the commit path's writer, boot recovery's replay and the dual
// commit's complete-local) and the archive replay's PutRestoredHook write
// the same rows from one builder. It also
// owns the two deletions the commit path makes: the fence's undo of the
// rows of unsynced groups, and the sweep of expired dedupe rows.

// Row is one write of a hook's rows: Key → Value (nil for the empty-valued
// index rows).
type Row struct{ Key, Value []byte }

// HookSink is one delivery obligation of a new hook: its sink number (the
// delivery and due keys) and sink id (stored in the delivery row).
type HookSink struct {
	Num uint16
	ID  string
}

// NewHook describes a new hook's rows.
type NewHook struct {
	// Env is the envelope; Env.Seq is the seq the rows are keyed by.
	Env *Envelope
	// Value is Env encoded (EncodeEnvelope); nil: HookRows encodes it.
	Value []byte
	// Sinks are the hook's deliveries, each due at DueAtMs.
	Sinks   []HookSink
	DueAtMs int64
	// ReplayID tags the delivery rows of a hook a replay job brought back
	// (archive replay); "" for a new hook.
	ReplayID string
	// Dedupe writes the dedupe row of (Env.Tenant, Env.Source,
	// Env.DedupeKey) naming this hook, and its expiry row, both expiring at
	// DedupeExpiresAtMs. False: no dedupe rows (no key, or one already
	// expired).
	Dedupe            bool
	DedupeExpiresAtMs int64
}

// HookRows returns every row of h, in a fixed order: hook, id index,
// source index, tenant index, (delivery, due) per sink, dedupe, expiry.
// rows[0] is the hook row, its Value the encoded envelope.
//
// The dedupe rows ride in the hook's own rows, so a caller that writes
// them in one batch can never leave a dedupe hit naming a hook that is not
// stored (ack rule 2, internal/queue).
func HookRows(h *NewHook) []Row {
	val := h.Value
	if val == nil {
		val = EncodeEnvelope(h.Env)
	}
	rows := AppendHookRows(make([]Row, 0, HookRowCount(h)), nil, h)
	rows[0].Value = val
	return rows
}

// AppendHookRows appends the rows of h to dst in HookRows' order, their
// keys and values cut from a (nil: an arena of the hook's own), with
// rows[len(dst)].Value, the hook row's, left nil: HookRows sets it, and
// Batch.AppendHook encodes the envelope straight into the batch.
//
// A caller that writes many hooks (the commit path's writer) passes one
// arena grown once for all of them and one dst sized by HookRowCount, so a
// group costs two allocations instead of two per hook (issue 14).
func AppendHookRows(dst []Row, a *RowArena, h *NewHook) []Row {
	env := h.Env
	seq := env.Seq
	if a == nil {
		a = &RowArena{}
	}
	a.Grow(HookRowsSize(h))
	hk := a.cut(appendHookKey(a.b, seq))
	ik := a.cut(appendHookIDKey(a.b, env.ID))
	iv := a.cut(binary.BigEndian.AppendUint64(a.b, seq))
	dst = append(dst, Row{hk, nil}, Row{ik, iv})
	// The listing indexes (GET /v1/hooks?source|tenant) ride with the hook,
	// so the fence undoes them with it.
	dst = append(dst,
		Row{a.cut(appendNameSeqKey(a.b, PrefixSourceIdx, env.Source, seq)), nil},
		Row{a.cut(appendNameSeqKey(a.b, PrefixTenantIdx, env.Tenant, seq)), nil})
	for _, sk := range h.Sinks {
		k := a.cut(appendDeliveryKey(a.b, seq, sk.Num))
		nd := NewDelivery(h.DueAtMs, uint32(len(env.Body)), sk.ID, h.ReplayID)
		v := a.cut(appendDelivery(a.b, &nd))
		dst = append(dst, Row{k, v}, Row{a.cut(appendDueKey(a.b, h.DueAtMs, seq, sk.Num)), nil})
	}
	if h.Dedupe {
		uk := a.cut(appendDedupeKey(a.b, env.Tenant, env.Source, env.DedupeKey))
		v := a.cut(appendDedupe(a.b, &DedupeEntry{ExpiresAtMs: h.DedupeExpiresAtMs, ID: env.ID, Seq: seq}))
		dst = append(dst, Row{uk, v}, Row{a.cut(appendExpiryKey(a.b, h.DedupeExpiresAtMs, uk)), nil})
	}
	return dst
}

// HookRowCount is how many rows HookRows returns for h.
func HookRowCount(h *NewHook) int {
	n := 4 + 2*len(h.Sinks)
	if h.Dedupe {
		n += 2
	}
	return n
}

// RowArena carves hooks' keys and values out of shared allocations (issue
// 14: a make per key and value was about ten allocations per hook on the
// ingest path). Each piece is capped at its own length, so an append to
// one can never write into the next; if the size estimate falls short,
// append moves on to a new array and the pieces cut so far stay valid. Its
// zero value is ready; Grow reserves room for more.
type RowArena struct{ b []byte }

// Grow makes room for at least n more bytes without moving: the pieces cut
// so far stay where they are (a fresh array is started when the current
// one is short).
func (a *RowArena) Grow(n int) {
	if cap(a.b)-len(a.b) < n {
		a.b = make([]byte, 0, n)
	}
}

// Reset makes the whole array room again. REQUIRES: no piece cut from a
// since it was last reset is read again (the commit path's writer resets
// a group's arena once an fsync covered the group: the batch copied its
// keys, and the fence no longer needs them).
func (a *RowArena) Reset() { a.b = a.b[:0] }

// Cap is the size of the arena's current array in bytes.
func (a *RowArena) Cap() int { return cap(a.b) }

// NewDelivery is the delivery row a new hook is written with, per sink:
// due at dueAtMs, no attempt yet. HookRows writes it and the dispatcher's
// hot cache (Committed) reconstructs it from this one place, so the two
// can never disagree on what a fresh row holds.
func NewDelivery(dueAtMs int64, size uint32, sinkID, replayID string) Delivery {
	return Delivery{State: StateDue, NextAtMs: dueAtMs, Size: size, SinkID: sinkID, ReplayID: replayID}
}

// Committed is a new hook whose rows are durable, as the commit path hands
// it to the dispatcher (OnCommitted): everything the first delivery of each
// of its sinks needs, so that delivery reads none of the hook's rows back
// and its removal needs no scan of them. It describes exactly the rows
// HookRows wrote for the hook (ReplayID ""), nothing newer: the dispatcher
// is the one writer of delivery rows after that (delivery.go), and it
// forgets a Committed the moment it writes one of them otherwise than by
// a delivery's outcome.
type Committed struct {
	Seq     uint64
	DueAtMs int64
	// Size is the body's length (the delivery rows' Size).
	Size  uint32
	Sinks []HookSink
	// Value is the encoded envelope, the receiver's own copy; nil when the
	// commit path did not keep one (the dispatcher reads the hook row).
	Value []byte
}

// Delivery is the fresh delivery row of c's i-th sink (NewDelivery).
func (c *Committed) Delivery(i int) Delivery {
	return NewDelivery(c.DueAtMs, c.Size, c.Sinks[i].ID, "")
}

// cut takes grown (a.b with one piece appended) as the new a.b and returns
// the appended piece.
// (A moved array holds the earlier pieces at the same offsets.)
func (a *RowArena) cut(grown []byte) []byte {
	start := len(a.b)
	a.b = grown
	return grown[start:len(grown):len(grown)]
}

// HookRowsSize is the bytes HookRows cuts from its arena: every key and
// value but the envelope. It reads h.Env's Tenant, Source and DedupeKey,
// h.Sinks, h.ReplayID and h.Dedupe only, so a caller can size an arena
// before the envelope is complete.
func HookRowsSize(h *NewHook) int {
	env := h.Env
	n := 9 + 17 + 8 + (10 + len(env.Source)) + (10 + len(env.Tenant))
	for _, sk := range h.Sinks {
		n += 11 + 19 + deliverySize(&Delivery{SinkID: sk.ID, ReplayID: h.ReplayID})
	}
	if h.Dedupe {
		uk := 3 + len(env.Tenant) + len(env.Source) + len(env.DedupeKey)
		n += uk + 33 + 9 + uk - 1
	}
	return n
}

// PutHook adds every row of h to b (HookRows) and returns them: the commit
// path keeps them to undo (DeleteRows) or re-apply (PutRows) the hook.
// Errors are b's (a dead batch records nothing and Apply returns its
// error), so a caller that applies b need not check them here.
func (b *Batch) PutHook(h *NewHook) ([]Row, error) {
	rows := HookRows(h)
	return rows, b.PutRows(rows)
}

// AppendHook adds every row of h to b, as PutHook, and appends them to dst
// (AppendHookRows, keys and values cut from a), but encodes the envelope
// straight into the batch (unless h.Value is set): the appended hook row has
// no Value, and no copy of the body exists but the batch's own (issue 14:
// at 256 KiB the encode into a scratch buffer and the batch's copy of it
// were two body-sized copies). For a caller that needs no encoded value
// of its own (the fence deletes by key). Errors as PutHook's.
func (b *Batch) AppendHook(dst []Row, a *RowArena, h *NewHook) ([]Row, error) {
	first := len(dst)
	dst, err := b.AppendHookValue(dst, a, h)
	if err != nil {
		return dst, err
	}
	return dst, b.PutRowsByFamily(dst[first:])
}

// AppendHookValue is AppendHook's first half: it encodes h's envelope
// straight into b as the hook row (or, if h.Value is set, writes that
// encoding: a caller that keeps one encodes once) and appends every row
// of h to dst, but adds none of the other rows to b. The caller adds them, with the other
// hooks' of its group, by PutRowsByFamily before it applies b: they ride
// in the hook's batch all the same (ack rule 2), in the order Pebble
// inserts cheapest. The commit path's writer under wal.type: disk.
func (b *Batch) AppendHookValue(dst []Row, a *RowArena, h *NewHook) ([]Row, error) {
	first := len(dst)
	dst = AppendHookRows(dst, a, h)
	if b.err != nil {
		return dst, b.err
	}
	hk := dst[first].Key
	if h.Value != nil {
		return dst, b.Set(hk, h.Value, nil)
	}
	op := b.b.SetDeferred(len(hk), EnvelopeSize(h.Env))
	copy(op.Key, hk)
	if got := AppendEnvelope(op.Value[:0], h.Env); len(got) != len(op.Value) {
		// EnvelopeSize is exact (checkEncodingForms, TestEnvelopeRoundTrip);
		// a mismatch would leave a value with bytes of another's in it.
		panic(fmt.Sprintf("store: envelope encoded to %d bytes, sized %d", len(got), len(op.Value)))
	}
	return dst, op.Finish()
}

// PutRowsByFamily adds rows (the rows of any number of hooks, as
// AppendHookValue appended them) to b but the hook rows, family by family:
// every id index row, then every source index row, and so on, each family
// in its order in rows. Pebble's memtable inserts a key near the one
// before it for less (BenchmarkBatchKeyOrder: about 40 % less than hook
// by hook). The rows of one group never repeat a key, so the order does
// not change what the batch writes. It stops at the batch's first error,
// and panics on a row of a family it does not know: HookRows grew one
// that this list must name, or the hook would be stored without it.
func (b *Batch) PutRowsByFamily(rows []Row) error {
	families := [...]byte{PrefixHookID, PrefixSourceIdx, PrefixTenantIdx, PrefixDelivery, PrefixDue, PrefixDedupe, PrefixExpiry}
	written := 0
	for _, f := range families {
		for _, r := range rows {
			if len(r.Key) > 0 && r.Key[0] == f {
				if err := b.Set(r.Key, r.Value, nil); err != nil {
					return err
				}
				written++
			}
		}
	}
	for _, r := range rows {
		if len(r.Key) > 0 && r.Key[0] == PrefixHook {
			written++
		}
	}
	if written != len(rows) {
		panic(fmt.Sprintf("store: PutRowsByFamily: %d of %d rows of no family it writes", len(rows)-written, len(rows)))
	}
	return nil
}

// PutRows adds rows that HookRows built (complete-local re-applies a held
// record's rows), or the pen rows TakePen returned (the fence puts back
// those an undone group took). It stops at the batch's first error.
func (b *Batch) PutRows(rows []Row) error {
	for _, r := range rows {
		if err := b.Set(r.Key, r.Value, nil); err != nil {
			return err
		}
	}
	return nil
}

// DeleteRows removes rows that HookRows built: the fence undoes the groups
// no fsync covered. It stops at the batch's first error. The rows may be
// gone already (the reopen before the cleanup kept what the WAL kept), so
// the due count is recounted after its apply (duecount.go, C2).
func (b *Batch) DeleteRows(rows []Row) error {
	b.dueUnsure = true
	for _, r := range rows {
		if err := b.Delete(r.Key, nil); err != nil {
			return err
		}
	}
	return nil
}

// DeliveryRows counts the delivery rows among rows.
func DeliveryRows(rows []Row) int {
	n := 0
	for _, r := range rows {
		if len(r.Key) > 0 && r.Key[0] == PrefixDelivery {
			n++
		}
	}
	return n
}

// ExpiredDedupe is one expiry row that is due, and whether the dedupe row it
// names is still the entry it describes.
type ExpiredDedupe struct {
	expiryKey, dedupeKey []byte
	// live: the dedupe row still expires at this row's time. A key renewed
	// since points at a later expiry row of its own and is kept.
	live bool
}

// ExpiredDedupes returns up to limit expiry rows due at nowMs, oldest first,
// each with whether its dedupe row goes too. Reads only; DeleteExpired
// removes them.
func (s *Store) ExpiredDedupes(nowMs int64, limit int) ([]ExpiredDedupe, error) {
	upper := ExpiryKey(nowMs, []byte{PrefixDedupe})
	type exp struct {
		ek, uk []byte
		at     int64
	}
	var found []exp
	err := s.Scan([]byte{PrefixExpiry}, upper, func(k, _ []byte) bool {
		at, uk, ok := ParseExpiryKey(k)
		if ok {
			found = append(found, exp{ek: append([]byte(nil), k...), uk: uk, at: at})
		}
		return len(found) < limit
	})
	if err != nil || len(found) == 0 {
		return nil, err
	}
	out := make([]ExpiredDedupe, 0, len(found))
	for _, f := range found {
		v, err := s.Get(f.uk)
		if err != nil {
			return nil, err
		}
		e, derr := DecodeDedupe(v)
		out = append(out, ExpiredDedupe{expiryKey: f.ek, dedupeKey: f.uk, live: v != nil && derr == nil && e.ExpiresAtMs == f.at})
	}
	return out, nil
}

// DeleteExpired removes the expiry rows of es and the dedupe rows they
// still describe. It stops at the batch's first error.
func (b *Batch) DeleteExpired(es []ExpiredDedupe) error {
	for _, e := range es {
		if err := b.Delete(e.expiryKey, nil); err != nil {
			return err
		}
		if e.live {
			if err := b.Delete(e.dedupeKey, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// ScanHooksFrom calls fn with every hook row at seq ≥ from, in seq order,
// until fn returns false. v is the encoded envelope, valid only during the
// call (copy it to keep it).
func (s *Store) ScanHooksFrom(from uint64, fn func(seq uint64, v []byte) bool) error {
	return s.Scan(HookKey(from), []byte{PrefixHook + 1}, func(k, v []byte) bool {
		seq, ok := ParseHookKey(k)
		return !ok || fn(seq, v)
	})
}

// CountHooks is how many hook rows the store holds.
func (s *Store) CountHooks() (uint64, error) { return s.Count([]byte{PrefixHook}) }

// CountDeliveries is how many delivery rows (one per hook and sink not yet
// finished) the store holds.
func (s *Store) CountDeliveries() (uint64, error) { return s.Count([]byte{PrefixDelivery}) }
