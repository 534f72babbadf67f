package dedupe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// FleetOptions configure FleetClaims (dedupe.scope: fleet).
type FleetOptions struct {
	// URL is fleet.redis.url (redis:// or rediss://).
	URL string
	// Prefix is fleet.key_prefix; keys are <prefix>:dedupe:<tenant>:<source>:<key>.
	Prefix string
	// PendingTTL is fleet.pending_ttl_ms: how long a pending claim lives if
	// its request never settles it (a crash, a lost release).
	PendingTTL time.Duration
	// Timeout bounds every claim store call (fleet.redis.timeout_ms): a slow
	// Redis is an unavailable one, answered 503, never waited on past it.
	Timeout time.Duration
	// Observer counts the calls; nil ignores them.
	Observer FleetObserver
}

// FleetObserver receives each claim store call's outcome (must not block):
// op is claim | promote | release | ping, result ok | error.
type FleetObserver interface {
	FleetClaim(op, result string)
}

type nopFleetObserver struct{}

func (nopFleetObserver) FleetClaim(string, string) {}

// FleetClaims is the two-phase claim on Redis (ADR section 3, TEN-6).
type FleetClaims struct {
	c    *redis.Client
	o    FleetOptions
	down atomic.Bool // the last call failed; /ready says so until one succeeds
}

// claimScript: take the key pending if absent, else return what holds it.
// One round trip, and atomic: no other node can slip between the check and
// the write.
var claimScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])`)

// promoteScript: make the key committed, but only over our own pending
// entry or an expired one. Another request's pending entry (ours expired
// and a retry claimed it) is left alone: that request settles it.
var promoteScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or not v then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0`)

// releaseScript: compare-and-delete of our own pending entry.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// adoptScript: commit the key under a replayed hook's id unless a hook
// already committed it. It overwrites a pending entry: the only pending
// entry a replayed hook can meet is its own dead request's (or, after
// that one expired, a retry's that is a second hook whatever is done).
var adoptScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 2) == 'c:' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`)

// NewFleetClaims connects lazily (go-redis dials on first use); Ping checks
// the server is there.
func NewFleetClaims(o FleetOptions) (*FleetClaims, error) {
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		// The URL may hold a password: the error names the key, not the URL.
		return nil, errors.New("fleet.redis.url: not a redis:// URL")
	}
	if o.Timeout <= 0 {
		o.Timeout = 500 * time.Millisecond
	}
	if o.PendingTTL <= 0 {
		o.PendingTTL = 30 * time.Second
	}
	if o.Prefix == "" {
		o.Prefix = "ankusa"
	}
	if o.Observer == nil {
		o.Observer = nopFleetObserver{}
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = o.Timeout, o.Timeout, o.Timeout
	// A failed call is answered 503 at once; the provider is the retrier.
	opt.MaxRetries = 0
	opt.ContextTimeoutEnabled = true
	return &FleetClaims{c: redis.NewClient(opt), o: o}, nil
}

// Close releases the connections.
func (f *FleetClaims) Close() error { return f.c.Close() }

// Up reports whether the last call to the claim store succeeded.
func (f *FleetClaims) Up() bool { return !f.down.Load() }

// Ping checks the claim store now (readiness and boot).
func (f *FleetClaims) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	return f.done("ping", f.c.Ping(ctx).Err())
}

func (f *FleetClaims) key(tenant, source, key string) string {
	// tenant and source ids cannot hold ':' (config and routing alphabets),
	// so the dedupe key, last, may.
	return f.o.Prefix + ":dedupe:" + tenant + ":" + source + ":" + key
}

func (f *FleetClaims) done(op string, err error) error {
	if err != nil && !errors.Is(err, redis.Nil) {
		f.down.Store(true)
		f.o.Observer.FleetClaim(op, "error")
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	f.down.Store(false)
	f.o.Observer.FleetClaim(op, "ok")
	return nil
}

// Claim implements Claimer.
func (f *FleetClaims) Claim(ctx context.Context, tenant, source, key string) (Claim, error) {
	var tok [12]byte
	_, _ = rand.Read(tok[:])
	c := Claim{Key: f.key(tenant, source, key), Token: hex.EncodeToString(tok[:])}
	ctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	v, err := claimScript.Run(ctx, f.c, []string{c.Key}, pendingValue(c.Token), f.o.PendingTTL.Milliseconds()).Text()
	if errors.Is(err, redis.Nil) {
		_ = f.done("claim", nil)
		return c, nil // ours, pending
	}
	if err := f.done("claim", err); err != nil {
		return Claim{}, err
	}
	committed, id, perr := parseValue(v)
	switch {
	case perr != nil:
		// Not ours to interpret: treat as a store fault rather than guess.
		return Claim{}, fmt.Errorf("%w: %w", ErrUnavailable, perr)
	case committed:
		return Claim{Key: c.Key, Committed: true, ID: id}, nil
	}
	return Claim{}, ErrPending
}

// Promote implements Claimer.
func (f *FleetClaims) Promote(ctx context.Context, c Claim, id [16]byte, ttl time.Duration) error {
	if c.Key == "" || c.Committed {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	err := promoteScript.Run(ctx, f.c, []string{c.Key}, pendingValue(c.Token), committedValue(id), max(ttl.Milliseconds(), 1)).Err()
	return f.done("promote", err)
}

// Release implements Claimer.
func (f *FleetClaims) Release(ctx context.Context, c Claim) error {
	if c.Key == "" || c.Committed {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	return f.done("release", releaseScript.Run(ctx, f.c, []string{c.Key}, pendingValue(c.Token)).Err())
}

// Adopt commits the key of a hook that boot recovery replayed from the
// intake log: its node died before settling the claim, and without this a
// provider's retry would wait out fleet.pending_ttl_ms and then become a
// second hook id for a hook that is, after all, durable. ttl is what is
// left of the source's dedupe TTL.
func (f *FleetClaims) Adopt(ctx context.Context, tenant, source, key string, id [16]byte, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	return f.done("promote", adoptScript.Run(ctx, f.c, []string{f.key(tenant, source, key)}, committedValue(id), ttl.Milliseconds()).Err())
}
