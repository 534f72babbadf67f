package ratelimit

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxKeys is Options.MaxKeys when it is left zero.
const DefaultMaxKeys = 100_000

// maxShards is how many independently locked shards a GCRA spreads its keys
// over, so that the ingest hot path of different tenants does not serialize
// on one mutex. A GCRA with a small MaxKeys uses fewer (see shardCount).
const maxShards = 16

// Options configures a GCRA.
type Options struct {
	// Default is the limit of every key without an override. The zero
	// Limit is unlimited.
	Default Limit
	// Now is the clock; nil means time.Now. Only differences between its
	// readings matter (a real clock's monotonic reading is used).
	Now func() time.Time
	// MaxKeys bounds how many keys hold state, node-wide; <= 0 means
	// DefaultMaxKeys. Past it the least recently used idle key is evicted;
	// see GCRA for what happens when no key is idle. Overrides do not
	// count: they are configuration, bounded by whoever sets them.
	MaxKeys int
	// OnFull, if set, is called (without any lock held) each time a request
	// of a key without state is refused because its shard holds MaxKeys'
	// share of keys and none of the oldest is idle. A metric or a
	// rate-bounded log belongs here; the key is not passed, being request
	// input.
	OnFull func()
}

// GCRA is a rate limiter keyed by string (a tenant id), in memory, per
// node, using the generic cell rate algorithm.
//
// State and invariants:
//
//  1. A key's whole state is one instant, its theoretical arrival time
//     (TAT): the time at which the key will have paid for every request
//     admitted so far, each costing the emission interval T = 1/Rate. A key
//     without state is the same as a key whose TAT is now or earlier, which
//     is why idle keys may be evicted freely.
//  2. A request for n cells at time now is admitted iff
//     max(TAT, now) + n·T - now <= Burst·T, and then TAT becomes
//     max(TAT, now) + n·T. So TAT - now <= Burst·T after every admission:
//     no more than Burst requests at once, Rate per second sustained. A
//     refused request changes nothing, and its retryAfter is exactly how
//     long until the same request would be admitted.
//  3. Eviction never forgets an unpaid TAT (TAT > now). Forgetting one
//     would let that key send a fresh burst on top of the one it just sent.
//  4. When a key's limit changes (SetLimit, DeleteLimit, SetDefault), its
//     debt (TAT - now) is carried over counted in requests, not in time,
//     and capped at the new burst: a key that used 3 of its burst still has
//     used 3 under the new limit. This is applied lazily, on the key's next
//     request, from the interval stored with its TAT.
//
// Why GCRA rather than a token bucket with (tokens, last) floats: it is the
// same limiter (a bucket of Burst tokens refilled at Rate, starting full),
// but its state is one int64, its arithmetic is exact integer nanoseconds
// (rate 2/s gives a retryAfter of exactly 500ms), and the test suite checks
// the equivalence against a reference bucket.
//
// Memory is bounded by MaxKeys, split over the shards. When a new key
// arrives at a full shard, the least recently used keys (a few, from the
// cold end) are checked and the first idle one (TAT <= now) is evicted. If
// none is idle, the new key's request is refused (fail closed) with the
// retryAfter until one of them will be idle, and OnFull is called.
// Rejected alternatives: evicting an unpaid key breaks invariant 3;
// admitting the new key without state makes it unlimited; growing past
// MaxKeys makes memory unbounded under a flood of distinct keys. Every
// unpaid key turns idle within Burst·T of its last admission, so a full
// table of unpaid keys is transient, and with keys that are configured
// tenants it does not happen at all.
//
// All methods are safe for concurrent use.
type GCRA struct {
	now    func() time.Time
	epoch  time.Time // clock readings are kept as nanoseconds since epoch
	onFull func()
	seed   maphash.Seed
	def    atomic.Pointer[rule]
	shards []shard
}

