package dispatch_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// scriptedSink is a test double of sink.Sink (nothing real can play "fail
// exactly twice"): it answers from a script, records every message, and can
// block attempts until released. The HTTP, Kafka, NATS and RabbitMQ sinks are
// tested against real targets in their own packages.
type scriptedSink struct {
	mu       sync.Mutex
	script   []error // consumed in order; nil entries succeed; empty = succeed
	fallback error   // answer once the script is used up
	got      []*sink.Message
	block    chan struct{} // non-nil: attempts wait for it to close (or ctx)
	seen     chan *sink.Message
	// entered receives one value per attempt that reached the sink and is
	// waiting on block: a test that needs a delivery "in the sink's hands"
	// waits for it instead of for the claim, which comes before the
	// attempt's own store read.
	entered chan struct{}
}

func newScripted(script ...error) *scriptedSink {
	return &scriptedSink{script: script, seen: make(chan *sink.Message, 1024), entered: make(chan struct{}, 1024)}
}

func (s *scriptedSink) Deliver(ctx context.Context, m *sink.Message) error {
	mc := *m // the dispatcher reuses m after Deliver returns (sink.Sink)
	m = &mc
	s.mu.Lock()
	block := s.block
	s.mu.Unlock()
	if block != nil {
		s.entered <- struct{}{}
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, m)
	s.seen <- m
	if len(s.script) > 0 {
		err := s.script[0]
		s.script = s.script[1:]
		return err
	}
	return s.fallback
}

func (s *scriptedSink) Close() error { return nil }

// unblock lets attempts through again: later ones do not wait, and those
// waiting on block (the channel set as s.block) go on.
func (s *scriptedSink) unblock(block chan struct{}) {
	s.mu.Lock()
	s.block = nil
	s.mu.Unlock()
	close(block)
}

func (s *scriptedSink) next(t *testing.T) *sink.Message {
	t.Helper()
	return testutil.Receive(t, s.seen, "no delivery attempt")
}

type env struct {
	st   *store.Store
	q    *queue.Queue
	d    *dispatch.Dispatcher
	gate *testutil.WALSyncGate
}

func setup(t *testing.T, s sink.Sink, o dispatch.Options) *env {
	t.Helper()
	return setupWith(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, o, true)
}

// setupWith starts a queue and a dispatcher over targets; hot wires the
// commit path's hand-over of new hooks (queue.Options.OnCommitted), as the
// app does on a dispatching node; without it every delivery reads its rows.
func setupWith(t *testing.T, targets map[uint16]dispatch.Target, o dispatch.Options, hot bool) *env {
	t.Helper()
	return setupQueue(t, targets, o, queue.Options{}, hot)
}

// setupQueue is setupWith with the queue's options (OnDurable and
// OnCommitted are set here) and, when o.Logger is set, the dispatcher's
// own logger.
func setupQueue(t *testing.T, targets map[uint16]dispatch.Target, o dispatch.Options, qo queue.Options, hot bool) *env {
	t.Helper()
	return setupBefore(t, targets, o, qo, hot, nil)
}

// setupBefore is setupQueue that calls before (if set) on the dispatcher
// before it starts: for the test seams (export_test.go), which its
// goroutines read.
func setupBefore(t *testing.T, targets map[uint16]dispatch.Target, o dispatch.Options, qo queue.Options, hot bool, before func(*dispatch.Dispatcher)) *env {
	t.Helper()
	gate := testutil.NewWALSyncGate()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), gate.Wrap(vfs.Default))
	var d *dispatch.Dispatcher
	qo.OnDurable = func() {
		if d != nil {
			d.Wake()
		}
	}
	if hot {
		qo.OnCommitted = func(cs []store.Committed) {
			if d != nil {
				d.Committed(cs)
			}
		}
	}
	q := testutil.StartQueue(t, st, qo)
	o.Targets = targets
	if o.Durable == nil {
		o.Durable = q.Durable
	}
	o.OnReclaim = q.Reclaimed
	o.OnStoreFailure = q.ReportStoreFailure // as the app wires it
	if o.Logger == nil {
		o.Logger = testutil.Logger(t)
	}
	if o.Retry.Base == 0 {
		o.Retry = dispatch.RetryPolicy{Base: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 5}
	}
	if o.Poll == 0 {
		o.Poll = 20 * time.Millisecond
	}
	d = dispatch.New(st, o)
	if before != nil {
		before(d)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return &env{st: st, q: q, d: d, gate: gate}
}

