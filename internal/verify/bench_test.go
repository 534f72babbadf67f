package verify_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"net/http"
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

// BenchmarkVerify_Asymmetric measures one valid 1 KiB request for the
// public-key schemes, whose cost is the signature check, not an HMAC.
func BenchmarkVerify_Asymmetric(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	discord := mustNew(b, verify.Spec{Type: "discord", PublicKeys: []string{hex.EncodeToString(pub)}})
	dh := http.Header{"X-Signature-Ed25519": {hex.EncodeToString(ed25519.Sign(priv, append([]byte(nowTS), body...)))}, "X-Signature-Timestamp": {nowTS}}

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	sum := sha256.Sum256(append([]byte(nowTS), body...))
	sig, _ := ecdsa.SignASN1(rand.Reader, key, sum[:])
	sendgrid := mustNew(b, verify.Spec{Type: "sendgrid", PublicKeys: []string{base64.StdEncoding.EncodeToString(der)}})
	sh := http.Header{"X-Twilio-Email-Event-Webhook-Signature": {base64.StdEncoding.EncodeToString(sig)}, "X-Twilio-Email-Event-Webhook-Timestamp": {nowTS}}

	for _, c := range []struct {
		name string
		v    verify.Verifier
		h    http.Header
	}{{"discord", discord, dh}, {"sendgrid", sendgrid, sh}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.v.Verify(c.h, body, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
