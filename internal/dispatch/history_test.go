package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// clock is a test clock that starts at the real time and moves by advance.
type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

func (e *env) submitTo(t *testing.T, tenant, source, body, dedupe string) queue.Result {
	t.Helper()
	r := &queue.Record{ReceivedAt: time.Now(), Tenant: tenant, Source: source, ContentType: "text/plain",
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

// rows counts the rows of every family a hook owns.
func rows(t *testing.T, st *store.Store) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, p := range []byte{store.PrefixHook, store.PrefixHookID, store.PrefixDelivery, store.PrefixDue, store.PrefixInflight,
		store.PrefixSourceIdx, store.PrefixTenantIdx, store.PrefixAttempt, store.PrefixRetained} {
		n, err := st.Count([]byte{p})
		if err != nil {
			t.Fatal(err)
		}
		out[string(p)] = n
	}
	return out
}

func wantState(t *testing.T, d *dispatch.Dispatcher, n int, state string) []dispatch.HookSummary {
	t.Helper()
	var hs []dispatch.HookSummary
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d hooks %s", n, state), func() bool {
		var err error
		hs, _, err = d.Hooks(dispatch.HookFilter{State: state, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(hs) == n
	})
	return hs
}

// With retention 0 a delivered hook leaves nothing behind: not its
// listing indexes, not its attempt log.
func TestRetentionZeroRemovesEveryRow(t *testing.T) {
	s := newScripted(errors.New("503 once"))
	e := setup(t, s, dispatch.Options{})
	e.submitTo(t, "acme", "src", "a", "")
	e.submitTo(t, "acme", "src", "b", "k1")
	testutil.Eventually(t, 10*time.Second, "both hooks reclaimed", func() bool {
		n, _ := e.st.Count([]byte{store.PrefixHook})
		return n == 0
	})
	for fam, n := range rows(t, e.st) {
		if n != 0 {
			t.Errorf("family %q: %d rows left after reclaim", fam, n)
		}
	}
}

// With retention a delivered hook stays listed with its attempts until
// the retention passes; then the sweep removes every row it had.
func TestRetentionKeepsThenSweeps(t *testing.T) {
	clk := &clock{}
	s := newScripted(errors.New("status 503"))
	e := setup(t, s, dispatch.Options{Retention: time.Hour, SweepInterval: 5 * time.Millisecond, Now: clk.now})
	first := e.submitTo(t, "acme", "src", "first", "")
	s.next(t) // the 503
	s.next(t) // the retry that succeeds
	e.submitTo(t, "acme", "src", "second", "")
	hs := wantState(t, e.d, 2, "delivered")
	if hs[0].Seq < hs[1].Seq {
		t.Fatalf("not newest first: %d then %d", hs[0].Seq, hs[1].Seq)
	}
	if g := e.d.Gauges(); g.HistoryHooks != 2 || g.HistoryBytes != int64(len("first")+len("second")) {
		t.Fatalf("history gauges = %d hooks, %d bytes", g.HistoryHooks, g.HistoryBytes)
	}
	// The first hook failed once, then succeeded: two attempts logged.
	var firstSeq uint64
	for _, h := range hs {
		if h.ID == uuid.UUID(first.ID).String() {
			firstSeq = h.Seq
		}
	}
	log, err := dispatch.Attempts(e.st, firstSeq, map[uint16]string{0: "out"})
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0].Result != "retry" || !strings.Contains(log[0].Error, "status 503") ||
		log[1].Result != "delivered" || log[1].Sink != "out" {
		t.Fatalf("attempt log = %+v, want retry (status 503) then delivered", log)
	}

	clk.advance(59 * time.Minute)
	// Still inside the retention: nothing is swept.
	if n, _ := e.st.Count([]byte{store.PrefixRetained}); n != 2 {
		t.Fatalf("retained rows inside the retention = %d, want 2", n)
	}
	clk.advance(2 * time.Minute)
	testutil.Eventually(t, 10*time.Second, "the sweep to remove both hooks", func() bool {
		n, _ := e.st.Count([]byte{store.PrefixHook})
		return n == 0
	})
	for fam, n := range rows(t, e.st) {
		if n != 0 {
			t.Errorf("family %q: %d rows left after the sweep", fam, n)
		}
	}
	if g := e.d.Gauges(); g.HistoryHooks != 0 || g.HistoryBytes != 0 {
		t.Fatalf("history gauges after the sweep = %d hooks, %d bytes", g.HistoryHooks, g.HistoryBytes)
	}
}