func (e *env) submit(t *testing.T, body, dedupe string) queue.Result {
	t.Helper()
	r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", ContentType: "text/plain",
		Body: []byte(body), Sinks: []queue.SinkRef{{Num: 0, ID: "out"}}}
	if dedupe != "" {
		r.DedupeKey, r.DedupeTTL = dedupe, time.Hour
	}
	res, err := e.q.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (e *env) delivery(t *testing.T, seq uint64) *store.Delivery {
	t.Helper()
	v, err := e.st.Get(store.DeliveryKey(seq, 0))
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return nil
	}
	dl, err := store.DecodeDelivery(v)
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

func count(t *testing.T, st *store.Store, p byte) uint64 {
	t.Helper()
	n, err := st.Count([]byte{p})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDispatch_DeliveredThenReclaimed(t *testing.T) {
	s := newScripted()
	e := setup(t, s, dispatch.Options{})
	res := e.submit(t, "hello", "k1")
	m := s.next(t)
	if m.ID != uuid.UUID(res.ID) || string(m.Body) != "hello" || m.Attempt != 1 || m.IdempotencyKey() != "default:src:k1" {
		t.Fatalf("message = %+v", m)
	}
	testutil.Eventually(t, 10*time.Second, "hook reclaimed", func() bool {
		return count(t, e.st, store.PrefixHook) == 0 && e.q.Stats().Hooks == 0
	})
	if n := count(t, e.st, store.PrefixDelivery) + count(t, e.st, store.PrefixDue) + count(t, e.st, store.PrefixInflight); n != 0 {
		t.Fatalf("%d delivery/due/inflight rows left after reclaim", n)
	}
	// The dedupe row outlives the hook, so a late provider retry is absorbed.
	if again := e.submit(t, "hello", "k1"); !again.Duplicate || again.ID != res.ID {
		t.Fatalf("late retry after reclaim: %+v", again)
	}
}

func TestDispatch_RetriesThenDelivers(t *testing.T) {
	boom := errors.New("connection refused")
	s := newScripted(boom, sink.Retry(boom, 0), nil)
	e := setup(t, s, dispatch.Options{})
	res := e.submit(t, "x", "")
	for want := 1; want <= 3; want++ {
		if m := s.next(t); m.Attempt != want || m.ID != uuid.UUID(res.ID) {
			t.Fatalf("attempt %d: got attempt %d id %s", want, m.Attempt, m.ID)
		}
	}
	testutil.Eventually(t, 10*time.Second, "reclaimed", func() bool { return count(t, e.st, store.PrefixHook) == 0 })
}

func TestDispatch_DeadLetters(t *testing.T) {
	tests := []struct {
		name     string
		script   []error
		fallback error
		attempts int
		reason   string
	}{
		{"permanent error dead-letters at once", []error{sink.Permanent(errors.New("receiver answered 410"))}, nil, 1, "permanent: receiver answered 410"},
		{"attempts exhausted", nil, errors.New("503"), 5, "attempts exhausted: 503"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newScripted(tc.script...)
			s.fallback = tc.fallback
			e := setup(t, s, dispatch.Options{BreakerFailures: 100})
			res := e.submit(t, "x", "")
			testutil.Eventually(t, 10*time.Second, "dead row", func() bool { return count(t, e.st, store.PrefixDead) == 1 })
			dl := e.delivery(t, res.Seq)
			if dl.State != store.StateDead || int(dl.Attempts) != tc.attempts {
				t.Fatalf("delivery = %+v, want dead after %d attempts", dl, tc.attempts)
			}
			total, entries, err := e.d.DLQ(dispatch.DLQFilter{})
			if err != nil || total != 1 || entries[0].ID != uuid.UUID(res.ID).String() || entries[0].Reason != tc.reason {
				t.Fatalf("dlq = %d %+v %v", total, entries, err)
			}
			if len(s.got) != tc.attempts {
				t.Fatalf("sink saw %d attempts, want %d", len(s.got), tc.attempts)
			}
		})
	}
}

