package queue_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

var sinks = []queue.SinkRef{{Num: 0, ID: "log"}}

func rec(body, dedupe string) *queue.Record {
	r := &queue.Record{
		ReceivedAt: time.Now(), Tenant: "default", Source: "demo",
		ContentType: "application/json", Body: []byte(body), Sinks: sinks,
	}
	if dedupe != "" {
		r.DedupeKey, r.DedupeTTL = dedupe, time.Hour
	}
	return r
}

// groupSignal tells a test when the writer has applied a group.
type groupSignal struct {
	queue.NopObserver
	applied chan int
}

func newGroupSignal() *groupSignal { return &groupSignal{applied: make(chan int, 1024)} }

func (g *groupSignal) Group(records, written int, _ time.Duration) { g.applied <- written }

func (g *groupSignal) wait(t *testing.T) int {
	t.Helper()
	return testutil.Receive(t, g.applied, "no group applied")
}

type submitted struct {
	res queue.Result
	err error
}

func submitAsync(q *queue.Queue, r *queue.Record) chan submitted {
	ch := make(chan submitted, 1)
	go func() {
		res, err := q.Submit(context.Background(), r)
		ch <- submitted{res, err}
	}()
	return ch
}

func notYet(t *testing.T, ch chan submitted, what string) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("%s: answered before its fsync returned: %+v", what, s)
	case <-time.After(50 * time.Millisecond):
	}
}

func answer(t *testing.T, ch chan submitted) submitted {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
		return submitted{}
	}
}

// gatedQueue starts a queue over a store whose WAL syncs pass through a
// gate, with o's Observer the returned group signal.
func gatedQueue(t *testing.T, o queue.Options) (*testutil.WALSyncGate, *store.Store, *groupSignal, *queue.Queue) {
	t.Helper()
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	sig := newGroupSignal()
	o.Observer = sig
	return gate, st, sig, testutil.StartQueue(t, st, o)
}

// submitAll submits n records with bodies "name i" (and, with dedupe, the
// dedupe keys "evt_name_i"), each answered on its own channel.
func submitAll(q *queue.Queue, n int, name string, dedupe bool) []chan submitted {
	var chs []chan submitted
	for i := range n {
		key := ""
		if dedupe {
			key = fmt.Sprintf("evt_%s_%d", name, i)
		}
		chs = append(chs, submitAsync(q, rec(fmt.Sprintf("%s %d", name, i), key)))
	}
	return chs
}

// heldRelease waits for the next WAL sync to be held and returns its
// release; a test that fails before calling it does not leave the fsync
// held for the queue's Close (the cleanup releases it first).
func heldRelease(t *testing.T, gate *testutil.WALSyncGate) func() {
	t.Helper()
	ch := gate.Held(t)
	var once sync.Once
	release := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(func() { gate.ReleaseAll(); release() })
	return release
}

func hookPresent(t *testing.T, st *store.Store, id [16]byte) bool {
	t.Helper()
	v, err := st.Get(store.HookIDKey(id))
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	return v != nil
}

func TestQueue_AckOnlyAfterFsync(t *testing.T) {
	gate, _, sig, q := gatedQueue(t, queue.Options{})

	gate.Hold()
	ch := submitAsync(q, rec(`{"a":1}`, ""))
	sig.wait(t)
	release := gate.Held(t)
	// Applied, visible to readers, not durable: the caller must still wait.
	if got := q.Stats().NextSeq; got != 2 {
		t.Fatalf("next seq after one record = %d, want 2", got)
	}
	if q.Durable() != 0 {
		t.Fatalf("durable seq before the fsync returned = %d, want 0", q.Durable())
	}
	notYet(t, ch, "record")
	gate.Open()
	close(release)
	s := answer(t, ch)
	if s.err != nil || s.res.Seq != 1 || s.res.Duplicate {
		t.Fatalf("answer = %+v, want seq 1 accepted", s)
	}
	if q.Durable() < 1 {
		t.Fatalf("durable seq after ack = %d", q.Durable())
	}
}

func TestQueue_NextGroupAppliedWhileSyncing(t *testing.T) {
	gate, _, sig, q := gatedQueue(t, queue.Options{})

	gate.Hold()
	first := submitAsync(q, rec("one", ""))
	sig.wait(t)
	release := heldRelease(t, gate)
	// A full group's worth (queue.HoldMax) queued while fsync 1 is held is
	// applied as one group while it is held: the fsync stays off the
	// writer's critical path for everything but a remainder (S1).
	more := submitAll(q, queue.HoldMax, "r", false)
	if n := sig.wait(t); n != queue.HoldMax {
		t.Fatalf("group applied while fsync 1 was held wrote %d records, want %d", n, queue.HoldMax)
	}
	notYet(t, more[0], "a record of the second group")
	gate.Open()
	release()
	if a := answer(t, first); a.err != nil || a.res.Seq != 1 {
		t.Fatalf("first = %+v, want seq 1 accepted", a)
	}
	seen := map[uint64]bool{}
	for _, ch := range more {
		b := answer(t, ch)
		if b.err != nil || b.res.Seq < 2 || b.res.Seq > uint64(1+queue.HoldMax) || seen[b.res.Seq] {
			t.Fatalf("answer %+v, want a distinct seq in 2..%d", b, 1+queue.HoldMax)
		}
		seen[b.res.Seq] = true
	}
}

