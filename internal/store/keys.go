package store

import (
	"encoding/binary"
)

// Key families. One prefix byte per family; every integer in a key is
// big-endian so that byte order is sort order.
//
// FROZEN FORMAT: the prefixes and layouts below are on disk. Changing one
// needs a store format version bump (m:format) and a migration.
const (
	PrefixMeta     byte = 'm' // m:<name>                                     → meta value
	PrefixHook     byte = 'h' // h + seq(8)                                   → encoded envelope (codec.go)
	PrefixHookID   byte = 'i' // i + id(16)                                   → seq(8)
	PrefixDelivery byte = 'd' // d + seq(8) + sink(2)                         → encoded delivery
	PrefixDue      byte = 'q' // q + at(8, unix ms) + seq(8) + sink(2)         → empty
	PrefixInflight byte = 'f' // f + seq(8) + sink(2)                         → lease deadline
	PrefixDead     byte = 'x' // x + dead_at(8) + seq(8) + sink(2)             → reason
	PrefixDedupe   byte = 'u' // u + tenant 0 source 0 key                    → encoded dedupe entry
	PrefixExpiry   byte = 'e' // e + expires_at(8, unix ms) + dedupe key body → empty
	PrefixSinkNum  byte = 'k' // k + source 0 sink-id                         → sink number(2)
	PrefixJob      byte = 'j' // j + job id                                   → replay job JSON
	PrefixRate     byte = 'r' // r + tenant                                   → rate-limit override JSON (ratelimit.go)
	PrefixAudit    byte = 'a' // a + at(8, unix ns) + action                   → audit JSON (operator actions)
	PrefixPen      byte = 'p' // p + received_at(8, unix ms) + id(16)         → quarantined hook (quarantine.go)
	PrefixSource   byte = 's' // s + source id                                → API-managed source JSON (sources.go)
	PrefixProbe    byte = 'z' // z:probe                                      → readiness probe stamp (KeyProbe)
	// History (retention.delivered): the listing indexes, the attempt log
	// and the retained set. Written with the hook / the outcome, deleted
	// with the hook (HookRowKeys lists them).
	PrefixSourceIdx byte = 'n' // n + source 0 seq(8)                          → empty (GET /v1/hooks?source)
	PrefixTenantIdx byte = 'o' // o + tenant 0 seq(8)                          → empty (GET /v1/hooks?tenant)
	PrefixAttempt   byte = 'w' // w + seq(8) + sink(2) + n(4)                   → encoded attempt (history.go)
	PrefixRetained  byte = 'g' // g + delivered_at(8, unix ms) + seq(8)         → body bytes(8)
)

// Meta keys: one row each, read and written only through the typed
// accessors in meta.go. Same FROZEN FORMAT rule as the families above: the
// names are on disk (docs/storage.md lists them for operators).
var (
	// KeyStoreID holds the store's identity (hex, 32 chars). Written once,
	// synced, by Open when it creates the store; backups of another store
	// id are refused.
	KeyStoreID = []byte("m:store_id")
	// KeyFormat holds FormatVersion (8 bytes). Written with KeyStoreID at
	// creation; Open refuses a store of another format.
	KeyFormat = []byte("m:format")
	// KeyNextSeq holds the next hook seq (8 bytes). Written by the commit
	// path in every group that wrote a hook (not synced: the hook rows are
	// the truth, see Store.NextSeq), by the fence after deleting unsynced
	// groups, and by boot recovery with each replayed chunk.
	KeyNextSeq = []byte("m:next_seq")
	// KeyIncarnation holds the store's life since its last restore (hex;
	// absent means "0"): intake records carry it. Minted, synced, by the
	// app at the first boot after a restore, together with
	// KeyIncarnationFrom.
	KeyIncarnation = []byte("m:incarnation")
	// KeyIncarnationFrom holds the id of the backup KeyIncarnation was
	// minted for, so a boot that finds the restore marker again does not
	// mint twice. Written with KeyIncarnation.
	KeyIncarnationFrom = []byte("m:incarnation_from")
	// KeyIntakeNode holds the intake node id the store was written under
	// (ADR section 8). Stamped, synced, by the app at the first dual boot;
	// a store stamped with another node id refuses boot.
	KeyIntakeNode = []byte("m:intake_node")
	// KeyIntakePartition holds the intake partition this node writes (8
	// bytes). Stamped, synced, by the app at the first dual boot of a
	// partitioned adapter and never recomputed, so growing the topic never
	// remaps a node (ADR section 6).
	KeyIntakePartition = []byte("m:intake_partition")
	// KeyIntakeSeq holds the watermark (8 bytes): every seq at or below it
	// is confirmed in the intake log. Written by the commit path's mark
	// flush (not synced: a lagging mark costs redundant republishes, never
	// a hook) and, synced, by boot recovery after its republish.
	KeyIntakeSeq = []byte("m:intake_seq")
	// KeyIntakeOffset holds the highest intake log position whose record is
	// also in this store (8 bytes). Written by the commit path's mark flush
	// and by boot recovery with each replayed chunk; backups record it as
	// their recovery point.
	KeyIntakeOffset = []byte("m:intake_offset")
	// KeyProbe holds the time (unix ns, 8 bytes) of the last readiness
	// probe: /readyz writes it, synced, to prove the disk still takes a
	// synced write (admin/health.go). Outside the m family on purpose: it
	// is rewritten on every probe and no reader of meta needs it.
	KeyProbe = []byte("z:probe")
)

