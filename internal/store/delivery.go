package store

// Delivery rows: the transitions of one sink's obligation for one hook, as
// named batch operations, and the reads the dispatcher makes of them. The
// dispatcher is the one writer of these rows after the commit path created
// them (PutHook's due rows); it never builds a key itself.
//
// A delivery (d + seq + sink) is in one state, and exactly one index row
// names it while it is due or dead:
//
//	due       q + at + seq + sink       (the due scan's order)
//	dead      x + dead_at + seq + sink  (the dead-letter queue)
//	delivered none (kept until the hook is removed, or retained)
//
// A delivery being attempted is still due in the store: the dispatcher
// holds its claim in memory only (internal/dispatch, claims.go), and a
// crash leaves the row due, to be attempted again — which is all a stored
// claim bought (issue 14: writing the claim and deleting it with the
// outcome cost about 4 % of a node's CPU). The outcome then moves the row
// from its due key (Delivered, Retry, Dead name it).
//
// Builds before that wrote a claim row (f + seq + sink → lease, state
// inflight): Reclaim returns such rows to due at boot, and nothing writes
// them any more.
//
// Each operation below moves one delivery between two states in one batch,
// so a crash leaves it in the old state or the new one, never with two
// index rows or none. Each sets the state fields it owns on dl and writes
// it; the caller sets the rest (Attempts, LastError) before. For a due
// row, NextAtMs is the time of its due key (every operation that writes a
// due key sets it so): the dispatcher finds a due row's key from its row.

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Delivered moves a delivery due at dueAtMs, whose attempt succeeded, to
// delivered at atMs. NextAtMs of a finished row is when it finished (the
// retained row's time is the newest of them).
func (b *Batch) Delivered(dueAtMs int64, seq uint64, sink uint16, dl *Delivery, atMs int64) {
	MarkDelivered(dl, atMs)
	_ = b.Delete(DueKey(dueAtMs, seq, sink), nil)
	_ = b.Set(DeliveryKey(seq, sink), EncodeDelivery(dl), nil)
}

// MarkDelivered sets the fields Delivered owns on dl without writing it:
// the dispatcher decides only after the whole outcome batch whether the
// row is written delivered or removed with its hook (then DropDue and
// DeleteDeliveredHooks are its writes).
func MarkDelivered(dl *Delivery, atMs int64) {
	dl.State, dl.NextAtMs, dl.LastError = StateDelivered, atMs, ""
}

// Retry moves a delivery due at dueAtMs, whose attempt failed, to due at
// nextMs.
func (b *Batch) Retry(dueAtMs int64, seq uint64, sink uint16, dl *Delivery, nextMs int64) {
	dl.State, dl.NextAtMs = StateDue, nextMs
	_ = b.Delete(DueKey(dueAtMs, seq, sink), nil)
	_ = b.Set(DueKey(nextMs, seq, sink), nil, nil)
	_ = b.Set(DeliveryKey(seq, sink), EncodeDelivery(dl), nil)
}

// Dead moves a delivery due at dueAtMs, whose attempt failed for good, to
// the dead-letter queue at atMs with reason (its dead row's value).
func (b *Batch) Dead(dueAtMs int64, seq uint64, sink uint16, dl *Delivery, atMs int64, reason string) {
	dl.State, dl.NextAtMs = StateDead, atMs
	_ = b.Delete(DueKey(dueAtMs, seq, sink), nil)
	_ = b.Set(DeadKey(atMs, seq, sink), []byte(reason), nil)
	_ = b.Set(DeliveryKey(seq, sink), EncodeDelivery(dl), nil)
}

// DeadFromDue moves a delivery due at dueAtMs to the dead-letter queue at
// atMs with reason, without an attempt (its sink was removed). Its
// NextAtMs is 0, as such rows always had: a resend finds their dead row
// by a scan of the queue.
func (b *Batch) DeadFromDue(dueAtMs int64, seq uint64, sink uint16, dl *Delivery, atMs int64, reason string) {
	dl.State, dl.NextAtMs, dl.LastError = StateDead, 0, reason
	_ = b.Delete(DueKey(dueAtMs, seq, sink), nil)
	_ = b.Set(DeliveryKey(seq, sink), EncodeDelivery(dl), nil)
	_ = b.Set(DeadKey(atMs, seq, sink), []byte(reason), nil)
}

