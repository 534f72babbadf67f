package edge_test

// dedupe.scope: fleet against the real Redis (ADR section 3, TEN-6's
// two-phase claim): two nodes — each its own store, queue and edge — share
// one claim prefix, exactly as two Ankusa processes share fleet.redis.url.

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/testutil/services"
)

type fleetNode struct {
	h    http.Handler
	st   *store.Store
	q    *queue.Queue
	log  *memory.Log // nil on a disk node
	gate *testutil.WALSyncGate
}

// newFleetNode builds one node; dual nil means wal.type: disk.
func newFleetNode(t *testing.T, name, redisURL, prefix string, dual func(*queue.DualOptions)) *fleetNode {
	t.Helper()
	n := &fleetNode{gate: testutil.NewWALSyncGate()}
	n.st = testutil.OpenStore(t, testutil.TempStoreDir(t), n.gate.Wrap(vfs.Default))
	var qo queue.Options
	if dual != nil {
		lg, err := memory.Open(memory.Options{Dir: filepath.Join(t.TempDir(), "intake"), Node: name, Logger: testutil.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lg.Close() })
		n.log = lg
		d := &queue.DualOptions{Intake: lg, Node: name, PublishTimeout: 2 * time.Second, BreakerFailures: 100, Probe: time.Millisecond, ReconcileEvery: -1}
		dual(d)
		qo.Dual = d
	}
	n.q = testutil.StartQueue(t, n.st, qo)
	fc, err := dedupe.NewFleetClaims(dedupe.FleetOptions{URL: redisURL, Prefix: prefix, PendingTTL: 30 * time.Second, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	settler := dedupe.NewSettler(fc, 1024, testutil.Logger(t))
	settler.Start()
	// Registered before the queue's cleanup runs (LIFO): the settler stops
	// after the queue, as in the app.
	t.Cleanup(func() { settler.Stop(); _ = fc.Close() })
	var hold edge.Holder
	if dual != nil {
		hold = n.q
	}
	n.h = edge.New(edge.Options{
		Routing: "path", Prefix: "/webhooks", MaxBodyBytes: 1000,
		Sources: edge.NewRegistry(map[string]*edge.Source{
			"github": {ID: "github", Sinks: []queue.SinkRef{{Num: 0, ID: "log"}}, Dedupe: dedupe.New(&dedupe.Options{Preset: "github", TTL: 60 * time.Second})},
		}),
		Committer: n.q, Observer: nopObserver{}, Logger: testutil.Logger(t),
		Claims: fc, Settler: settler, Holder: hold, IntakeRetryAfterSecs: 7,
	})
	return n
}

func (n *fleetNode) hooks(t *testing.T) uint64 {
	t.Helper()
	c, err := n.st.Count([]byte{store.PrefixHook})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func post(t *testing.T, n *fleetNode, key string) (int, string, map[string]any) {
	t.Helper()
	return dualPost(t, n.h, "/webhooks/github", map[string]string{"X-GitHub-Delivery": key})
}

// The same key posted concurrently to two nodes yields exactly one hook id:
// every 201 names it, and the two stores hold one hook per key between them.
func TestFleet_SameKeyOnTwoNodesIsOneHook(t *testing.T) {
	_, prefix := services.RedisPrefix(t)
	a := newFleetNode(t, "node-a", services.RedisURL(), prefix, nil)
	b := newFleetNode(t, "node-b", services.RedisURL(), prefix, nil)
	const keys, perNode = 25, 3
	ids := make([]map[string]bool, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	conflicts := 0
	for k := 0; k < keys; k++ {
		ids[k] = map[string]bool{}
		for _, n := range []*fleetNode{a, b} {
			for range perNode {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						status, _, body := post(t, n, fmt.Sprintf("evt-%d", k))
						if status == http.StatusConflict || (status == http.StatusServiceUnavailable && body["error"] == "dedupe_unavailable") {
							// A provider retries a 409 or 503 after a backoff (a
							// slow Redis under -race answers 503: nothing stored).
							mu.Lock()
							conflicts++
							mu.Unlock()
							time.Sleep(2 * time.Millisecond)
							continue
						}
						if status != http.StatusCreated {
							t.Errorf("key %d: %d %v", k, status, body)
							return
						}
						mu.Lock()
						ids[k][body["id"].(string)] = true
						mu.Unlock()
						return
					}
				}()
			}
		}
	}
	wg.Wait()
	for k, m := range ids {
		if len(m) != 1 {
			t.Fatalf("key %d answered with %d hook ids %v, want exactly one", k, len(m), m)
		}
	}
	if total := a.hooks(t) + b.hooks(t); total != keys {
		t.Fatalf("hooks stored on both nodes = %d, want %d (one per key)", total, keys)
	}
	t.Logf("%d keys × %d posts: %d answered 409 dedupe_pending or 503 on the way", keys, 2*perNode, conflicts)
}

// ADR case "publish fails after local commit" under fleet scope: the claim
// stays pending (never released), so the other node answers 409; once the
// reconciler republishes, the held claim is promoted and the retry on the
// other node is 201 duplicate with the first id. One hook id in all.
func TestFleet_PublishFailsAfterLocalCommit(t *testing.T) {
	_, prefix := services.RedisPrefix(t)
	a := newFleetNode(t, "node-a", services.RedisURL(), prefix, func(*queue.DualOptions) {})
	b := newFleetNode(t, "node-b", services.RedisURL(), prefix, nil)
	a.log.FailNext(1, intake.Unavailable)
	if status, ra, body := post(t, a, "evt-half-local"); status != 503 || ra != "7" || body["error"] != "intake_unavailable" {
		t.Fatalf("first: %d %q %v, want 503 intake_unavailable", status, ra, body)
	}
	for _, n := range []*fleetNode{b, a} {
		if status, ra, body := post(t, n, "evt-half-local"); status != 409 || ra == "" || body["error"] != "dedupe_pending" {
			t.Fatalf("retry before the reconcile: %d %q %v, want 409 dedupe_pending with Retry-After", status, ra, body)
		}
	}
	a.q.Reconcile(context.Background())
	first := uuid.UUID(a.log.Records()[0].ID).String()
	var body map[string]any
	testutil.Eventually(t, 5*time.Second, "held claim promoted", func() bool {
		var status int
		status, _, body = post(t, b, "evt-half-local")
		return status == 201
	})
	if body["duplicate"] != true || body["id"] != first {
		t.Fatalf("retry after the reconcile: %v, want 201 duplicate of %s", body, first)
	}
	if a.hooks(t) != 1 || b.hooks(t) != 0 {
		t.Fatalf("hooks a=%d b=%d, want 1 and 0", a.hooks(t), b.hooks(t))
	}
}

// ADR case "local commit fails after publish" under fleet scope: the store
// write fails once, the record is in the log; retries get 409 until the
// reconciler writes the local half, then 201 duplicate with the first id.
func TestFleet_LocalCommitFailsAfterPublish(t *testing.T) {
	_, prefix := services.RedisPrefix(t)
	a := newFleetNode(t, "node-a", services.RedisURL(), prefix, func(*queue.DualOptions) {})
	b := newFleetNode(t, "node-b", services.RedisURL(), prefix, nil)
	a.gate.FailNext(1)
	if status, _, body := post(t, a, "evt-half-log"); status != 503 || body["error"] != "store_unavailable" {
		t.Fatalf("first: %d %v, want 503 store_unavailable", status, body)
	}
	if status, _, body := post(t, b, "evt-half-log"); status != 409 || body["error"] != "dedupe_pending" {
		t.Fatalf("retry before the reconcile: %d %v, want 409 dedupe_pending", status, body)
	}
	testutil.Eventually(t, 10*time.Second, "fence lifted", func() bool { s := a.q.Stats(); return s.Fences >= 1 && !s.Fenced })
	a.q.Reconcile(context.Background())
	first := uuid.UUID(a.log.Records()[0].ID).String()
	var body map[string]any
	testutil.Eventually(t, 5*time.Second, "held claim promoted", func() bool {
		var status int
		status, _, body = post(t, b, "evt-half-log")
		return status == 201
	})
	if body["duplicate"] != true || body["id"] != first {
		t.Fatalf("retry after the reconcile: %v, want 201 duplicate of %s", body, first)
	}
	if a.hooks(t) != 1 || b.hooks(t) != 0 {
		t.Fatalf("hooks a=%d b=%d, want 1 and 0", a.hooks(t), b.hooks(t))
	}
}

// A record stuck past reconcile_deadline_ms releases its claim: the retry
// is admitted as a new hook (the one sanctioned second hook id), while the
// reconciler keeps the stuck one.
func TestFleet_StuckPastDeadlineReleasesTheClaim(t *testing.T) {
	_, prefix := services.RedisPrefix(t)
	a := newFleetNode(t, "node-a", services.RedisURL(), prefix, func(d *queue.DualOptions) {
		d.ReconcileDeadline = 300 * time.Millisecond
		d.ReconcileEvery = 10 * time.Millisecond
	})
	b := newFleetNode(t, "node-b", services.RedisURL(), prefix, nil)
	a.log.FailNext(1_000_000, intake.Unavailable)
	if status, _, _ := post(t, a, "evt-stuck"); status != 503 {
		t.Fatalf("first: %d, want 503", status)
	}
	start := time.Now()
	if status, _, _ := post(t, b, "evt-stuck"); status != 409 {
		t.Fatalf("retry inside the deadline: %d, want 409", status)
	}
	var body map[string]any
	testutil.Eventually(t, 5*time.Second, "stuck claim released", func() bool {
		var status int
		status, _, body = post(t, b, "evt-stuck")
		return status == 201
	})
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("claim released after %s, before the 300ms deadline", time.Since(start))
	}
	if body["duplicate"] == true {
		t.Fatalf("retry after the release: %v, want a new hook", body)
	}
	if s, _ := a.q.Dual(); s.Pending.Records != 1 || a.hooks(t) != 1 {
		t.Fatalf("the stuck record must be kept: pending %d hooks %d", s.Pending.Records, a.hooks(t))
	}
}

// Refused before either half: nothing exists, the claim is released, and
// the next attempt (on any node) is admitted at once.
func TestFleet_RefusedBeforeEitherHalfReleases(t *testing.T) {
	_, prefix := services.RedisPrefix(t)
	a := newFleetNode(t, "node-a", services.RedisURL(), prefix, func(d *queue.DualOptions) { d.MaxRecordBytes = 10 })
	b := newFleetNode(t, "node-b", services.RedisURL(), prefix, nil)
	if status, _, body := post(t, a, "evt-big"); status != 503 || body["error"] != "intake_unavailable" {
		t.Fatalf("first: %d %v, want 503 intake_unavailable", status, body)
	}
	if a.hooks(t) != 0 {
		t.Fatal("a refused record was stored")
	}
	if status, _, body := post(t, b, "evt-big"); status != 201 || body["duplicate"] == true {
		t.Fatalf("retry on the other node: %d %v, want 201 new hook", status, body)
	}
}

// Redis down: a dedupe-keyed hook is refused 503 with Retry-After and
// nothing is stored — never an unchecked accept.
func TestFleet_RedisDownIs503AndStoresNothing(t *testing.T) {
	n := newFleetNode(t, "node-a", "redis://127.0.0.1:1/0", "ankusa-test-down", nil)
	status, ra, body := post(t, n, "evt-down")
	if status != 503 || ra == "" || body["error"] != "dedupe_unavailable" {
		t.Fatalf("got %d %q %v, want 503 dedupe_unavailable with Retry-After", status, ra, body)
	}
	if n.hooks(t) != 0 {
		t.Fatal("a hook was stored without its claim")
	}
}