func TestDispatch_ReplayFromDLQ(t *testing.T) {
	s := newScripted(sink.Permanent(errors.New("410")))
	e := setup(t, s, dispatch.Options{})
	res := e.submit(t, "x", "evt")
	s.next(t)
	testutil.Eventually(t, 10*time.Second, "dead row", func() bool { return count(t, e.st, store.PrefixDead) == 1 })

	j, err := e.d.CreateJob(context.Background(), dispatch.JobSpec{Kind: "dlq", Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	m := s.next(t)
	if m.ID != uuid.UUID(res.ID) || m.ReplayID != j.ID || m.DedupeKey != "evt" || m.Attempt != 1 {
		t.Fatalf("replayed message id=%s replay=%q dedupe=%q attempt=%d; want same id, replay %s", m.ID, m.ReplayID, m.DedupeKey, m.Attempt, j.ID)
	}
	testutil.Eventually(t, 10*time.Second, "job done", func() bool {
		got, err := e.d.GetJob(context.Background(), j.ID)
		return err == nil && got.State == dispatch.JobDone && got.Moved == 1
	})
	testutil.Eventually(t, 10*time.Second, "reclaimed", func() bool { return count(t, e.st, store.PrefixHook) == 0 })
	if n := count(t, e.st, store.PrefixDead); n != 0 {
		t.Fatalf("%d dead rows after replay", n)
	}
}

func TestDispatch_NothingAboveDurableIsDelivered(t *testing.T) {
	s := newScripted()
	e := setup(t, s, dispatch.Options{})
	// Runs before the queue's cleanup, so a failure below cannot leave the
	// syncer stuck on a held fsync.
	t.Cleanup(e.gate.ReleaseAll)
	e.gate.Hold()
	done := make(chan queue.Result, 1)
	go func() { done <- e.submit(t, "x", "") }()
	release := e.gate.Held(t)
	// The row is applied (visible) but its fsync has not returned.
	testutil.Eventually(t, 5*time.Second, "row applied", func() bool { return count(t, e.st, store.PrefixDue) == 1 })
	e.d.Wake()
	select {
	case m := <-s.seen:
		t.Fatalf("delivered %s before its fsync returned", m.ID)
	case <-time.After(100 * time.Millisecond):
	}
	e.gate.Open()
	close(release)
	<-done
	s.next(t)
}

func TestDispatch_BreakerParksRowsWithoutSpendingAttempts(t *testing.T) {
	s := newScripted()
	s.fallback = errors.New("down")
	outcomes := outcomeFeed{ch: make(chan string, 64)}
	e := setup(t, s, dispatch.Options{BreakerFailures: 3, BreakerCooldown: time.Hour, Observer: outcomes,
		Retry: dispatch.RetryPolicy{Base: time.Millisecond, Max: time.Millisecond, MaxAttempts: 1000}})
	// One row fails three attempts in a row: the breaker opens. The third
	// failure opens it when its outcome is recorded, which the observer is
	// told of after; the sink seeing the attempt is not enough (the flake
	// of 2026-12-01: the new rows were attempted before that outcome).
	first := e.submit(t, "first", "").Seq
	for range 3 {
		s.next(t)
		outcomes.next(t)
	}
	var seqs []uint64
	for i := range 4 {
		seqs = append(seqs, e.submit(t, fmt.Sprint(i), "").Seq)
	}
	// Open: no further attempt for the cooldown, however many rows are due.
	e.d.Wake()
	select {
	case m := <-s.seen:
		t.Fatalf("attempt on %s while the breaker is open", m.ID)
	case <-time.After(200 * time.Millisecond):
	}
	if a := e.delivery(t, first).Attempts; a != 3 {
		t.Fatalf("first row attempts = %d, want 3", a)
	}
	for _, seq := range seqs {
		if dl := e.delivery(t, seq); dl.Attempts != 0 || dl.State != store.StateDue {
			t.Fatalf("parked row %d = %+v; want due with no attempt spent", seq, dl)
		}
	}
}

// viewState is delivery (seq, sink 0)'s state as GET /v1/hooks/{id} shows
// it: the row's, or inflight while the dispatcher attempts it.
func viewState(t *testing.T, st *store.Store, d *dispatch.Dispatcher, seq uint64) string {
	t.Helper()
	dl, err := st.ReadDelivery(seq, 0)
	if err != nil || dl == nil {
		t.Fatalf("delivery %d: %v %v", seq, dl, err)
	}
	return d.ViewState(seq, 0, dl)
}

// A delivery being attempted shows as inflight (in the hook views and the
// inflight gauge) and not as pending; a stop cancels the attempt, and the
// next start attempts the row again without spending an attempt. The claim
// lives in memory: the row stays due in the store throughout.
func TestDispatch_InflightReturnsToDueAfterRestart(t *testing.T) {
	s := newScripted()
	s.block = make(chan struct{})
	gate := testutil.NewWALSyncGate()
	dir := testutil.TempStoreDir(t)
	st := testutil.OpenStore(t, dir, gate.Wrap(vfs.Default))
	q := testutil.StartQueue(t, st, queue.Options{})
	mk := func() *dispatch.Dispatcher {
		d := dispatch.New(st, dispatch.Options{Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
			Durable: q.Durable, Poll: 10 * time.Millisecond, Logger: testutil.Logger(t)})
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := mk()
	r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", Body: []byte("x"), Sinks: []queue.SinkRef{{Num: 0, ID: "out"}}}
	res, err := q.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the attempt never reached the sink")
	}
	if got := viewState(t, st, d, res.Seq); got != "inflight" {
		t.Fatalf("state while the attempt runs = %q, want inflight", got)
	}
	if g := d.Gauges(); g.Inflight != 1 || g.Pending != 0 {
		t.Fatalf("gauges while the attempt runs: inflight %d pending %d, want 1 and 0", g.Inflight, g.Pending)
	}
	d.Stop() // the blocked attempt is cancelled: the row stays due
	if got := viewState(t, st, d, res.Seq); got != "due" {
		t.Fatalf("state after stop = %q, want due", got)
	}
	s.mu.Lock()
	s.block = nil
	s.mu.Unlock()
	d = mk()
	defer d.Stop()
	m := s.next(t)
	if m.ID != uuid.UUID(res.ID) || m.Attempt != 1 {
		t.Fatalf("redelivered %s attempt %d; want %x attempt 1 (a shutdown spends no attempt)", m.ID, m.Attempt, res.ID)
	}
}

// A store an older build wrote may hold in-flight rows (it stored its
// claims): the boot returns each to due, and it is delivered, without
// spending an attempt.
func TestDispatch_AnOlderBuildsInflightRowsAreReclaimedAtBoot(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	q := testutil.StartQueue(t, st, queue.Options{})
	r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", Body: []byte("x"), Sinks: []queue.SinkRef{{Num: 0, ID: "out"}}}
	res, err := q.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	// The older build's claim, row by row: the due key gone, an in-flight
	// row with its lease, the delivery row marked in flight.
	dl, err := st.ReadDelivery(res.Seq, 0)
	if err != nil || dl == nil {
		t.Fatalf("delivery: %v %v", dl, err)
	}
	b := st.NewBatch()
	_ = b.Delete(store.DueKey(dl.NextAtMs, res.Seq, 0), nil)
	_ = b.Set(store.InflightKey(res.Seq, 0), store.U64(uint64(time.Now().Add(time.Minute).UnixMilli())), nil)
	dl.State = store.StateInflight
	_ = b.Set(store.DeliveryKey(res.Seq, 0), store.EncodeDelivery(dl), nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()

	s := newScripted()
	d := dispatch.New(st, dispatch.Options{Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Poll: 10 * time.Millisecond, Logger: testutil.Logger(t)})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	m := s.next(t)
	if m.ID != uuid.UUID(res.ID) || m.Attempt != 1 {
		t.Fatalf("delivered %s attempt %d; want %x attempt 1", m.ID, m.Attempt, res.ID)
	}
	testutil.Eventually(t, 10*time.Second, "the hook reclaimed", func() bool {
		return count(t, st, store.PrefixHook) == 0 && count(t, st, store.PrefixInflight) == 0
	})
}

func TestRetryPolicy_Delay(t *testing.T) {
	p := dispatch.RetryPolicy{Base: 100 * time.Millisecond, Max: 300 * time.Second, MaxAttempts: 84}
	tests := []struct {
		attempt    int
		jitter     float64
		retryAfter time.Duration
		want       time.Duration
	}{
		{1, 1, 0, 100 * time.Millisecond},
		{2, 1, 0, 200 * time.Millisecond},
		{4, 0.5, 0, 400 * time.Millisecond},
		{30, 1, 0, 300 * time.Second},
		{84, 0.5, 0, 150 * time.Second},
		{1, 1, 2 * time.Second, 2 * time.Second},
		{1, 1, 5 * time.Hour, time.Hour},
	}
	for _, tc := range tests {
		if got := p.Delay(tc.attempt, tc.jitter, tc.retryAfter); got != tc.want {
			t.Errorf("Delay(%d, %v, %v) = %v, want %v", tc.attempt, tc.jitter, tc.retryAfter, got, tc.want)
		}
	}
}

// boundedSink bounds its attempts itself (sink.Bounded) and reports, for
// every attempt, how long its ctx allowed; it fails each one as a timeout.
type boundedSink struct {
	bound   time.Duration
	allowed chan time.Duration
}

func (s *boundedSink) AttemptBound() time.Duration { return s.bound }
func (s *boundedSink) Close() error                { return nil }
func (s *boundedSink) Deliver(ctx context.Context, _ *sink.Message) error {
	dl, ok := ctx.Deadline()
	if !ok {
		s.allowed <- -1
	} else {
		s.allowed <- time.Until(dl)
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestAttempt_DeadlineIsTheSinksBoundWhenShorter: a sink that bounds its
// attempts (an http sink's timeout_ms) gets one deadline, its own bound,
// not dispatch.attempt_timeout_ms; the failed attempt's error says whose
// timeout ended it.
func TestAttempt_DeadlineIsTheSinksBoundWhenShorter(t *testing.T) {
	s := &boundedSink{bound: 50 * time.Millisecond, allowed: make(chan time.Duration, 16)}
	e := setup(t, s, dispatch.Options{AttemptTimeout: time.Minute,
		Retry: dispatch.RetryPolicy{Base: time.Hour, Max: time.Hour, MaxAttempts: 5}})
	res := e.submit(t, "x", "")
	var allowed time.Duration
	select {
	case allowed = <-s.allowed:
	case <-time.After(10 * time.Second):
		t.Fatal("no attempt")
	}
	if allowed < 0 || allowed > s.bound {
		t.Fatalf("the attempt's ctx allowed %s, want at most the sink's bound %s (dispatch.attempt_timeout_ms is 1m)", allowed, s.bound)
	}
	var dl *store.Delivery
	testutil.Eventually(t, 10*time.Second, "the failed attempt recorded", func() bool {
		dl = e.delivery(t, res.Seq)
		return dl != nil && dl.Attempts == 1
	})
	if !strings.Contains(dl.LastError, "sink's timeout of 50ms") {
		t.Errorf("last_error = %q, want it to name the sink's timeout", dl.LastError)
	}
}

// deadlineSink delivers every message and reports whether the attempt's
// ctx carried a deadline, and how long it allowed.
type deadlineSink struct{ allowed chan time.Duration }

func (s *deadlineSink) Close() error { return nil }
func (s *deadlineSink) Deliver(ctx context.Context, _ *sink.Message) error {
	if dl, ok := ctx.Deadline(); ok {
		s.allowed <- time.Until(dl)
	} else {
		s.allowed <- -1
	}
	return nil
}

// noIOSink is a deadlineSink that claims to do no I/O (the log sink's
// kind).
type noIOSink struct{ *deadlineSink }

func (noIOSink) NoIO() {}

// TestAttempt_NoDeadlineForASinkThatDoesNoIO: an attempt on a sink that
// talks to a target carries dispatch.attempt_timeout_ms; one on a sink
// that does no I/O (sink.NoIO, the log sink) carries none, since nothing
// in it would wait for the timer, and is still delivered.
func TestAttempt_NoDeadlineForASinkThatDoesNoIO(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noIO     bool
		deadline bool
	}{
		{"a sink that does I/O", false, true},
		{"a sink that does none", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := &deadlineSink{allowed: make(chan time.Duration, 16)}
			var s sink.Sink = ds
			if tc.noIO {
				s = noIOSink{ds}
			}
			e := setup(t, s, dispatch.Options{AttemptTimeout: time.Minute})
			res := e.submit(t, "x", "")
			allowed := testutil.Receive(t, ds.allowed, "no attempt")
			switch {
			case tc.deadline && (allowed < 0 || allowed > time.Minute):
				t.Fatalf("the attempt's ctx allowed %s, want a deadline within dispatch.attempt_timeout_ms (1m)", allowed)
			case !tc.deadline && allowed >= 0:
				t.Fatalf("the attempt's ctx has a deadline %s away, want none for a sink.NoIO sink", allowed)
			}
			testutil.Eventually(t, 10*time.Second, "the hook delivered and removed", func() bool {
				return e.delivery(t, res.Seq) == nil
			})
		})
	}
}

// bodyFreeSink is a scriptedSink that reads no body (sink.BodyFree), as
// the log sink does.
type bodyFreeSink struct{ *scriptedSink }

func (bodyFreeSink) BodyFree() {}

// TestDispatch_ABodyFreeSinkIsNotReadTheBodyBack: a sink that reads no
// body (sink.BodyFree) is delivered a hook that is not in memory without
// the body being read back from the store (Body nil, Size its length, the
// rest of the message intact), small or over the commit path's hand-over
// limit; a sink that reads it still gets it whole. Before, every delivery
// not handed over by the commit path read the whole envelope back: at 256
// KiB, 90 % of the bytes allocated per hook.
func TestDispatch_ABodyFreeSinkIsNotReadTheBodyBack(t *testing.T) {
	big := strings.Repeat("b", 256<<10)
	for _, tc := range []struct {
		name     string
		bodyFree bool
		hot      bool // the commit path hands new hooks over
		body     string
		wantBody bool
	}{
		{"body-free, read from the store", true, false, "hello", false},
		{"body-free, over the hand-over limit", true, true, big, false},
		{"reads the body, read from the store", false, false, "hello", true},
		{"reads the body, over the hand-over limit", false, true, big, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := newScripted()
			var s sink.Sink = sc
			if tc.bodyFree {
				s = bodyFreeSink{sc}
			}
			e := setupWith(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, dispatch.Options{}, tc.hot)
			res := e.submit(t, tc.body, "k1")
			m := sc.next(t)
			if m.ID != uuid.UUID(res.ID) || m.Size != len(tc.body) || m.SHA256 != sha256.Sum256([]byte(tc.body)) ||
				m.IdempotencyKey() != "default:src:k1" || m.ContentType != "text/plain" || m.Attempt != 1 {
				t.Fatalf("message = id %s size %d sha256 %x key %q content type %q attempt %d; want id %s size %d",
					m.ID, m.Size, m.SHA256, m.IdempotencyKey(), m.ContentType, m.Attempt, uuid.UUID(res.ID), len(tc.body))
			}
			switch {
			case tc.wantBody && string(m.Body) != tc.body:
				t.Fatalf("the sink reads the body but got %d bytes of it, want %d", len(m.Body), len(tc.body))
			case !tc.wantBody && m.Body != nil:
				t.Fatalf("a body-free sink was handed the %d-byte body read back from the store", len(m.Body))
			}
			testutil.Eventually(t, 10*time.Second, "the hook delivered and removed", func() bool {
				return e.delivery(t, res.Seq) == nil
			})
		})
	}
}

// blockingNoIO is a scriptedSink that claims to do no I/O (sink.NoIO), as
// the log sink does, and blocks as the log sink does when its stderr is a
// full pipe.
type blockingNoIO struct{ *scriptedSink }

func (blockingNoIO) NoIO() {}

// TestDispatch_ANoIOSinkThatBlocksHoldsUpNoOtherSink: a sink that does no
// I/O (sink.NoIO) but blocks in Deliver holds up only itself; the hooks'
// other sink is delivered everything meanwhile, also once more of the
// blocked sink's hooks are due than may be in flight. Before, its attempts
// ran on the pool's workers like any other, and each of its claims took
// one until no worker was left for the other sink (1 of 6 hooks got
// through); without a bound of their own its claims would fill
// dispatch.max_inflight (3 of 12); and at the bound, its rows left due
// filled every scan's window (9 of 40) until they were parked.
func TestDispatch_ANoIOSinkThatBlocksHoldsUpNoOtherSink(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hooks       int
		maxInflight int
		scanBatch   int
	}{
		{"fewer hooks than the pool's workers could take", 6, 0, 0},
		{"more hooks than max_inflight", 12, 4, 0},
		// The scan's window is 4×scan_batch rows: the blocked sink's
		// unclaimed backlog must not fill it.
		{"a backlog beyond the scan's window", 40, 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stuck := newScripted()
			stuck.block = make(chan struct{})
			out := newScripted()
			e := setupWith(t, map[uint16]dispatch.Target{
				0: {ID: "log", Sink: blockingNoIO{stuck}},
				1: {ID: "out", Sink: out},
			}, dispatch.Options{Concurrency: 2, MaxInflight: tc.maxInflight, ScanBatch: tc.scanBatch}, true)
			var seqs []uint64
			for i := range tc.hooks {
				r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", ContentType: "text/plain",
					Body: fmt.Appendf(nil, "hook %d", i), Sinks: []queue.SinkRef{{Num: 0, ID: "log"}, {Num: 1, ID: "out"}}}
				res, err := e.q.Submit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, res.Seq)
			}
			testutil.Receive(t, stuck.entered, "the blocking sink was never attempted")
			got := map[uint64]bool{}
			for len(got) < tc.hooks {
				m := testutil.Receive(t, out.seen, fmt.Sprintf("the other sink got %d of %d hooks while the NoIO sink blocked", len(got), tc.hooks))
				got[m.Seq] = true
			}
			close(stuck.block)
			testutil.Eventually(t, 10*time.Second, "every hook delivered to both sinks and removed", func() bool {
				for _, seq := range seqs {
					for _, num := range []uint16{0, 1} {
						if dl, err := e.st.ReadDelivery(seq, num); err != nil || dl != nil {
							return false
						}
					}
				}
				return true
			})
		})
	}
}

