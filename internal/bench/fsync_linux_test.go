package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkGroupFsync measures what one group commit's fsync costs this
// host in CPU (not in wait): a group of n hooks' WAL bytes (1.5 KB each,
// about what a 1 KiB hook's rows add to Pebble's WAL) written to a
// preallocated file, as Pebble's recycled WAL is, then fdatasync'd. On a
// virtual disk the guest's flush is not free: docs/benchmarks.md (issue
// 14, the twelfth session) reads cpu-us/hook against the mean groups the
// bench reports, which is why disk's CPU ratio is worse at C=64 (groups
// of about 18) than at C=512.
//
//	go test -run '^$' -bench GroupFsync -benchtime 3000x ./internal/bench
func BenchmarkGroupFsync(b *testing.B) {
	const perHook = 1500
	const fileSize = 64 << 20
	for _, n := range []int{1, 4, 18, 64, 256} {
		b.Run(fmt.Sprintf("hooks=%d", n), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "wal"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(make([]byte, fileSize)); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			group := make([]byte, n*perHook)
			var off int64
			cpu := startCPU(b)
			for b.Loop() {
				if off+int64(len(group)) > fileSize {
					off = 0
				}
				if _, err := f.WriteAt(group, off); err != nil {
					b.Fatal(err)
				}
				off += int64(len(group))
				if err := unix.Fdatasync(int(f.Fd())); err != nil {
					b.Fatal(err)
				}
			}
			if end, ok := processCPU(); cpu.ok && ok && b.N > 0 {
				per := float64(end-cpu.at) / float64(b.N) / 1e3
				b.ReportMetric(per, "cpu-us/fsync")
				b.ReportMetric(per/float64(n), "cpu-us/hook")
			}
		})
	}
}
