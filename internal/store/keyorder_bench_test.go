package store

import (
	"crypto/rand"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkBatchKeyOrder is why DeleteDeliveredHooks writes its deletes
// family by family: one outcome batch (30 hooks, six rows each) applied to
// a memtable that already holds 300 000 rows, its keys in hook order
// (h1 i1 n1 o1 d1 q1 h2 …) or in family order (h1 h2 … i1 i2 …).
func BenchmarkBatchKeyOrder(b *testing.B) {
	for _, tc := range []struct {
		name     string
		byFamily bool
	}{{"hook", false}, {"family", true}} {
		b.Run(tc.name, func(b *testing.B) {
			db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), MemTableSize: 256 << 20, DisableWAL: true})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = db.Close() }()
			keys := func(seq uint64) [6][]byte {
				var id [16]byte
				_, _ = rand.Read(id[:])
				return [6][]byte{HookKey(seq), HookIDKey(id), SourceIndexKey("demo", seq),
					TenantIndexKey("default", seq), DeliveryKey(seq, 0), DueKey(int64(seq/20), seq, 0)}
			}
			seq := uint64(1)
			for i := 0; i < 50_000; i++ {
				bt := db.NewBatch()
				for _, k := range keys(seq) {
					_ = bt.Set(k, nil, nil)
				}
				seq++
				_ = bt.Commit(pebble.NoSync)
			}
			hooks := make([][6][]byte, 30)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for j := range hooks {
					hooks[j] = keys(seq)
					seq++
				}
				bt := db.NewBatch()
				b.StartTimer()
				if tc.byFamily {
					for f := range 6 {
						for j := range hooks {
							_ = bt.Delete(hooks[j][f], nil)
						}
					}
				} else {
					for j := range hooks {
						for _, k := range hooks[j] {
							_ = bt.Delete(k, nil)
						}
					}
				}
				_ = bt.Commit(pebble.NoSync)
			}
		})
	}
}