// shard is a slice of the key space with its own lock: the GCRA state of
// its keys, in least-recently-used order, and the overrides of its keys.
type shard struct {
	mu        sync.Mutex
	keys      map[string]*entry // guarded by mu
	lru       entry             // guarded by mu; sentinel: lru.next is the most recently used
	overrides map[string]rule   // guarded by mu
	capacity  int
	_         [64]byte // keep neighbouring shards' locks off one cache line
}

// entry is one key's state (invariant 1) and its place in the LRU list.
type entry struct {
	key        string
	tat        int64 // theoretical arrival time, ns since GCRA.epoch
	interval   int64 // the T that tat was computed with (invariant 4)
	prev, next *entry
}

// evictScan is how many of a full shard's least recently used keys are
// checked for an idle one before a new key is refused. Bounded, so that a
// flood of new keys cannot make each request walk the whole shard.
const evictScan = 8

// NewGCRA returns a limiter with no state and no overrides.
func NewGCRA(opts Options) *GCRA {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	g := &GCRA{
		now:    now,
		epoch:  now(),
		onFull: opts.OnFull,
		seed:   maphash.MakeSeed(),
		shards: make([]shard, shardCount(maxKeys)),
	}
	d := compile(opts.Default)
	g.def.Store(&d)
	n := len(g.shards)
	for i := range g.shards {
		s := &g.shards[i]
		s.keys = make(map[string]*entry)
		s.overrides = make(map[string]rule)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		// Shares add up to exactly maxKeys.
		s.capacity = maxKeys / n
		if i < maxKeys%n {
			s.capacity++
		}
	}
	return g
}

// shardCount is the largest power of two <= maxShards that leaves every
// shard at least 64 keys, so a small MaxKeys is not cut into shares too
// small to be an LRU (and a MaxKeys under 128 gives one exact LRU).
func shardCount(maxKeys int) int {
	n := 1
	for n < maxShards && maxKeys/(2*n) >= 64 {
		n *= 2
	}
	return n
}

func (g *GCRA) shard(key string) *shard {
	if len(g.shards) == 1 {
		return &g.shards[0]
	}
	return &g.shards[maphash.String(g.seed, key)%uint64(len(g.shards))]
}

// clock returns now as nanoseconds since g.epoch.
func (g *GCRA) clock() int64 { return int64(g.now().Sub(g.epoch)) }

// Allow is AllowN(key, 1).
func (g *GCRA) Allow(key string) (ok bool, retryAfter time.Duration) {
	return g.AllowN(key, 1)
}

// AllowN reports whether n requests of key are admitted now, and records
// them if so. When they are not, retryAfter is how long until the same n
// would be admitted (for n == 1: until one more request would be), or
// Never if n exceeds the key's burst. n <= 0 is admitted and records
// nothing; so is every request of a key whose limit is unlimited (which
// holds no state).
func (g *GCRA) AllowN(key string, n int) (ok bool, retryAfter time.Duration) {
	if n <= 0 {
		return true, 0
	}
	s := g.shard(key)
	s.mu.Lock()
	r, found := s.overrides[key]
	if !found {
		r = *g.def.Load()
	}
	if r.unlimited() {
		s.mu.Unlock()
		return true, 0
	}
	if int64(n) > r.burst {
		s.mu.Unlock()
		return false, Never
	}
	now := g.clock()
	ok, retryAfter, full := s.allowLocked(key, int64(n), r, now)
	s.mu.Unlock()
	if full && g.onFull != nil {
		g.onFull()
	}
	return ok, retryAfter
}