// Revive moves a dead delivery (its dead row r) back to due at atMs for
// the replay job replayID, with a fresh attempt budget.
func (b *Batch) Revive(r DeadRow, dl *Delivery, atMs int64, replayID string) {
	dl.State, dl.NextAtMs, dl.Attempts, dl.ReplayID = StateDue, atMs, 0, replayID
	_ = b.Delete(r.key(), nil)
	_ = b.Set(DueKey(atMs, r.Seq, r.Sink), nil, nil)
	_ = b.Set(DeliveryKey(r.Seq, r.Sink), EncodeDelivery(dl), nil)
}

// Resend moves a delivered or dead delivery back to due at atMs, tagged
// replayID. Attempts keep counting, so the attempt log keeps every attempt.
// A dead delivery's dead row is removed with DropDead in the same batch.
func (b *Batch) Resend(seq uint64, sink uint16, dl *Delivery, atMs int64, replayID string) {
	dl.State, dl.NextAtMs, dl.LastError, dl.ReplayID = StateDue, atMs, "", replayID
	_ = b.Set(DeliveryKey(seq, sink), EncodeDelivery(dl), nil)
	_ = b.Set(DueKey(atMs, seq, sink), nil, nil)
}

// Reclaim moves a delivery an older build left in flight (its f row: the
// node stopped while the attempt ran, so its outcome is unknown) back to
// due at atMs, without spending an attempt.
func (b *Batch) Reclaim(seq uint64, sink uint16, dl *Delivery, atMs int64) {
	dl.State, dl.NextAtMs = StateDue, atMs
	_ = b.Delete(InflightKey(seq, sink), nil)
	_ = b.Set(DeliveryKey(seq, sink), EncodeDelivery(dl), nil)
	_ = b.Set(DueKey(atMs, seq, sink), nil, nil)
}

// DropDue removes a due row: its delivery row is gone (left by an
// interrupted reclaim of an older build) or no longer due, or its hook is
// removed in the same batch.
func (b *Batch) DropDue(atMs int64, seq uint64, sink uint16) {
	_ = b.Delete(DueKey(atMs, seq, sink), nil)
}

// DropFreshDue removes the due row of a delivery removed with its hook in
// the same batch (DeleteDeliveredHooks) whose rows are Fresh: a single
// delete, under W1.
func (b *Batch) DropFreshDue(atMs int64, seq uint64, sink uint16) {
	var k [dueKeyLen]byte // on the stack: the delete copies it
	_ = b.singleDelete(appendDueKey(k[:0], atMs, seq, sink))
}

// DropInflight removes an older build's in-flight row whose delivery row
// is gone.
func (b *Batch) DropInflight(seq uint64, sink uint16) {
	_ = b.Delete(InflightKey(seq, sink), nil)
}

// DropDead removes a dead row: its delivery is resent, or gone.
func (b *Batch) DropDead(r DeadRow) {
	_ = b.Delete(r.key(), nil)
}

// PutAttempt logs the n-th finished attempt of a delivery.
func (b *Batch) PutAttempt(seq uint64, sink uint16, n uint32, a *Attempt) {
	_ = b.Set(AttemptKey(seq, sink, n), EncodeAttempt(a), nil)
}

// PutRetained writes the retained row of a fully delivered hook: its body
// size, at the newest NextAtMs of its delivery rows.
func (b *Batch) PutRetained(r RetainedRow) {
	_ = b.Set(RetainedKey(r.AtMs, r.Seq), U64(uint64(r.Size)), nil)
}

// DropRetained removes a retained row.
func (b *Batch) DropRetained(r RetainedRow) {
	_ = b.Delete(RetainedKey(r.AtMs, r.Seq), nil)
}

// PutJob writes a replay job's JSON under its id.
func (b *Batch) PutJob(id string, v []byte) {
	_ = b.Set(JobKey(id), v, nil)
}

// DeleteHook removes every row of a hook as StoredRows read them. Returns
// how many delivery rows it removed.
func (b *Batch) DeleteHook(rows *StoredRows) int {
	for _, k := range rows.keys {
		_ = b.Delete(k, nil)
	}
	return rows.deliveries
}

// StoredRows is every row of one stored hook but its retained row and
// dedupe rows, as read by Store.StoredRows, for DeleteHook. (HookRows,
// hookrows.go, builds a new hook's rows; this reads an existing one's.)
type StoredRows struct {
	keys       [][]byte
	deliveries int
}