// FormatVersion is the on-disk layout this code reads and writes.
const FormatVersion = 1

// HookKey is h + seq.
func HookKey(seq uint64) []byte { return appendHookKey(make([]byte, 0, 9), seq) }

func appendHookKey(dst []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, PrefixHook), seq)
}

// ParseHookKey returns the seq of a hook (h) key.
func ParseHookKey(k []byte) (uint64, bool) {
	if len(k) != 9 || k[0] != PrefixHook {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}

// HookIDKey is i + id.
func HookIDKey(id [16]byte) []byte { return appendHookIDKey(make([]byte, 0, 17), id) }

func appendHookIDKey(dst []byte, id [16]byte) []byte {
	return append(append(dst, PrefixHookID), id[:]...)
}

// DeliveryKey is d + seq + sink.
func DeliveryKey(seq uint64, sink uint16) []byte {
	return appendDeliveryKey(make([]byte, 0, 11), seq, sink)
}

func appendDeliveryKey(dst []byte, seq uint64, sink uint16) []byte {
	dst = binary.BigEndian.AppendUint64(append(dst, PrefixDelivery), seq)
	return binary.BigEndian.AppendUint16(dst, sink)
}

// DeliveryPrefix is d + seq: every delivery row of one hook.
func DeliveryPrefix(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = PrefixDelivery
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

// DueKey is q + at + seq + sink.
func DueKey(atMs int64, seq uint64, sink uint16) []byte {
	return appendDueKey(make([]byte, 0, dueKeyLen), atMs, seq, sink)
}

// dueKeyLen is a due key's length: the prefix, at, seq and sink.
const dueKeyLen = 1 + 8 + 8 + 2

func appendDueKey(dst []byte, atMs int64, seq uint64, sink uint16) []byte {
	dst = binary.BigEndian.AppendUint64(append(dst, PrefixDue), uint64(atMs))
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return binary.BigEndian.AppendUint16(dst, sink)
}

// DedupeKey is u + tenant 0 source 0 key. Tenant and source ids cannot hold a
// zero byte (config and routing restrict them), so the separators are unique.
func DedupeKey(tenant, source, key string) []byte {
	return appendDedupeKey(make([]byte, 0, 3+len(tenant)+len(source)+len(key)), tenant, source, key)
}

func appendDedupeKey(dst []byte, tenant, source, key string) []byte {
	dst = append(dst, PrefixDedupe)
	dst = append(append(dst, tenant...), 0)
	dst = append(append(dst, source...), 0)
	return append(dst, key...)
}

// ExpiryKey is e + expires_at + the dedupe key without its prefix byte.
func ExpiryKey(expiresAtMs int64, dedupeKey []byte) []byte {
	return appendExpiryKey(make([]byte, 0, 9+max(len(dedupeKey)-1, 0)), expiresAtMs, dedupeKey)
}

func appendExpiryKey(dst []byte, expiresAtMs int64, dedupeKey []byte) []byte {
	dst = binary.BigEndian.AppendUint64(append(dst, PrefixExpiry), uint64(expiresAtMs))
	if len(dedupeKey) > 1 {
		dst = append(dst, dedupeKey[1:]...)
	}
	return dst
}

// ParseExpiryKey splits an expiry key into its time and the dedupe key it names.
func ParseExpiryKey(k []byte) (expiresAtMs int64, dedupeKey []byte, ok bool) {
	if len(k) < 9 || k[0] != PrefixExpiry {
		return 0, nil, false
	}
	dk := make([]byte, 0, len(k)-8)
	dk = append(dk, PrefixDedupe)
	dk = append(dk, k[9:]...)
	return int64(binary.BigEndian.Uint64(k[1:9])), dk, true
}

// SinkNumKey is k + source 0 sink-id.
func SinkNumKey(source, sink string) []byte {
	k := make([]byte, 0, 2+len(source)+len(sink))
	k = append(k, PrefixSinkNum)
	k = append(k, source...)
	k = append(k, 0)
	return append(k, sink...)
}

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// U64 encodes v big-endian.
func U64(v uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v) }

// ParseU64 decodes an 8-byte big-endian value.
func ParseU64(b []byte) (uint64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// InflightKey is f + seq + sink.
func InflightKey(seq uint64, sink uint16) []byte {
	return appendInflightKey(make([]byte, 0, 11), seq, sink)
}

func appendInflightKey(dst []byte, seq uint64, sink uint16) []byte {
	dst = binary.BigEndian.AppendUint64(append(dst, PrefixInflight), seq)
	return binary.BigEndian.AppendUint16(dst, sink)
}

// DeadKey is x + dead_at + seq + sink.
func DeadKey(deadAtMs int64, seq uint64, sink uint16) []byte {
	k := make([]byte, 19)
	k[0] = PrefixDead
	binary.BigEndian.PutUint64(k[1:], uint64(deadAtMs))
	binary.BigEndian.PutUint64(k[9:], seq)
	binary.BigEndian.PutUint16(k[17:], sink)
	return k
}

// ParseTimedKey splits a due (q) or dead (x) key into time, seq and sink.
func ParseTimedKey(k []byte) (atMs int64, seq uint64, sink uint16, ok bool) {
	if len(k) != 19 {
		return 0, 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), binary.BigEndian.Uint64(k[9:17]), binary.BigEndian.Uint16(k[17:19]), true
}

// ParseSeqSinkKey splits a delivery (d) or inflight (f) key.
func ParseSeqSinkKey(k []byte) (seq uint64, sink uint16, ok bool) {
	if len(k) != 11 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint16(k[9:11]), true
}

// AuditKey is a + at + action: one operator action (audit.go). at is
// unique per store (AppendAudit makes it so), so the action only names the
// row for a reader of raw keys.
func AuditKey(atNs int64, action string) []byte {
	k := make([]byte, 9, 9+len(action))
	k[0] = PrefixAudit
	binary.BigEndian.PutUint64(k[1:], uint64(atNs))
	return append(k, action...)
}

// ParseAuditKey splits an audit key into its time and action.
func ParseAuditKey(k []byte) (atNs int64, action string, ok bool) {
	if len(k) < 9 || k[0] != PrefixAudit {
		return 0, "", false
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), string(k[9:]), true
}

// JobKey is j + id: a replay job's JSON.
func JobKey(id string) []byte { return append([]byte{PrefixJob}, id...) }

// SourceIndexKey is n + source 0 seq: hooks of one source, oldest first.
func SourceIndexKey(source string, seq uint64) []byte {
	return nameSeqKey(PrefixSourceIdx, source, seq)
}

// TenantIndexKey is o + tenant 0 seq: hooks of one tenant, oldest first.
func TenantIndexKey(tenant string, seq uint64) []byte {
	return nameSeqKey(PrefixTenantIdx, tenant, seq)
}

// NameIndexPrefix is the prefix of one source's (n) or tenant's (o) index.
func NameIndexPrefix(prefix byte, name string) []byte {
	k := make([]byte, 0, 2+len(name))
	k = append(k, prefix)
	k = append(k, name...)
	return append(k, 0)
}

func nameSeqKey(prefix byte, name string, seq uint64) []byte {
	return appendNameSeqKey(make([]byte, 0, 10+len(name)), prefix, name, seq)
}

func appendNameSeqKey(dst []byte, prefix byte, name string, seq uint64) []byte {
	dst = append(append(append(dst, prefix), name...), 0)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// ParseNameSeqKey returns the seq of a source or tenant index key.
func ParseNameSeqKey(k []byte) (uint64, bool) {
	if len(k) < 10 || k[len(k)-9] != 0 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(k)-8:]), true
}

// AttemptKey is w + seq + sink + n: the n-th attempt of one delivery.
func AttemptKey(seq uint64, sink uint16, n uint32) []byte {
	return appendAttemptKey(make([]byte, 0, 15), seq, sink, n)
}

func appendAttemptKey(dst []byte, seq uint64, sink uint16, n uint32) []byte {
	dst = binary.BigEndian.AppendUint64(append(dst, PrefixAttempt), seq)
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(dst, sink), n)
}

