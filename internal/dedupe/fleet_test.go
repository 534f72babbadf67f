package dedupe_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/testutil/services"
)

func newFleet(t *testing.T, prefix string, ttl time.Duration) *dedupe.FleetClaims {
	t.Helper()
	f, err := dedupe.NewFleetClaims(dedupe.FleetOptions{URL: services.RedisURL(), Prefix: prefix, PendingTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

var id1 = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func TestFleetClaimPendingThenCommitted(t *testing.T) {
	ctx := context.Background()
	rc, prefix := services.RedisPrefix(t)
	a, b := newFleet(t, prefix, 30*time.Second), newFleet(t, prefix, 30*time.Second) // two nodes
	c, err := a.Claim(ctx, "acme", "github", "evt-1")
	if err != nil || c.Committed || c.Key == "" {
		t.Fatalf("first claim: %+v %v", c, err)
	}
	if _, err := b.Claim(ctx, "acme", "github", "evt-1"); !errors.Is(err, dedupe.ErrPending) {
		t.Fatalf("second node meeting a pending claim: %v, want ErrPending", err)
	}
	// Another tenant's or source's key is a different claim.
	for _, k := range [][2]string{{"other", "github"}, {"acme", "stripe"}} {
		if c2, err := b.Claim(ctx, k[0], k[1], "evt-1"); err != nil || c2.Committed {
			t.Fatalf("claim %v: %+v %v, want a fresh pending claim", k, c2, err)
		}
	}
	if err := a.Promote(ctx, c, id1, time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := b.Claim(ctx, "acme", "github", "evt-1")
	if err != nil || !got.Committed || got.ID != id1 {
		t.Fatalf("after promote: %+v %v, want committed under the hook id", got, err)
	}
	// Committed keeps the dedupe TTL, not the pending one.
	if ttl := rc.PTTL(ctx, c.Key).Val(); ttl < 59*time.Minute {
		t.Fatalf("committed TTL %s, want the dedupe TTL (1h)", ttl)
	}
	// A release after the promote changes nothing: it is no longer ours pending.
	if err := a.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Claim(ctx, "acme", "github", "evt-1"); !got.Committed {
		t.Fatalf("release removed a committed claim: %+v", got)
	}
}

func TestFleetReleaseIsCompareAndDelete(t *testing.T) {
	ctx := context.Background()
	rc, prefix := services.RedisPrefix(t)
	a, b := newFleet(t, prefix, 30*time.Second), newFleet(t, prefix, 30*time.Second)
	old, err := a.Claim(ctx, "t", "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	// Our pending entry expired and another node claimed the key since.
	rc.Del(ctx, old.Key)
	cur, err := b.Claim(ctx, "t", "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Claim(ctx, "t", "s", "k"); !errors.Is(err, dedupe.ErrPending) {
		t.Fatalf("a stale release deleted another claim's entry: %v", err)
	}
	// Nor may a stale promote overwrite it.
	if err := a.Promote(ctx, old, id1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if v := rc.Get(ctx, cur.Key).Val(); !strings.HasPrefix(v, "p:") {
		t.Fatalf("a stale promote overwrote another claim's pending entry: %q", v)
	}
	if err := b.Release(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if n := rc.Exists(ctx, cur.Key).Val(); n != 0 {
		t.Fatal("own release did not delete the pending entry")
	}
}

// A pending claim whose request never settles (its node died) expires
// after fleet.pending_ttl_ms; the key can then be claimed again.
func TestFleetPendingClaimExpires(t *testing.T) {
	ctx := context.Background()
	_, prefix := services.RedisPrefix(t)
	a := newFleet(t, prefix, 300*time.Millisecond)
	if _, err := a.Claim(ctx, "t", "s", "k"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := a.Claim(ctx, "t", "s", "k"); !errors.Is(err, dedupe.ErrPending) {
		t.Fatalf("before the TTL: %v, want ErrPending", err)
	}
	var again dedupe.Claim
	testutil.Eventually(t, 5*time.Second, "pending claim to expire", func() bool {
		c, err := a.Claim(ctx, "t", "s", "k")
		again = c
		return err == nil
	})
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("claim free again after %s, before its 300ms TTL", waited)
	}
	if again.Committed {
		t.Fatal("an expired pending claim came back committed")
	}
}

func TestFleetRedisDownIsUnavailable(t *testing.T) {
	f, err := dedupe.NewFleetClaims(dedupe.FleetOptions{URL: "redis://127.0.0.1:1/0", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Claim(context.Background(), "t", "s", "k"); !errors.Is(err, dedupe.ErrUnavailable) {
		t.Fatalf("claim with Redis down: %v, want ErrUnavailable", err)
	}
	if f.Up() {
		t.Fatal("Up after a failed call")
	}
	if err := f.Ping(context.Background()); !errors.Is(err, dedupe.ErrUnavailable) {
		t.Fatalf("ping: %v", err)
	}
}

func TestFleetBadURLDoesNotRepeatIt(t *testing.T) {
	_, err := dedupe.NewFleetClaims(dedupe.FleetOptions{URL: "http://u:hunter2@h"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("got %v", err)
	}
}

// Boot recovery adopts the claim a dead node left pending; a key another
// hook already committed keeps its first id.
func TestFleetAdoptCommitsAReplayedHook(t *testing.T) {
	ctx := context.Background()
	_, prefix := services.RedisPrefix(t)
	dead, other := newFleet(t, prefix, 30*time.Second), newFleet(t, prefix, 30*time.Second)
	if _, err := dead.Claim(ctx, "t", "s", "k1"); err != nil {
		t.Fatal(err)
	}
	if err := other.Adopt(ctx, "t", "s", "k1", id1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if c, err := other.Claim(ctx, "t", "s", "k1"); err != nil || !c.Committed || c.ID != id1 {
		t.Fatalf("after adopt: %+v %v, want committed under the replayed id", c, err)
	}
	first := [16]byte{9}
	c, _ := other.Claim(ctx, "t", "s", "k2")
	if err := other.Promote(ctx, c, first, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := dead.Adopt(ctx, "t", "s", "k2", id1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if c, _ := other.Claim(ctx, "t", "s", "k2"); c.ID != first {
		t.Fatalf("adopt replaced a committed claim: %x", c.ID)
	}
}

// A Redis that accepts connections and never answers is as good as down:
// the claim fails within fleet.redis.timeout_ms, never hangs the request.
func TestFleetSlowRedisTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	f, err := dedupe.NewFleetClaims(dedupe.FleetOptions{URL: "redis://" + ln.Addr().String(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	_, err = f.Claim(context.Background(), "t", "s", "k")
	if !errors.Is(err, dedupe.ErrUnavailable) {
		t.Fatalf("claim against a silent Redis: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("claim took %s, want about the 200ms timeout", took)
	}
}