// Past retention.max_bytes the oldest delivered hooks go first, whatever
// their age.
func TestRetentionMaxBytesEvictsOldest(t *testing.T) {
	s := newScripted()
	e := setup(t, s, dispatch.Options{Retention: 24 * time.Hour, RetentionMaxBytes: 250, SweepInterval: 5 * time.Millisecond})
	var ids []string
	for i := range 5 {
		r := e.submitTo(t, "acme", "src", strings.Repeat(fmt.Sprint(i), 100), "")
		ids = append(ids, uuid.UUID(r.ID).String())
		s.next(t)
	}
	wantState(t, e.d, 0, "pending")
	hs := wantState(t, e.d, 2, "delivered")
	if hs[0].ID != ids[4] || hs[1].ID != ids[3] {
		t.Fatalf("kept %s, %s; want the two newest %s, %s", hs[0].ID, hs[1].ID, ids[4], ids[3])
	}
	if g := e.d.Gauges(); g.HistoryBytes > 250 {
		t.Fatalf("history bytes %d over the budget", g.HistoryBytes)
	}
}

// A resend is a new delivery of the same hook, tagged, through the normal
// path; a pending one refuses another.
func TestResend(t *testing.T) {
	s := newScripted()
	e := setup(t, s, dispatch.Options{Retention: time.Hour})
	r := e.submitTo(t, "acme", "src", "hello", "")
	s.next(t)
	wantState(t, e.d, 1, "delivered")

	if _, err := e.d.Resend(t.Context(), r.ID, "nope"); !errors.Is(err, dispatch.ErrNoSink) {
		t.Fatalf("unknown sink: %v", err)
	}
	if _, err := e.d.Resend(t.Context(), uuid.Must(uuid.NewV7()), ""); !errors.Is(err, dispatch.ErrNoHook) {
		t.Fatalf("unknown hook: %v", err)
	}
	block := make(chan struct{})
	s.mu.Lock()
	s.block = block
	s.mu.Unlock()
	res, err := e.d.Resend(t.Context(), r.ID, "out")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.ResendID, "resend-") || len(res.Sinks) != 1 || res.Sinks[0] != "out" {
		t.Fatalf("resend = %+v", res)
	}
	wantState(t, e.d, 1, "pending")
	if _, err := e.d.Resend(t.Context(), r.ID, ""); !errors.Is(err, dispatch.ErrPending) {
		t.Fatalf("resend while pending: %v, want ErrPending", err)
	}
	close(block)
	m := s.next(t)
	if m.ID != uuid.UUID(r.ID) || m.ReplayID != res.ResendID || string(m.Body) != "hello" {
		t.Fatalf("resent message: id %s replay %q body %q", m.ID, m.ReplayID, m.Body)
	}
	hs := wantState(t, e.d, 1, "delivered")
	log, err := dispatch.Attempts(e.st, hs[0].Seq, map[uint16]string{0: "out"})
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[1].ReplayID != res.ResendID {
		t.Fatalf("attempt log after resend = %+v", log)
	}
	if g := e.d.Gauges(); g.HistoryHooks != 1 {
		t.Fatalf("history hooks after the resend was delivered = %d, want 1", g.HistoryHooks)
	}
}

// A dead delivery can be resent: it leaves the DLQ and is delivered.
func TestResendDead(t *testing.T) {
	s := newScripted(errors.New("down"), errors.New("down"))
	e := setup(t, s, dispatch.Options{Retention: time.Hour, Retry: dispatch.RetryPolicy{Base: time.Millisecond, Max: time.Millisecond, MaxAttempts: 2}})
	r := e.submitTo(t, "acme", "src", "x", "")
	wantState(t, e.d, 1, "dead")
	if _, err := e.d.Resend(t.Context(), r.ID, ""); err != nil {
		t.Fatal(err)
	}
	wantState(t, e.d, 1, "delivered")
	if n, _ := e.st.Count([]byte{store.PrefixDead}); n != 0 {
		t.Fatalf("%d dead rows left after the resend", n)
	}
	if g := e.d.Gauges(); g.Dead != 0 {
		t.Fatalf("dead gauge = %d", g.Dead)
	}
}

