package verify

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"time"
)

// gitlab checks X-Gitlab-Token, the secret token GitLab sends as is (GitLab
// docs: "Webhooks", secret token). It is a password, not a signature: the
// body is not authenticated, which the docs say. Both sides are hashed
// before the constant-time compare, so neither the token's length nor the
// position of the first differing byte shows in the time taken, and every
// configured token is compared (invariant 1 of the package).
type gitlab struct{ sums [][32]byte }

var _ Verifier = (*gitlab)(nil)

const gitlabHeader = "X-Gitlab-Token"

func newGitLab(s Spec, errs *specErrors) Verifier {
	if len(s.PublicKeys) > 0 {
		errs.add("public_key", "applies only to asymmetric schemes; gitlab uses secret (the webhook's secret token)")
	}
	keys := decodeSecrets(s.Secrets, SecretRaw, errs)
	g := &gitlab{}
	for _, k := range keys {
		g.sums = append(g.sums, sha256.Sum256(k))
	}
	return g
}

func (g *gitlab) Verify(h http.Header, _ []byte, _ time.Time) error {
	v, f := headerValue(h, gitlabHeader)
	if f != nil {
		return f
	}
	got := sha256.Sum256([]byte(v))
	matched := 0
	for i := range g.sums {
		matched |= subtle.ConstantTimeCompare(got[:], g.sums[i][:])
	}
	if matched != 1 {
		return fail(NoMatch, gitlabHeader+" matches no configured token")
	}
	return nil
}