// Records queued while an fsync runs, fewer than a group's worth, wait for
// it to return and are then applied as one group, which the very next
// fsync covers (S1): one Pebble commit instead of one per record (issue 14:
// at C=64 the writer committed 1.2 records per group, twenty groups per
// fsync), and no record waits for an fsync more than it did.
func TestQueue_RecordsQueuedDuringAnFsyncAreOneGroup(t *testing.T) {
	gate, _, sig, q := gatedQueue(t, queue.Options{})

	gate.Hold()
	first := submitAsync(q, rec("one", ""))
	if n := sig.wait(t); n != 1 {
		t.Fatalf("first group wrote %d records, want 1", n)
	}
	release := heldRelease(t, gate)
	const later = 5
	more := submitAll(q, later, "r", false)
	testutil.Eventually(t, 10*time.Second, "the later records queued", func() bool { return q.Stats().Queued == 1+later })
	gate.Open()
	release()
	if n := sig.wait(t); n != later {
		t.Fatalf("the next group wrote %d records, want all %d queued during the fsync", n, later)
	}
	if a := answer(t, first); a.err != nil || a.res.Seq != 1 {
		t.Fatalf("first = %+v, want seq 1 accepted", a)
	}
	for _, ch := range more {
		if b := answer(t, ch); b.err != nil {
			t.Fatalf("later record: %v", b.err)
		}
	}
	if got := q.Stats().Syncs; got != 2 {
		t.Fatalf("fsyncs = %d, want 2: the first record's, and one covering the %d queued during it", got, later)
	}
}