// A delivery with a second due key (a retry's batch a reopen dropped
// brings its old key back while the new key's claim runs) is attempted
// once at a time, not once per key: the claim drops a key the row no
// longer names while the row's own exists, and claims a row whose own key
// is gone at one of its keys only. Before, every key was claimed in one
// pass and the hook went to the sink twice at once.
func TestDispatch_AStrayDueKeyIsNotAttemptedTwice(t *testing.T) {
	tests := []struct {
		name string
		keys func(b *store.Batch, seq uint64, at int64)
	}{
		{"the old key back", func(b *store.Batch, seq uint64, at int64) {
			_ = b.Set(store.DueKey(at-1000, seq, 0), nil, nil)
		}},
		{"two keys, the row's own gone", func(b *store.Batch, seq uint64, at int64) {
			_ = b.Set(store.DueKey(at-2000, seq, 0), nil, nil)
			_ = b.Set(store.DueKey(at-1000, seq, 0), nil, nil)
			_ = b.Delete(store.DueKey(at, seq, 0), nil)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
			q := testutil.StartQueue(t, st, queue.Options{})
			r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", Body: []byte("x"), Sinks: []queue.SinkRef{{Num: 0, ID: "out"}}}
			res, err := q.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			dl, err := st.ReadDelivery(res.Seq, 0)
			if err != nil || dl == nil {
				t.Fatalf("delivery: %v %v", dl, err)
			}
			b := st.NewBatch()
			tc.keys(b, res.Seq, dl.NextAtMs)
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			_ = b.Close()
			s := newScripted()
			d := dispatch.New(st, dispatch.Options{Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
				Durable: q.Durable, OnReclaim: q.Reclaimed, Poll: 10 * time.Millisecond, Logger: testutil.Logger(t)})
			if err := d.Start(); err != nil {
				t.Fatal(err)
			}
			defer d.Stop()
			testutil.Eventually(t, 10*time.Second, "the hook delivered and reclaimed, no due key left", func() bool {
				return count(t, st, store.PrefixHook) == 0 && count(t, st, store.PrefixDue) == 0
			})
			s.mu.Lock()
			n := len(s.got)
			s.mu.Unlock()
			if n != 1 {
				t.Fatalf("%d attempts, want 1", n)
			}
		})
	}
}