// Deliveries is how many delivery rows the hook has.
func (h *StoredRows) Deliveries() int { return h.deliveries }

// StoredRows lists every row of the hook env (at env.Seq) but its retained
// (g) row and its dedupe rows (they live until their TTL).
func (s *Store) StoredRows(env *Envelope) (*StoredRows, error) {
	keys, err := s.HookRowKeys(env)
	if err != nil {
		return nil, err
	}
	h := &StoredRows{keys: keys}
	for _, k := range keys {
		if len(k) > 0 && k[0] == PrefixDelivery {
			h.deliveries++
		}
	}
	return h, nil
}

// DeadRow is one row of the dead-letter queue.
type DeadRow struct {
	AtMs   int64 // when it was dead-lettered
	Seq    uint64
	Sink   uint16
	Reason string
}

func (r DeadRow) key() []byte { return DeadKey(r.AtMs, r.Seq, r.Sink) }

// Cursor is the row's position in the queue, for ScanDead's after.
func (r DeadRow) Cursor() []byte { return r.key() }

// RetainedRow is one retained hook (history): its delivered_at, seq and
// body size.
type RetainedRow struct {
	AtMs int64
	Seq  uint64
	Size int64
}

// ReadHook returns the encoded envelope of hook seq, nil if absent.
func (s *Store) ReadHook(seq uint64) ([]byte, error) { return s.Get(HookKey(seq)) }

// ReadHookMeta decodes hook seq's envelope into v without its body: v.Body
// is nil, and bodyLen is the body's length. Only the other fields are
// copied out of the store, never the body, which ReadHook copies whole: a
// sink that reads no body (sink.BodyFree, the log sink) is delivered
// without it (at 256 KiB, that copy was 90 % of the bytes allocated per
// hook and a tenth of its CPU, issue 14). found is false, and v untouched,
// if seq is absent; on an error (ErrCorrupt for a value that does not
// decode) v's contents are unspecified.
func (s *Store) ReadHookMeta(seq uint64, v *Envelope) (bodyLen int, found bool, err error) {
	found, err = s.view(HookKey(seq), func(b []byte) error {
		var derr error
		bodyLen, derr = decodeEnvelope(v, b, bodyNone)
		return derr
	})
	return bodyLen, found, err
}

// ReadDelivery returns delivery (seq, sink), nil if absent.
func (s *Store) ReadDelivery(seq uint64, sink uint16) (*Delivery, error) {
	v, err := s.Get(DeliveryKey(seq, sink))
	if err != nil || v == nil {
		return nil, err
	}
	dl, err := DecodeDelivery(v)
	if err != nil {
		return nil, fmt.Errorf("delivery %d/%d: %w", seq, sink, err)
	}
	return dl, nil
}

// ScanDue calls fn for every due row at or after fromMs, earliest first,
// until fn returns false.
func (s *Store) ScanDue(fromMs int64, fn func(atMs int64, seq uint64, sink uint16) bool) error {
	return s.Scan(DueKey(max(fromMs, 0), 0, 0), []byte{PrefixDue + 1}, func(k, _ []byte) bool {
		at, seq, sink, ok := ParseTimedKey(k)
		return !ok || fn(at, seq, sink)
	})
}

// HasDue reports whether delivery (seq, sink) has a due row at atMs.
func (s *Store) HasDue(atMs int64, seq uint64, sink uint16) (bool, error) {
	v, err := s.Get(DueKey(atMs, seq, sink))
	return v != nil, err
}

// OldestDue is the time of the earliest due row (ok false if none).
func (s *Store) OldestDue() (atMs int64, ok bool, err error) {
	err = s.ScanDue(0, func(at int64, _ uint64, _ uint16) bool {
		atMs, ok = at, true
		return false
	})
	return atMs, ok, err
}

// CountDue counts the due rows (a scan: not for a hot path).
func (s *Store) CountDue() (uint64, error) { return s.Count([]byte{PrefixDue}) }

// CountDead counts the dead rows (a scan).
func (s *Store) CountDead() (uint64, error) { return s.Count([]byte{PrefixDead}) }

