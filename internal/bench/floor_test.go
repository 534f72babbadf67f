package bench

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkBodyFloor measures, on this host, the two things no design of
// the durable path can skip for a body of b.N bytes (256 KiB, issue 14's
// large-body target): the SHA-256 that the contract stores and serves with
// every hook (the delivered envelope's "sha256", GET /v1/hooks/{id}), and
// one write of the body to a file on the real disk with an fsync per 32
// bodies (a group commit). Each reports the process's CPU per body
// (cpu-us/op, from getrusage: the fsync's wait is not CPU). Their sum is
// the floor a hook pays on top of what the null handler pays for the same
// request; docs/benchmarks.md holds it against the 0.5× target's budget.
//
//	go test -run '^$' -bench BodyFloor -benchtime 2000x ./internal/bench
func BenchmarkBodyFloor(b *testing.B) {
	body := make([]byte, 256<<10)
	for i := range body {
		body[i] = byte(i * 31)
	}
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		cpu := startCPU(b)
		for b.Loop() {
			sha256.Sum256(body)
		}
		cpu.report(b)
	})
	b.Run("write+fsync/32", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "log"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		b.SetBytes(int64(len(body)))
		cpu := startCPU(b)
		i := 0
		for b.Loop() {
			if _, err := f.Write(body); err != nil {
				b.Fatal(err)
			}
			if i++; i%32 == 0 {
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		}
		cpu.report(b)
	})
}

// cpuMark is the process's CPU time when a benchmark's loop began.
type cpuMark struct {
	at time.Duration
	ok bool
}

func startCPU(b *testing.B) cpuMark {
	b.Helper()
	at, ok := processCPU()
	return cpuMark{at, ok}
}

// report adds cpu-us/op (the process's CPU since the mark per iteration)
// where the platform measures it.
func (m cpuMark) report(b *testing.B) {
	end, ok := processCPU()
	if !m.ok || !ok || b.N == 0 {
		return
	}
	b.ReportMetric(float64(end-m.at)/float64(b.N)/1e3, "cpu-us/op")
}
