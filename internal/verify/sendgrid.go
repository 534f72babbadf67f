package verify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// sendgrid checks the SendGrid Event Webhook's signature (Twilio SendGrid
// docs: "Getting started with the Event Webhook security features"):
// X-Twilio-Email-Event-Webhook-Signature is base64 of an ASN.1 DER ECDSA
// P-256 signature over SHA-256(timestamp + body), timestamp from
// X-Twilio-Email-Event-Webhook-Timestamp; the verification key is the one
// SendGrid shows, base64 of a DER SubjectPublicKeyInfo, or the same as PEM.
// The timestamp is signed, so it is held to the tolerance too.
//
// It is its own verifier, not an engine preset: DER signatures have no
// fixed length, and ECDSA needs the digest, not a streamed MAC.
type sendgrid struct {
	keys      []*ecdsa.PublicKey
	tolerance int64
}

var _ Verifier = (*sendgrid)(nil)

const (
	sendgridSigHeader = "X-Twilio-Email-Event-Webhook-Signature"
	sendgridTSHeader  = "X-Twilio-Email-Event-Webhook-Timestamp"
	// maxDERSig bounds a P-256 DER signature (72 bytes at most).
	maxDERSig = 80
)

func newSendGrid(s Spec, errs *specErrors) Verifier {
	if len(s.Secrets) > 0 {
		errs.add("secret", "is not used by sendgrid (it verifies with public_key, the verification key SendGrid shows)")
	}
	g := &sendgrid{tolerance: tolerance(s, errs)}
	switch n := len(s.PublicKeys); {
	case n == 0:
		errs.add("public_key", "at least one public key is required")
	case n > MaxSecrets:
		errs.add("public_key", "must have at most %d entries, got %d", MaxSecrets, n)
	}
	for i, k := range s.PublicKeys {
		pk, err := parseECDSAKey(k)
		if err != nil {
			errs.add(fmt.Sprintf("public_key[%d]", i), "%v", err)
			continue
		}
		g.keys = append(g.keys, pk)
	}
	return g
}

// parseECDSAKey reads a P-256 public key: PEM, or base64 DER (PKIX).
func parseECDSAKey(s string) (*ecdsa.PublicKey, error) {
	var der []byte
	if b, _ := pem.Decode([]byte(s)); b != nil {
		der = b.Bytes
	} else {
		d, ok := decodeBase64(strings.TrimSpace(s))
		if !ok {
			return nil, fmt.Errorf("key is neither PEM nor base64 DER")
		}
		der = d
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("key is not a DER SubjectPublicKeyInfo")
	}
	ec, ok := pub.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("key is not an ECDSA P-256 public key")
	}
	return ec, nil
}

func (g *sendgrid) Verify(h http.Header, body []byte, now time.Time) error {
	v, f := headerValue(h, sendgridSigHeader)
	if f != nil {
		return f
	}
	if base64.StdEncoding.DecodedLen(len(v)) > maxDERSig+3 {
		return fail(MalformedSignature, sendgridSigHeader+" is longer than a P-256 signature")
	}
	sig, ok := decodeBase64(v)
	if !ok || len(sig) == 0 {
		return fail(MalformedSignature, sendgridSigHeader+" is not base64")
	}
	ts, f := headerValue(h, sendgridTSHeader)
	if f != nil {
		return f
	}
	sec, ok := parseUnix(ts)
	if !ok {
		return fail(MalformedSignature, sendgridTSHeader+" header: timestamp is not integer seconds")
	}
	if f := checkSkew(now, sec, g.tolerance); f != nil {
		return f
	}
	d := sha256.New()
	d.Write([]byte(ts))
	d.Write(body)
	digest := d.Sum(nil)
	matched := false
	for _, k := range g.keys {
		ok := ecdsa.VerifyASN1(k, digest, sig)
		matched = matched || ok
	}
	if !matched {
		return fail(NoMatch, "no public key verified the signature")
	}
	return nil
}