// ScanInflight calls fn for every in-flight row an older build left
// until fn returns false.
func (s *Store) ScanInflight(fn func(seq uint64, sink uint16) bool) error {
	return s.Scan([]byte{PrefixInflight}, []byte{PrefixInflight + 1}, func(k, _ []byte) bool {
		seq, sink, ok := ParseSeqSinkKey(k)
		return !ok || fn(seq, sink)
	})
}

// ScanDead calls fn for the dead rows dead-lettered at or after sinceMs
// and at or before untilMs (untilMs < 0: no bound), strictly after the
// row at cursor after (nil: from the start), oldest first, until fn
// returns false.
func (s *Store) ScanDead(after []byte, sinceMs, untilMs int64, fn func(r DeadRow) bool) error {
	lower := DeadKey(max(sinceMs, 0), 0, 0)
	if len(after) > 0 {
		c := append(append([]byte(nil), after...), 0) // strictly after the cursor
		if string(c) > string(lower) {
			lower = c
		}
	}
	upper := []byte{PrefixDead + 1}
	if untilMs >= 0 {
		upper = DeadKey(untilMs+1, 0, 0)
	}
	return s.Scan(lower, upper, func(k, v []byte) bool {
		at, seq, sink, ok := ParseTimedKey(k)
		return !ok || fn(DeadRow{AtMs: at, Seq: seq, Sink: sink, Reason: string(v)})
	})
}

// FindDead returns the dead row of delivery (seq, sink): at atMs when the
// row's NextAtMs says when it died, else by a scan of the queue (rows
// dead-lettered without an attempt). ok false if there is none.
func (s *Store) FindDead(seq uint64, sink uint16, atMs int64) (r DeadRow, ok bool, err error) {
	if atMs != 0 {
		v, err := s.Get(DeadKey(atMs, seq, sink))
		if err != nil || v != nil {
			return DeadRow{AtMs: atMs, Seq: seq, Sink: sink, Reason: string(v)}, err == nil, err
		}
	}
	err = s.ScanDead(nil, 0, -1, func(d DeadRow) bool {
		if d.Seq == seq && d.Sink == sink {
			r, ok = d, true
			return false
		}
		return true
	})
	return r, ok, err
}

// ScanDeliveries calls fn for every delivery row of hook seq, by sink
// number, with its encoded value (valid during the call only), until fn
// returns false.
func (s *Store) ScanDeliveries(seq uint64, fn func(sink uint16, v []byte) bool) error {
	p := DeliveryPrefix(seq)
	return s.Scan(p, PrefixEnd(p), func(k, v []byte) bool {
		_, sink, ok := ParseSeqSinkKey(k)
		return !ok || fn(sink, v)
	})
}

// ScanAllDeliveries calls fn for every delivery row, by seq then sink,
// until fn returns false.
func (s *Store) ScanAllDeliveries(fn func(seq uint64, sink uint16, v []byte) bool) error {
	return s.Scan([]byte{PrefixDelivery}, []byte{PrefixDelivery + 1}, func(k, v []byte) bool {
		seq, sink, ok := ParseSeqSinkKey(k)
		return !ok || fn(seq, sink, v)
	})
}

// ScanHookSeqsReverse calls fn for the seq of every hook that has a
// delivery row, below before (0: no bound), newest first, until fn returns
// false. Delivery rows are ordered by seq and small: the cheapest way to
// walk every hook.
func (s *Store) ScanHookSeqsReverse(before uint64, fn func(seq uint64) bool) error {
	upper := []byte{PrefixDelivery + 1}
	if before != 0 {
		upper = DeliveryPrefix(before)
	}
	last, have := uint64(0), false
	return s.ScanReverse([]byte{PrefixDelivery}, upper, func(k, _ []byte) bool {
		seq, _, ok := ParseSeqSinkKey(k)
		if !ok || (have && seq == last) {
			return true
		}
		last, have = seq, true
		return fn(seq)
	})
}

// ScanIndexReverse calls fn for the seq of every hook of source (or, with
// source empty, of tenant) below before (0: no bound), newest first, until
// fn returns false.
func (s *Store) ScanIndexReverse(source, tenant string, before uint64, fn func(seq uint64) bool) error {
	prefix := NameIndexPrefix(PrefixSourceIdx, source)
	if source == "" {
		prefix = NameIndexPrefix(PrefixTenantIdx, tenant)
	}
	upper := PrefixEnd(prefix)
	if before != 0 {
		upper = append(append([]byte(nil), prefix...), U64(before)...)
	}
	return s.ScanReverse(prefix, upper, func(k, _ []byte) bool {
		seq, ok := ParseNameSeqKey(k)
		return !ok || fn(seq)
	})
}

