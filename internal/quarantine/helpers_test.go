package quarantine_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// memStore is a real store on an in-memory filesystem.
func memStore(t *testing.T) *store.Store {
	t.Helper()
	return testutil.OpenStore(t, "/data/store", vfs.NewMem())
}

func newPen(t *testing.T, st *store.Store, o quarantine.Options) *quarantine.Pen {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testutil.Logger(t)
	}
	p, err := quarantine.New(st, o)
	if err != nil {
		t.Fatalf("new pen: %v", err)
	}
	return p
}

// envelope is a held hook as the edge builds it.
func envelope(t *testing.T, source string, at time.Time, body string) *store.Envelope {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	b := []byte(body)
	return &store.Envelope{
		ID: id, ReceivedAt: at.UnixNano(), Tenant: "default", Source: source,
		ContentType: "application/json",
		Headers:     []store.Header{{Name: "content-type", Value: "application/json"}},
		Body:        b, SHA256: sha256.Sum256(b),
	}
}

func hold(t *testing.T, p *quarantine.Pen, env *store.Envelope) {
	t.Helper()
	if err := p.Hold(t.Context(), env, "no_match"); err != nil {
		t.Fatalf("hold %s: %v", env.Source, err)
	}
}

func stats(t *testing.T, p *quarantine.Pen, records int, bytes int64) {
	t.Helper()
	if r, b := p.Stats(); r != records || b != bytes {
		t.Fatalf("Stats() = %d records, %d bytes; want %d, %d", r, b, records, bytes)
	}
}

func ids(hs []quarantine.Held) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.ID
	}
	return out
}

func idOf(env *store.Envelope) string { return uuid.UUID(env.ID).String() }

// githubSig is X-Hub-Signature-256 for body under secret.
func githubSig(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// stripeSig is Stripe-Signature for body under secret at ts.
func stripeSig(secret string, ts time.Time, body string) string {
	t := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(t + "." + body))
	return "t=" + t + ",v1=" + hex.EncodeToString(m.Sum(nil))
}