func TestQueue_Dedupe(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, q *queue.Queue)
	}{
		{"duplicate names the original and consumes no seq", func(t *testing.T, q *queue.Queue) {
			a, err := q.Submit(context.Background(), rec("x", "evt_1"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := q.Submit(context.Background(), rec("x", "evt_1"))
			if err != nil {
				t.Fatal(err)
			}
			if !b.Duplicate || b.ID != a.ID || b.Seq != a.Seq {
				t.Fatalf("duplicate = %+v, original = %+v", b, a)
			}
			c, err := q.Submit(context.Background(), rec("y", "evt_2"))
			if err != nil {
				t.Fatal(err)
			}
			if c.Seq != a.Seq+1 {
				t.Fatalf("next new record seq = %d, want %d (a duplicate consumed a seq)", c.Seq, a.Seq+1)
			}
		}},
		{"concurrent duplicates collapse to one hook", func(t *testing.T, q *queue.Queue) {
			const n = 50
			res := make([]queue.Result, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := q.Submit(context.Background(), rec("same", "evt_same"))
					if err != nil {
						t.Error(err)
					}
					res[i] = r
				}()
			}
			wg.Wait()
			originals := 0
			for _, r := range res {
				if r.ID != res[0].ID {
					t.Fatalf("two hook ids for one dedupe key: %x, %x", r.ID, res[0].ID)
				}
				if !r.Duplicate {
					originals++
				}
			}
			if originals != 1 {
				t.Fatalf("%d non-duplicate answers, want exactly 1", originals)
			}
			if got := q.Stats().Hooks; got != 1 {
				t.Fatalf("hooks stored = %d, want 1", got)
			}
		}},
		{"keys are scoped by tenant and source", func(t *testing.T, q *queue.Queue) {
			a, _ := q.Submit(context.Background(), rec("x", "k"))
			other := rec("x", "k")
			other.Tenant = "acme"
			b, err := q.Submit(context.Background(), other)
			if err != nil || b.Duplicate || b.ID == a.ID {
				t.Fatalf("other tenant's key treated as duplicate: %+v %v", b, err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			tc.run(t, testutil.StartQueue(t, st, queue.Options{}))
		})
	}
}

func TestQueue_DuplicateWaitsForOriginalsFsync(t *testing.T) {
	gate, _, sig, q := gatedQueue(t, queue.Options{})

	gate.Hold()
	orig := submitAsync(q, rec("x", "evt_9"))
	sig.wait(t)
	release := gate.Held(t)
	// The duplicate and enough others to fill a group (queue.HoldMax) are
	// applied while the original's fsync is held (S1).
	dup := submitAsync(q, rec("x", "evt_9"))
	others := submitAll(q, queue.HoldMax-1, "other", false)
	if n := sig.wait(t); n != queue.HoldMax-1 {
		t.Fatalf("group with the duplicate wrote %d records, want %d (the others only)", n, queue.HoldMax-1)
	}
	// The original is visible in the store but not durable: no 201 duplicate yet.
	notYet(t, dup, "duplicate")
	gate.Open()
	close(release)
	o, d := answer(t, orig), answer(t, dup)
	if o.err != nil || d.err != nil || !d.res.Duplicate || d.res.ID != o.res.ID {
		t.Fatalf("original %+v, duplicate %+v", o, d)
	}
	for _, ch := range others {
		if a := answer(t, ch); a.err != nil {
			t.Fatalf("other record: %v", a.err)
		}
	}
}

func TestQueue_ExpiredDedupeKeyIsSweptAndReusable(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{Now: clock, SweepBatch: 2})

	for i := range 5 {
		r := rec("x", fmt.Sprintf("k%d", i))
		r.DedupeTTL = time.Second
		if _, err := q.Submit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := q.Sweep(context.Background()); err != nil || n != 0 {
		t.Fatalf("sweep before expiry removed %d (%v)", n, err)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	total := 0
	for pass := 0; pass < 5; pass++ {
		n, err := q.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n > 2 {
			t.Fatalf("one pass removed %d keys, bound is 2", n)
		}
		total += n
	}
	if total != 5 {
		t.Fatalf("swept %d expiry rows, want 5", total)
	}
	left, _ := st.Count([]byte{store.PrefixDedupe})
	if left != 0 {
		t.Fatalf("%d dedupe rows left after sweeping", left)
	}
	r, err := q.Submit(context.Background(), rec("x", "k0"))
	if err != nil || r.Duplicate {
		t.Fatalf("expired key still deduped: %+v %v", r, err)
	}
}

func TestQueue_OverloadIsRefusedNotQueued(t *testing.T) {
	gate, _, _, q := gatedQueue(t, queue.Options{MaxQueue: 3, MaxBatch: 3})

	gate.Hold()
	var chans []chan submitted
	for i := range 3 {
		chans = append(chans, submitAsync(q, rec(fmt.Sprint(i), "")))
	}
	testutil.Eventually(t, 5*time.Second, "three records in the queue", func() bool { return q.Stats().Queued == 3 })
	if _, err := q.Submit(context.Background(), rec("over", "")); !errors.Is(err, queue.ErrOverload) {
		t.Fatalf("fourth record: err = %v, want ErrOverload", err)
	}
	// The three queued records are still answered once the fsync returns.
	gate.ReleaseAll()
	for _, ch := range chans {
		if s := answer(t, ch); s.err != nil {
			t.Fatal(s.err)
		}
	}
}

func TestQueue_SeqsSurviveReopen(t *testing.T) {
	dir := testutil.TempStoreDir(t)
	var last uint64
	{
		st, err := store.Open(store.Options{Dir: dir, Logger: testutil.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		q, err := queue.New(st, queue.Options{})
		if err != nil {
			t.Fatal(err)
		}
		q.Start()
		for range 10 {
			r, err := q.Submit(context.Background(), rec("x", ""))
			if err != nil {
				t.Fatal(err)
			}
			last = r.Seq
		}
		q.Close()
		_ = st.Close()
	}
	st := testutil.OpenStore(t, dir, nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	r, err := q.Submit(context.Background(), rec("y", ""))
	if err != nil {
		t.Fatal(err)
	}
	if r.Seq != last+1 {
		t.Fatalf("seq after reopen = %d, want %d", r.Seq, last+1)
	}
	if h := q.Stats().Hooks; h != 11 {
		t.Fatalf("hooks = %d, want 11", h)
	}
}

// Batcher items are pooled (batcher.go, P1): the item of a caller that
// left before its answer (ctx done) is never handed to another caller, so
// every caller gets its own record's answer, also after one left while its
// record was still in flight.
func TestQueue_EveryCallerGetsItsOwnAnswer(t *testing.T) {
	gate, _, sig, q := gatedQueue(t, queue.Options{})

	withID := func(b byte) *queue.Record {
		r := rec(fmt.Sprint(b), "")
		r.ID = [16]byte{15: b, 0: 1}
		return r
	}
	gate.Hold()
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := q.Submit(ctx, withID(1))
		left <- err
	}()
	sig.wait(t)
	release := gate.Held(t)
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left got %v, want context.Canceled", err)
	}
	gate.Open()
	close(release)
	for b := byte(2); b < 40; b++ {
		res, err := q.Submit(context.Background(), withID(b))
		if err != nil || res.ID != withID(b).ID {
			t.Fatalf("caller %d got %x, %v: another caller's answer", b, res.ID, err)
		}
	}
}

// The envelope's sha256 is the record's BodySHA256 when the caller hashed
// the body (the edge does), and the writer's own hash of the body otherwise.
func TestQueue_StoredBodySHA256(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	q := testutil.StartQueue(t, st, queue.Options{})
	tests := []struct {
		name   string
		hashed bool
	}{
		{"hashed by the caller", true},
		{"hashed by the writer", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rec(`{"pay":"`+tc.name+`"}`, "")
			want := sha256.Sum256(r.Body)
			if tc.hashed {
				r.BodySHA256, r.HasBodySHA256 = want, true
			}
			res, err := q.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			v, err := st.Get(store.HookKey(res.Seq))
			if err != nil || v == nil {
				t.Fatalf("hook row of seq %d: %v", res.Seq, err)
			}
			env, err := store.DecodeEnvelope(v)
			if err != nil || env.SHA256 != want {
				t.Fatalf("stored sha256 %x (%v), want %x", env.SHA256, err, want)
			}
		})
	}
}