// ReadDedupe returns the dedupe entry of (tenant, source, key), nil if
// absent.
func (s *Store) ReadDedupe(tenant, source, key string) (*DedupeEntry, error) {
	v, err := s.Get(DedupeKey(tenant, source, key))
	if err != nil || v == nil {
		return nil, err
	}
	return DecodeDedupe(v)
}

// ScanAttempts calls fn for every attempt row of hook seq, by sink then
// attempt number, until fn returns false.
func (s *Store) ScanAttempts(seq uint64, fn func(sink uint16, n uint32, v []byte) bool) error {
	p := AttemptPrefix(seq)
	return s.Scan(p, PrefixEnd(p), func(k, v []byte) bool {
		_, sink, n, ok := ParseAttemptKey(k)
		return !ok || fn(sink, n, v)
	})
}

// ScanRetained calls fn for every retained row, oldest delivered_at first,
// until fn returns false.
func (s *Store) ScanRetained(fn func(r RetainedRow) bool) error {
	return s.Scan([]byte{PrefixRetained}, []byte{PrefixRetained + 1}, func(k, v []byte) bool {
		at, seq, ok := ParseRetainedKey(k)
		if !ok {
			return true
		}
		sz, _ := ParseU64(v)
		return fn(RetainedRow{AtMs: at, Seq: seq, Size: int64(sz)})
	})
}

// ReadRetained returns hook seq's retained row at atMs (ok false if none).
func (s *Store) ReadRetained(atMs int64, seq uint64) (r RetainedRow, ok bool, err error) {
	v, err := s.Get(RetainedKey(atMs, seq))
	if err != nil || v == nil {
		return RetainedRow{}, false, err
	}
	sz, _ := ParseU64(v)
	return RetainedRow{AtMs: atMs, Seq: seq, Size: int64(sz)}, true, nil
}

// ScanJobs calls fn with every replay job's JSON until fn returns false.
func (s *Store) ScanJobs(fn func(v []byte) bool) error {
	return s.Scan([]byte{PrefixJob}, []byte{PrefixJob + 1}, func(_, v []byte) bool { return fn(v) })
}

// HookRef is what a hook's rows are keyed on: enough to delete them all
// without reading the hook (DeleteDeliveredHooks).
type HookRef struct {
	Seq            uint64
	ID             [16]byte
	Tenant, Source string
}

// SinkAttempts is one delivery row of a hook and how many attempts it
// logged: its attempt rows are n = 1..Attempts.
type SinkAttempts struct {
	Sink     uint16
	Attempts uint32
}

// DeliveredHook is one fully delivered hook DeleteDeliveredHooks removes:
// its ref and all its delivery rows with their attempt counts.
type DeliveredHook struct {
	Ref   HookRef
	Sinks []SinkAttempts
	// Fresh: the caller vouches that W1's condition holds for every row
	// of the hook, so they are single-deleted.
	Fresh bool
}

// Invariant W1 (the single delete). A Pebble SINGLEDEL removes the newest
// SET under it and no more, and vanishes with it at the first flush or
// compaction that holds both; a DEL instead stays, as a tombstone carried
// down to the last level that holds the key. A hook delivered while its
// rows are still in the memtable therefore leaves nothing on disk when its
// rows are single-deleted, and six tombstones when they are deleted: with
// a large store beneath (a dead sink's parked backlog) those tombstones
// made the compactions that carry them a quarter of the node's CPU (issue
// 14). But a SINGLEDEL over a key SET twice since its last DEL lets the
// older SET come back. So a row is single-deleted only when the caller
// vouches that it was SET once since the key was last deleted (or ever),
// and nothing rewrote it: DeliveredHook.Fresh and DropFreshDue. The
// dispatcher vouches only for the rows of a hook the commit path of this
// process wrote and handed over (its hot cache, dispatch/hot.go H1), whose
// every delivery succeeded at its first claim, in the outcome batch that
// removes it, and only for a hook whose id that writer minted (a
// released quarantined hook keeps an id from elsewhere: ack rule 7 of
// internal/queue keeps a second hook off it, but the writer cannot vouch
// that its i row was SET once; before that rule a release retried after a
// fence did commit one twice, SETting it by two hooks); every other
// removal deletes. Every single-deleted key is the hook's own
// (a seq, or an id no other hook holds), so a breach of W1 cannot remove
// another hook's row, and cannot lose a hook; it could bring a removed row
// back, and Pebble reports it when a compaction sees one
// (Store.SingleDeleteMisuses).

