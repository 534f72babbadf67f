package store

// LegacyClaim writes a claim as builds before the in-memory claim did
// (dispatch/claims.go): the due key deleted, an in-flight row with its
// lease, the delivery row marked in flight. Tests of what this build does
// with a store an older one left behind (Reclaim at boot) write it.
func (b *Batch) LegacyClaim(dueAtMs int64, seq uint64, sink uint16, dl *Delivery, leaseUntilMs int64) {
	dl.State = StateInflight
	_ = b.Delete(DueKey(dueAtMs, seq, sink), nil)
	_ = b.Set(InflightKey(seq, sink), U64(uint64(leaseUntilMs)), nil)
	_ = b.Set(DeliveryKey(seq, sink), EncodeDelivery(dl), nil)
}