// allowLocked applies invariant 2 to key. full reports a refusal because
// the shard had no room for a new key.
//
// REQUIRES: s.mu held; !r.unlimited(); 0 < n <= r.burst.
func (s *shard) allowLocked(key string, n int64, r rule, now int64) (ok bool, retryAfter time.Duration, full bool) {
	cost := satMul(n, r.interval)
	e := s.keys[key]
	if e == nil {
		// A key without state is a key with TAT <= now (invariant 1); since
		// n <= burst the request is admitted, if there is room to record it.
		if len(s.keys) >= s.capacity {
			if wait := s.evictIdleLocked(now); wait > 0 {
				return false, time.Duration(wait), true
			}
		}
		e = &entry{key: key, tat: now + cost, interval: r.interval}
		s.keys[key] = e
		s.pushFrontLocked(e)
		return true, 0, false
	}
	s.moveToFrontLocked(e)
	if e.tat > now {
		if e.interval != r.interval {
			// Invariant 4: carry the debt over in requests. Float is fine
			// for a one-off conversion; round up to stay on the safe side.
			debt := math.Ceil(float64(e.tat-now) * float64(r.interval) / float64(e.interval))
			e.tat = now + int64(min(debt, float64(r.tolerance)))
		}
		// Cap the debt at the (possibly lowered) burst: at most "exhausted".
		e.tat = min(e.tat, now+r.tolerance)
	}
	e.interval = r.interval
	tat := max(e.tat, now)
	newTAT := tat + cost
	if allowAt := newTAT - r.tolerance; allowAt > now {
		return false, time.Duration(allowAt - now), false
	}
	e.tat = newTAT
	return true, 0, false
}

// evictIdleLocked evicts the least recently used idle key among the
// evictScan coldest and returns 0, or, when none of them is idle, evicts
// nothing and returns how long until the first of them will be idle (> 0).
//
// REQUIRES: s.mu held.
func (s *shard) evictIdleLocked(now int64) (wait int64) {
	wait = math.MaxInt64
	e := s.lru.prev
	for i := 0; i < evictScan && e != &s.lru; i++ {
		if e.tat <= now { // invariant 3: only paid-up keys
			s.removeLocked(e)
			return 0
		}
		wait = min(wait, e.tat-now)
		e = e.prev
	}
	if wait == math.MaxInt64 {
		// capacity 0 cannot happen (every shard holds >= 1 key), but a
		// refusal must carry a positive wait.
		wait = 1
	}
	return wait
}

// REQUIRES: s.mu held.
func (s *shard) pushFrontLocked(e *entry) {
	e.prev, e.next = &s.lru, s.lru.next
	e.prev.next, e.next.prev = e, e
}

// REQUIRES: s.mu held.
func (s *shard) moveToFrontLocked(e *entry) {
	if s.lru.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	s.pushFrontLocked(e)
}

// REQUIRES: s.mu held.
func (s *shard) removeLocked(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(s.keys, e.key)
}

// SetLimit gives key a limit of its own (a configured tenant or a runtime
// override), replacing any it had. It applies to key's next request; the
// requests key already made count against it (invariant 4). A zero Limit
// makes key unlimited whatever the default.
func (g *GCRA) SetLimit(key string, l Limit) {
	s := g.shard(key)
	s.mu.Lock()
	s.overrides[key] = compile(l)
	s.mu.Unlock()
}

// DeleteLimit removes key's own limit, so it falls back to the default
// from its next request. Removing a limit key does not have is a no-op.
func (g *GCRA) DeleteLimit(key string) {
	s := g.shard(key)
	s.mu.Lock()
	delete(s.overrides, key)
	s.mu.Unlock()
}

// Limit returns the limit that applies to key, and whether it is key's own
// (set by SetLimit) rather than the default.
func (g *GCRA) Limit(key string) (l Limit, override bool) {
	s := g.shard(key)
	s.mu.Lock()
	r, found := s.overrides[key]
	s.mu.Unlock()
	if found {
		return r.limit, true
	}
	return g.def.Load().limit, false
}

// Overrides returns a copy of every key's own limit.
func (g *GCRA) Overrides() map[string]Limit {
	out := make(map[string]Limit)
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		for k, r := range s.overrides {
			out[k] = r.limit
		}
		s.mu.Unlock()
	}
	return out
}

// SetDefault replaces the limit of every key without an override (a config
// reload), from each key's next request, as SetLimit does.
func (g *GCRA) SetDefault(l Limit) {
	r := compile(l)
	g.def.Store(&r)
}

// Default returns the limit of keys without an override.
func (g *GCRA) Default() Limit { return g.def.Load().limit }

// Len returns how many keys hold state (at most MaxKeys).
func (g *GCRA) Len() int {
	n := 0
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}
