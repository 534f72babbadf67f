package verify_test

import (
	"bytes"
	"testing"

	"github.com/ankusa/ankusa/internal/verify"
)

// BenchmarkVerify measures one valid 1 KiB request per scheme, with two
// configured secrets signed by the older one (rotation: every secret is
// always tried, so this is also the single-secret cost times two), and with
// the full eight.
func BenchmarkVerify(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB
	for _, sc := range schemes() {
		for _, n := range []int{1, 2, verify.MaxSecrets} {
			secrets := []string{sc.newest, sc.older}
			if n == 1 {
				secrets = secrets[:1]
			}
			for len(secrets) < n {
				secrets = append(secrets, sc.wrong)
			}
			s := sc.spec
			s.Secrets = secrets
			v := mustNew(b, s)
			h := sc.sign(b, secrets[len(secrets)-1], nowTS, body)
			if n == verify.MaxSecrets {
				h = sc.sign(b, sc.older, nowTS, body)
			}
			b.Run(sc.name+"/secrets="+string(rune('0'+n)), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if err := v.Verify(h, body, now); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