// ParseAttemptKey splits an attempt key.
func ParseAttemptKey(k []byte) (seq uint64, sink uint16, n uint32, ok bool) {
	if len(k) != 15 || k[0] != PrefixAttempt {
		return 0, 0, 0, false
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint16(k[9:11]), binary.BigEndian.Uint32(k[11:15]), true
}

// AttemptPrefix is w + seq: every attempt of one hook.
func AttemptPrefix(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = PrefixAttempt
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

// RetainedKey is g + delivered_at + seq: a delivered hook kept for
// retention.delivered, in the order the sweep removes them.
func RetainedKey(deliveredAtMs int64, seq uint64) []byte {
	k := make([]byte, 17)
	k[0] = PrefixRetained
	binary.BigEndian.PutUint64(k[1:], uint64(deliveredAtMs))
	binary.BigEndian.PutUint64(k[9:], seq)
	return k
}

// ParseRetainedKey splits a retained key.
func ParseRetainedKey(k []byte) (deliveredAtMs int64, seq uint64, ok bool) {
	if len(k) != 17 || k[0] != PrefixRetained {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), binary.BigEndian.Uint64(k[9:17]), true
}

// HookIndexKeys are the listing index rows written with a hook.
func HookIndexKeys(tenant, source string, seq uint64) [2][]byte {
	return [2][]byte{SourceIndexKey(source, seq), TenantIndexKey(tenant, seq)}
}

// SourceKey is s + id: one API-managed source (internal/sources).
func SourceKey(id string) []byte { return append([]byte{PrefixSource}, id...) }

// RateKey is r + tenant: one tenant's runtime rate-limit override.
func RateKey(tenant string) []byte { return append([]byte{PrefixRate}, tenant...) }

// penKeyLen is the length of a pen key: p + received_at(8) + id(16).
const penKeyLen = 1 + 8 + 16

// PenKey is p + received_at(ms) + id: one quarantined hook, in the order
// it arrived (internal/quarantine).
func PenKey(receivedAtMs int64, id [16]byte) []byte {
	k := make([]byte, penKeyLen)
	k[0] = PrefixPen
	binary.BigEndian.PutUint64(k[1:9], uint64(receivedAtMs))
	copy(k[9:], id[:])
	return k
}

// penTimeBound is p + ms: the first pen key of that millisecond.
func penTimeBound(ms int64) []byte {
	k := make([]byte, 9)
	k[0] = PrefixPen
	binary.BigEndian.PutUint64(k[1:], uint64(ms))
	return k
}

// ParsePenKey splits a pen key.
func ParsePenKey(k []byte) (receivedAtMs int64, id [16]byte, ok bool) {
	if len(k) != penKeyLen || k[0] != PrefixPen {
		return 0, id, false
	}
	copy(id[:], k[9:])
	return int64(binary.BigEndian.Uint64(k[1:9])), id, true
}
