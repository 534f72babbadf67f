package store

import (
	"fmt"
	"time"
)

// Typed accessors of the meta rows (keys.go). Readers live on Store, writers
// on Batch so that a meta row is written in the same batch as the rows it
// describes. An absent row reads as ok=false; an 8-byte row of the wrong
// length reads as absent too (what every caller did before the accessors
// existed), except m:next_seq, whose corruption is an error.

// NextSeq is the next hook seq: the larger of m:next_seq and the highest
// hook + 1 (1 on an empty store), so a seq is never reused even if the
// marker were behind the hook rows (it is written unsynced, and a crash can
// keep a synced hook of a group whose marker write was lost).
func (s *Store) NextSeq() (uint64, error) {
	next := uint64(1)
	if v, err := s.Get(KeyNextSeq); err != nil {
		return 0, fmt.Errorf("read next_seq: %w", err)
	} else if v != nil {
		n, ok := ParseU64(v)
		if !ok {
			return 0, fmt.Errorf("read next_seq: %w", ErrCorrupt)
		}
		next = max(next, n)
	}
	k, err := s.LastKey([]byte{PrefixHook}, []byte{PrefixHook + 1})
	if err != nil {
		return 0, fmt.Errorf("find last hook: %w", err)
	}
	if last, ok := ParseU64(k[min(1, len(k)):]); ok {
		next = max(next, last+1)
	}
	return next, nil
}

// IntakeSeq reads the watermark m:intake_seq (ok false: none stored).
func (s *Store) IntakeSeq() (wm uint64, ok bool, err error) {
	return s.metaU64(KeyIntakeSeq)
}

// IntakeOffset reads m:intake_offset (ok false: none stored).
func (s *Store) IntakeOffset() (off int64, ok bool, err error) {
	n, ok, err := s.metaU64(KeyIntakeOffset)
	return int64(n), ok, err
}

// IntakePartition reads the stamped m:intake_partition (ok false: none).
func (s *Store) IntakePartition() (p int32, ok bool, err error) {
	n, ok, err := s.metaU64(KeyIntakePartition)
	return int32(n), ok, err
}

// IntakeNode reads the stamped m:intake_node (ok false: none).
func (s *Store) IntakeNode() (node string, ok bool, err error) {
	v, err := s.Get(KeyIntakeNode)
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", KeyIntakeNode, err)
	}
	return string(v), v != nil, nil
}

// Incarnation reads the store's incarnation, "0" before any restore.
func (s *Store) Incarnation() (string, error) {
	v, err := s.Get(KeyIncarnation)
	if err != nil || len(v) == 0 {
		return "0", err
	}
	return string(v), nil
}

// IncarnationFrom reads the id of the backup the current incarnation was
// minted for ("" before any restore).
func (s *Store) IncarnationFrom() (string, error) {
	v, err := s.Get(KeyIncarnationFrom)
	return string(v), err
}

// Probe reads the time (unix ns) of the last readiness probe write.
func (s *Store) Probe() (atNs int64, ok bool, err error) {
	n, ok, err := s.metaU64(KeyProbe)
	return int64(n), ok, err
}

func (s *Store) metaU64(key []byte) (uint64, bool, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", key, err)
	}
	n, ok := ParseU64(v)
	return n, ok, nil
}

// SetNextSeq records m:next_seq.
func (b *Batch) SetNextSeq(n uint64) error { return b.Set(KeyNextSeq, U64(n), nil) }

// SetIntakeSeq records the watermark m:intake_seq.
func (b *Batch) SetIntakeSeq(wm uint64) error { return b.Set(KeyIntakeSeq, U64(wm), nil) }

// SetIntakeOffset records m:intake_offset.
func (b *Batch) SetIntakeOffset(off int64) error {
	return b.Set(KeyIntakeOffset, U64(uint64(off)), nil)
}

// SetIntakePartition stamps m:intake_partition.
func (b *Batch) SetIntakePartition(p int32) error {
	return b.Set(KeyIntakePartition, U64(uint64(p)), nil)
}

// SetIntakeNode stamps m:intake_node.
func (b *Batch) SetIntakeNode(node string) error { return b.Set(KeyIntakeNode, []byte(node), nil) }

// SetIncarnation records a new incarnation and the backup it was minted for.
func (b *Batch) SetIncarnation(inc, fromBackup string) error {
	if err := b.Set(KeyIncarnation, []byte(inc), nil); err != nil {
		return err
	}
	return b.Set(KeyIncarnationFrom, []byte(fromBackup), nil)
}

// SetProbe stamps z:probe with at (the readiness probe's write).
func (b *Batch) SetProbe(at time.Time) error {
	return b.Set(KeyProbe, U64(uint64(at.UnixNano())), nil)
}
