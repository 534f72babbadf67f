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

// FlushTables flushes the memtable and returns how many tables L0 holds
// then, and their bytes: what the flush left on disk.
func (s *Store) FlushTables() (int64, int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.db.Flush(); err != nil {
		return 0, 0, err
	}
	m := s.db.Metrics()
	return m.Levels[0].TablesCount, m.Levels[0].TablesSize, nil
}
