package testutil

import (
	"testing"

	"github.com/ankusa/ankusa/internal/store"
)

// HookSeqsOf returns the seq of every hook row in st that holds hook id id,
// in seq order, found by a scan of the rows themselves rather than the id
// index (which names one seq only): a test of "one hook id, one hook" sees
// a second row the index does not point at.
func HookSeqsOf(t testing.TB, st *store.Store, id [16]byte) []uint64 {
	t.Helper()
	var seqs []uint64
	err := st.ScanHooksFrom(0, func(seq uint64, v []byte) bool {
		env, err := store.DecodeEnvelope(v)
		if err != nil {
			t.Errorf("hook row %d: %v", seq, err)
			return true
		}
		if env.ID == id {
			seqs = append(seqs, seq)
		}
		return true
	})
	if err != nil {
		t.Fatalf("scan hook rows: %v", err)
	}
	return seqs
}
