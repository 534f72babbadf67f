package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// SinkRef names one (source, sink) pair.
type SinkRef struct {
	Source, Sink string
}

// SinkNumbers returns the stable two-byte number of every named sink,
// allocating numbers for new ones in one synced write. Numbers live in the
// delivery, due, inflight and dead keys, so they must never change for a
// sink id once rows carry them: that is why they are stored, not derived
// from the order of the config file.
//
// REQUIRES: a single caller at a time (the instance calls it once at
// start-up): it reads the highest number, then writes the next ones.
func (s *Store) SinkNumbers(refs []SinkRef) (map[SinkRef]uint16, error) {
	out := make(map[SinkRef]uint16, len(refs))
	var maxNum uint16
	used := false
	err := s.Scan([]byte{PrefixSinkNum}, []byte{PrefixSinkNum + 1}, func(k, v []byte) bool {
		if len(v) != 2 {
			return true
		}
		n := binary.BigEndian.Uint16(v)
		if !used || n > maxNum {
			maxNum, used = n, true
		}
		for i := 1; i < len(k); i++ {
			if k[i] == 0 {
				out[SinkRef{Source: string(k[1:i]), Sink: string(k[i+1:])}] = n
				break
			}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read sink numbers: %w", err)
	}
	missing := make([]SinkRef, 0)
	for _, r := range refs {
		if _, ok := out[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	// Deterministic allocation order makes two fresh stores with the same
	// config agree, which helps when comparing them in tests and drills.
	sort.Slice(missing, func(i, j int) bool {
		if missing[i].Source != missing[j].Source {
			return missing[i].Source < missing[j].Source
		}
		return missing[i].Sink < missing[j].Sink
	})
	b := s.NewBatch()
	defer b.Close()
	next := uint32(0)
	if used {
		next = uint32(maxNum) + 1
	}
	for _, r := range missing {
		if next > math.MaxUint16 {
			return nil, fmt.Errorf("allocate sink number for %s/%s: all %d numbers used", r.Source, r.Sink, math.MaxUint16+1)
		}
		var v [2]byte
		binary.BigEndian.PutUint16(v[:], uint16(next))
		_ = b.Set(SinkNumKey(r.Source, r.Sink), v[:], nil)
		out[r] = uint16(next)
		next++
	}
	if err := s.ApplySync(b); err != nil {
		return nil, fmt.Errorf("allocate sink numbers: %w", err)
	}
	return out, nil
}