// The filters go through the indexes; pages follow the cursor.
func TestHooksFiltersAndPages(t *testing.T) {
	s := newScripted()
	e := setup(t, s, dispatch.Options{Retention: time.Hour})
	want := map[string][]string{}
	for i := range 9 {
		tenant, source := []string{"acme", "globex"}[i%2], []string{"stripe", "github", "shop"}[i%3]
		r := e.submitTo(t, tenant, source, fmt.Sprint(i), fmt.Sprintf("evt-%d", i))
		id := uuid.UUID(r.ID).String()
		want["t:"+tenant] = append([]string{id}, want["t:"+tenant]...)
		want["s:"+source] = append([]string{id}, want["s:"+source]...)
		want["all"] = append([]string{id}, want["all"]...)
	}
	wantState(t, e.d, 9, "delivered")
	list := func(f dispatch.HookFilter) []string {
		var ids []string
		for pages := 0; ; pages++ {
			hs, next, err := e.d.Hooks(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hs {
				ids = append(ids, h.ID)
			}
			if next == 0 {
				return ids
			}
			if pages > 20 {
				t.Fatal("cursor does not advance")
			}
			f.Before = next
		}
	}
	tests := []struct {
		name string
		f    dispatch.HookFilter
		want []string
	}{
		{"all", dispatch.HookFilter{Limit: 2}, want["all"]},
		{"tenant", dispatch.HookFilter{Tenant: "globex", Limit: 2}, want["t:globex"]},
		{"source", dispatch.HookFilter{Source: "github", Limit: 1}, want["s:github"]},
		{"dedupe key", dispatch.HookFilter{Tenant: "acme", Source: "shop", DedupeKey: "evt-2", Limit: 5}, []string{want["all"][6]}},
		{"dedupe key, source only", dispatch.HookFilter{Source: "shop", DedupeKey: "evt-5", Limit: 5}, []string{want["all"][3]}},
		{"state pending", dispatch.HookFilter{State: "pending", Limit: 5}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := list(tt.f)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// A restart keeps history: the boot sweep of fully delivered hooks leaves
// retained ones alone, and the gauges are rebuilt from the retained rows.
func TestRetentionSurvivesRestart(t *testing.T) {
	s := newScripted()
	e := setup(t, s, dispatch.Options{Retention: time.Hour})
	e.submitTo(t, "acme", "src", "kept", "")
	wantState(t, e.d, 1, "delivered")
	e.d.Stop()

	d2 := dispatch.New(e.st, dispatch.Options{
		Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, Durable: e.q.Durable,
		OnReclaim: e.q.Reclaimed, Logger: testutil.Logger(t), Retention: time.Hour,
	})
	if err := d2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.Stop)
	hs, _, err := d2.Hooks(dispatch.HookFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].State != "delivered" {
		t.Fatalf("after a restart: %+v, want the delivered hook kept", hs)
	}
	if g := d2.Gauges(); g.HistoryHooks != 1 || g.HistoryBytes != int64(len("kept")) {
		t.Fatalf("gauges after a restart: %d hooks, %d bytes", g.HistoryHooks, g.HistoryBytes)
	}
}

// Invariant 1 finds a retained row again from the hook alone, at the
// newest NextAtMs of its delivery rows. When the clock steps back between
// two sinks' deliveries (an NTP step), the last outcome's time is not the
// newest: before the fix the retained row was written at it anyway, the
// boot sweep then found no retained row where invariant 1 put it and
// deleted a hook retention must keep.
func TestRetainedHookSurvivesABootSweepAfterTheClockSteppedBack(t *testing.T) {
	var c clock
	c.advance(time.Minute) // every due row is in the dispatcher's past
	first, second := newScripted(), newScripted()
	second.block = make(chan struct{})
	targets := map[uint16]dispatch.Target{0: {ID: "a", Sink: first}, 1: {ID: "b", Sink: second}}
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	var d atomic.Pointer[dispatch.Dispatcher]
	q := testutil.StartQueue(t, st, queue.Options{OnDurable: func() {
		if p := d.Load(); p != nil {
			p.Wake()
		}
	}})
	opts := dispatch.Options{Targets: targets, Durable: q.Durable, OnReclaim: q.Reclaimed, Logger: testutil.Logger(t),
		Poll: 10 * time.Millisecond, Retention: time.Hour, Now: c.now}
	d1 := dispatch.New(st, opts)
	d.Store(d1)
	if err := d1.Start(); err != nil {
		t.Fatal(err)
	}
	r := &queue.Record{ReceivedAt: time.Now(), Tenant: "default", Source: "src", ContentType: "text/plain",
		Body: []byte("kept"), Sinks: []queue.SinkRef{{Num: 0, ID: "a"}, {Num: 1, ID: "b"}}}
	res, err := q.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	// Sink a's outcome is recorded first, then the clock steps back before
	// sink b's.
	first.next(t)
	select {
	case <-second.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("sink b never got its attempt")
	}
	testutil.Eventually(t, 10*time.Second, "sink a's delivery recorded", func() bool {
		v, err := st.Get(store.DeliveryKey(res.Seq, 0))
		if err != nil || v == nil {
			return false
		}
		dl, err := store.DecodeDelivery(v)
		return err == nil && dl.State == store.StateDelivered
	})
	c.advance(-time.Second)
	close(second.block)
	second.next(t)
	testutil.Eventually(t, 10*time.Second, "the hook retained", func() bool { return count(t, st, store.PrefixRetained) == 1 })
	d1.Stop()

	// A restart: its boot sweep must keep the retained hook.
	d2 := dispatch.New(st, opts)
	d.Store(d2)
	if err := d2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.Stop)
	if n := count(t, st, store.PrefixHook); n != 1 {
		t.Fatalf("hooks after the boot sweep = %d, want 1 (retention.delivered keeps it for an hour)", n)
	}
	if g := d2.Gauges(); g.HistoryHooks != 1 {
		t.Fatalf("history hooks gauge = %d, want 1", g.HistoryHooks)
	}
}

// A resend takes the hook out of the retained set (invariant 3) whatever
// retention is set to now: a retained row left by an earlier run with
// retention on must go with it. Before the fix resend removed it only while
// Retention > 0, and with retention since turned off the sweep then
// removed the hook whose resent delivery was still pending.
func TestResendAfterRetentionWasTurnedOffKeepsTheHookUntilDelivered(t *testing.T) {
	e := setup(t, newScripted(), dispatch.Options{Retention: time.Hour})
	r := e.submitTo(t, "acme", "src", "kept", "")
	wantState(t, e.d, 1, "delivered")
	e.d.Stop()
	start := func(s *scriptedSink, sweep time.Duration) *dispatch.Dispatcher {
		d := dispatch.New(e.st, dispatch.Options{
			Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, Durable: e.q.Durable,
			OnReclaim: e.q.Reclaimed, Logger: testutil.Logger(t), Poll: 10 * time.Millisecond, SweepInterval: sweep,
		})
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		return d
	}
	waitEntered := func(s *scriptedSink) {
		select {
		case <-s.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the resent delivery never reached the sink")
		}
	}

	// Retention is now off. The resend's attempt is interrupted by a stop.
	held := newScripted()
	held.block = make(chan struct{})
	d2 := start(held, time.Hour)
	if _, err := d2.Resend(t.Context(), r.ID, ""); err != nil {
		t.Fatal(err)
	}
	waitEntered(held)
	d2.Stop()

	// The next run returns the row to due and sweeps the retained set.
	s3 := newScripted()
	block := make(chan struct{})
	s3.block = block
	start(s3, 10*time.Millisecond)
	waitEntered(s3)
	testutil.Eventually(t, 10*time.Second, "the retained set swept", func() bool { return count(t, e.st, store.PrefixRetained) == 0 })
	if n := count(t, e.st, store.PrefixHook); n != 1 {
		t.Fatalf("hooks while the resent delivery is in flight = %d, want 1", n)
	}
	close(block)
	if m := s3.next(t); m.Seq != r.Seq || string(m.Body) != "kept" {
		t.Fatalf("resent delivery: seq %d body %q", m.Seq, m.Body)
	}
}