// A stray due key that appears while the row's own key is claimed (a
// reopen bringing back a dropped retry's key) is stepped over by the scans
// that run during the attempt; after the outcome it must still be found
// and dropped. Before, the cursor passed it for good: a due key left until
// a restart (the pending gauge one high, a source delete refused 409).
func TestDispatch_AStrayDueKeyAppearingWhileClaimedIsNotLeftBehind(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	q := testutil.StartQueue(t, st, queue.Options{})
	submit := func(body string) queue.Result {
		t.Helper()
		r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", Body: []byte(body), Sinks: []queue.SinkRef{{Num: 0, ID: "out"}}}
		res, err := q.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := submit("first")
	dl, err := st.ReadDelivery(first.Seq, 0)
	if err != nil || dl == nil {
		t.Fatalf("delivery: %v %v", dl, err)
	}
	s := newScripted()
	block := make(chan struct{})
	s.block = block
	d := dispatch.New(st, dispatch.Options{Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Poll: 10 * time.Millisecond, Logger: testutil.Logger(t)})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	<-s.entered // the first hook's attempt runs: its row is claimed
	b := st.NewBatch()
	_ = b.Set(store.DueKey(dl.NextAtMs-1000, first.Seq, 0), nil, nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	// A second hook is found only by a scan, which walks the stray key
	// first (it sorts below both rows' keys) while the claim runs.
	submit("second")
	d.Wake()
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the second hook was never attempted")
	}
	close(block)
	testutil.Eventually(t, 10*time.Second, "both delivered and reclaimed, no due key left", func() bool {
		return count(t, st, store.PrefixHook) == 0 && count(t, st, store.PrefixDue) == 0
	})
}

// outcomeFeed is a dispatch.Observer that hands every recorded outcome to
// the test: the loop calls it after the outcome's batch is applied and its
// breaker updated.
type outcomeFeed struct{ ch chan string }

func (o outcomeFeed) Delivery(_, result string, _ time.Duration) { o.ch <- result }

func (o outcomeFeed) next(t *testing.T) string {
	t.Helper()
	return testutil.Receive(t, o.ch, "no outcome recorded")
}
