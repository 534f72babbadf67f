package verify_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/verify"
)

// The signers below are the test's own, straightforward implementations of
// each provider's algorithm with crypto/hmac directly; they share no code
// with the package under test, so a test passing means two independent
// readings of the documentation agree.

// now is the fixed clock of every test.
var now = time.Unix(1_700_000_000, 0)

var nowTS = strconv.FormatInt(now.Unix(), 10)

func ts(offset int64) string { return strconv.FormatInt(now.Unix()+offset, 10) }

func mac(h func() hash.Hash, key []byte, parts ...string) []byte {
	m := hmac.New(h, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func hexSHA256(key, msg string) string { return hex.EncodeToString(mac(sha256.New, []byte(key), msg)) }

// whsecKey decodes a Standard Webhooks secret the way its spec describes:
// drop "whsec_", base64-decode the rest.
func whsecKey(t testing.TB, secret string) []byte {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("test secret %q: %v", secret, err)
	}
	return k
}

// signer returns headers carrying a valid signature of body at timestamp
// tsText (ignored by untimestamped schemes) under secret.
type signer func(t testing.TB, secret, tsText string, body []byte) http.Header

// Algorithm sources: see each scheme in schemes().
func signGitHub(_ testing.TB, secret, _ string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256="+hexSHA256(secret, string(body)))
	return h
}

func signShopify(_ testing.TB, secret, _ string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Shopify-Hmac-SHA256", base64.StdEncoding.EncodeToString(mac(sha256.New, []byte(secret), string(body))))
	return h
}

func signSlack(_ testing.TB, secret, tsText string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", tsText)
	h.Set("X-Slack-Signature", "v0="+hexSHA256(secret, "v0:"+tsText+":"+string(body)))
	return h
}

func signStripe(_ testing.TB, secret, tsText string, body []byte) http.Header {
	h := http.Header{}
	h.Set("Stripe-Signature", "t="+tsText+",v1="+hexSHA256(secret, tsText+"."+string(body)))
	return h
}

const msgID = "msg_2Lc0sSyyhyXy1yjDudoTNZNLEQa"

func signStandard(t testing.TB, secret, tsText string, body []byte) http.Header {
	h := http.Header{}
	h.Set("webhook-id", msgID)
	h.Set("webhook-timestamp", tsText)
	sig := base64.StdEncoding.EncodeToString(mac(sha256.New, whsecKey(t, secret), msgID+"."+tsText+"."+string(body)))
	h.Set("webhook-signature", "v1,"+sig)
	return h
}

func signSvix(t testing.TB, secret, tsText string, body []byte) http.Header {
	h := http.Header{}
	h.Set("svix-id", msgID)
	h.Set("svix-timestamp", tsText)
	sig := base64.StdEncoding.EncodeToString(mac(sha256.New, whsecKey(t, secret), msgID+"."+tsText+"."+string(body)))
	h.Set("svix-signature", "v1,"+sig)
	return h
}

// customCSVSpec is a made-up provider exercising the other knobs: SHA-512,
// base64, csv_pairs with its own keys, a header in the signed template and
// base64-encoded secrets.
var customCSVSpec = verify.Spec{
	Type:            "hmac",
	SignatureHeader: "X-Acme-Signature",
	Parse:           "csv_pairs",
	SigKey:          "sig",
	TimestampKey:    "ts",
	Signed:          "{ts}:{header:X-Acme-Delivery}:{body}",
	Hash:            "sha512",
	Encoding:        "base64",
	SecretDecode:    "base64",
}

func signCustomCSV(t testing.TB, secret, tsText string, body []byte) http.Header {
	key, err := base64.StdEncoding.DecodeString(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-Acme-Delivery", "dlv-42")
	sig := base64.StdEncoding.EncodeToString(mac(sha512.New, key, tsText+":dlv-42:"+string(body)))
	h.Set("X-Acme-Signature", "ts="+tsText+",sig="+sig)
	return h
}

// customSHA1Spec is GitHub's legacy X-Hub-Signature (SHA-1) expressed as a
// generic hmac block.
var customSHA1Spec = verify.Spec{
	Type:            "hmac",
	SignatureHeader: "X-Hub-Signature",
	SigPrefix:       "sha1=",
	Hash:            "sha1",
}

func signCustomSHA1(_ testing.TB, secret, _ string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Hub-Signature", "sha1="+hex.EncodeToString(mac(sha1.New, []byte(secret), string(body))))
	return h
}

// mustNew builds a verifier or fails the test.
func mustNew(t testing.TB, s verify.Spec) verify.Verifier {
	t.Helper()
	v, err := verify.New(s)
	if err != nil {
		t.Fatalf("New(%+v): %v", s.Type, err)
	}
	return v
}

var knownReasons = map[verify.Reason]bool{
	verify.MissingSignature:        true,
	verify.MalformedSignature:      true,
	verify.NoMatch:                 true,
	verify.TimestampOutOfTolerance: true,
	verify.BadSecret:               true,
}

// checkResult enforces the Verify contract on any outcome: nil or a
// *Failure (the concrete type, not wrapped) with a known reason the engine
// can produce, and a Detail that is short and contains no secret.
func checkResult(t testing.TB, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	f, ok := err.(*verify.Failure)
	if !ok {
		t.Fatalf("Verify returned %T %v, want *verify.Failure", err, err)
	}
	if !knownReasons[f.Reason] || f.Reason == verify.BadSecret {
		t.Fatalf("Verify returned reason %q", f.Reason)
	}
	if len(f.Detail) > 200 {
		t.Fatalf("Detail is %d bytes; it must not echo request input", len(f.Detail))
	}
	for _, s := range secrets {
		if strings.Contains(f.Detail, s) {
			t.Fatalf("Detail %q contains a secret", f.Detail)
		}
	}
}

// wantReason asserts err is nil (want == "") or a *Failure with reason want.
func wantReason(t testing.TB, err error, want verify.Reason) {
	t.Helper()
	checkResult(t, err)
	if got := verify.ReasonOf(err); got != want {
		t.Fatalf("Verify = %v, want reason %q", err, orValid(want))
	}
	if want != "" && !errors.Is(err, &verify.Failure{Reason: want}) {
		t.Fatalf("errors.Is(%v, Failure{%s}) = false", err, want)
	}
}

func orValid(r verify.Reason) string {
	if r == "" {
		return "<valid>"
	}
	return string(r)
}