// DeleteDeliveredHooks removes every row of each hook but its dedupe rows,
// from what the caller knows, without a read: the hook, its id index, its
// listing indexes, the delivery rows of Sinks and their attempt rows
// 1..Attempts. The caller vouches that Sinks are all the hook's delivery
// rows and that no delivery's attempt count was ever reset (a delivery
// never revived or resent, whose ReplayID is empty: Revive restarts the
// count, so older attempt rows lie above it). Returns how many delivery
// rows it removed.
//
// The deletes are written family by family (every hook row, then every id
// row, and so on) from one key buffer. Pebble inserts a batch's keys into
// the memtable's skiplist in batch order, each descent starting from where
// the previous key went in, so keys in order cost a fraction of keys that
// jump between families (BenchmarkBatchKeyOrder); and Delete copies its
// key, so one buffer serves them all instead of an allocation per key.
func (b *Batch) DeleteDeliveredHooks(hs []DeliveredHook) int {
	var k []byte
	n := 0
	del := func(h *DeliveredHook, k []byte) {
		if h.Fresh {
			_ = b.singleDelete(k) // W1
		} else {
			_ = b.Delete(k, nil)
		}
	}
	for i := range hs {
		k = appendHookKey(k[:0], hs[i].Ref.Seq)
		del(&hs[i], k)
	}
	for i := range hs {
		k = appendHookIDKey(k[:0], hs[i].Ref.ID)
		del(&hs[i], k)
	}
	for i := range hs {
		k = appendNameSeqKey(k[:0], PrefixSourceIdx, hs[i].Ref.Source, hs[i].Ref.Seq)
		del(&hs[i], k)
	}
	for i := range hs {
		k = appendNameSeqKey(k[:0], PrefixTenantIdx, hs[i].Ref.Tenant, hs[i].Ref.Seq)
		del(&hs[i], k)
	}
	for i := range hs {
		for _, sa := range hs[i].Sinks {
			k = appendDeliveryKey(k[:0], hs[i].Ref.Seq, sa.Sink)
			del(&hs[i], k)
		}
		n += len(hs[i].Sinks)
	}
	for _, h := range hs {
		for _, sa := range h.Sinks {
			for a := uint32(1); a <= sa.Attempts; a++ {
				k = appendAttemptKey(k[:0], h.Ref.Seq, sa.Sink, a)
				_ = b.Delete(k, nil)
			}
		}
	}
	return n
}

// ScanDeliveriesOf calls fn for every delivery row of each hook in seqs
// (ascending), by seq then sink, with one iterator for them all: the
// dispatcher reads the rows of every hook an outcome batch touches, and an
// iterator per hook cost more than the rows (each opens the levels anew).
// fn returning false skips the rest of that hook's rows.
func (s *Store) ScanDeliveriesOf(seqs []uint64, fn func(seq uint64, sink uint16, v []byte) bool) error {
	if len(seqs) == 0 {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: DeliveryPrefix(seqs[0]),
		UpperBound: PrefixEnd(DeliveryPrefix(seqs[len(seqs)-1])),
	})
	if err != nil {
		return fmt.Errorf("scan deliveries: %w", err)
	}
	for _, seq := range seqs {
		p := DeliveryPrefix(seq)
		// Ascending seeks: Pebble moves on from where the last one ended.
		for ok := it.SeekGE(p); ok && it.Valid(); ok = it.Next() {
			k := it.Key()
			got, sink, kok := ParseSeqSinkKey(k)
			if !kok || got != seq {
				break
			}
			v, err := it.ValueAndErr()
			if err != nil {
				_ = it.Close()
				return fmt.Errorf("scan deliveries value: %w", err)
			}
			if !fn(seq, sink, v) {
				break
			}
		}
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return fmt.Errorf("scan deliveries: %w", err)
	}
	return it.Close()
}
