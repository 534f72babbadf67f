package quarantine_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/verify"
)

var _ dispatch.Releaser = (*quarantine.Release)(nil)

type nopObserver struct{}

func (nopObserver) Ingest(string, string, time.Duration) {}
func (nopObserver) IngestRefused(string)                 {}

func verifier(t *testing.T, typ string, tolerance int, secrets ...string) verify.Verifier {
	t.Helper()
	v, err := verify.New(verify.Spec{Type: typ, Secrets: secrets, ToleranceSeconds: tolerance})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// rig is one node's ingest path: a real store and queue, the pen, and the
// edge in front of them, for one source whose configuration the test swaps
// (a secret rotation) while the releaser reads it through sources.
type rig struct {
	st      *store.Store
	q       *queue.Queue
	pen     *quarantine.Pen
	edge    http.Handler
	edgeNow *clock
	reg     *edge.Registry
	srcID   string
	rel     *quarantine.Release
}

func newRig(t *testing.T, src *edge.Source, po quarantine.Options) *rig {
	t.Helper()
	r := &rig{st: memStore(t), edgeNow: newClock(time.Now())}
	r.q = testutil.StartQueue(t, r.st, queue.Options{})
	r.pen = newPen(t, r.st, po)
	r.reg, r.srcID = edge.NewRegistry(map[string]*edge.Source{src.ID: src}), src.ID
	r.edge = edge.New(edge.Options{
		Routing: "path", Prefix: "/hooks", MaxBodyBytes: 1 << 20,
		Sources:   r.reg,
		Committer: r.q, Observer: nopObserver{}, Quarantine: r.pen,
		Logger: testutil.Logger(t), Now: r.edgeNow.Now,
	})
	// The releaser reads the same registry the edge does: a reload that
	// rotates a secret is seen by both.
	r.rel = quarantine.NewRelease(r.pen, r.reg.Get, r.q)
	return r
}

// rotate swaps the source's verifier, as a config reload would.
func (r *rig) rotate(v verify.Verifier) {
	cur, _ := r.reg.Get(r.srcID)
	s := *cur
	s.Verifier = v
	r.reg.Put(&s)
}

// post sends one hook to the edge and returns the answer.
func (r *rig) post(t *testing.T, source string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/hooks/"+source, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	r.edge.ServeHTTP(w, req)
	return w
}

func (r *rig) quarantined(t *testing.T, hdr map[string]string, body, reason string) {
	t.Helper()
	w := r.post(t, r.srcID, hdr, body)
	var got map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &got)
	if w.Code != http.StatusAccepted || got["status"] != "quarantined" || got["reason"] != reason {
		t.Fatalf("post = %d %s, want 202 quarantined %s", w.Code, w.Body, reason)
	}
}

// committed returns the stored hook of id, or nil.
func (r *rig) committed(t *testing.T, id string) *store.Envelope {
	t.Helper()
	u := uuid.MustParse(id)
	sv, err := r.st.Get(store.HookIDKey(u))
	if err != nil {
		t.Fatal(err)
	}
	if sv == nil {
		return nil
	}
	seq, _ := store.ParseU64(sv)
	hv, err := r.st.Get(store.HookKey(seq))
	if err != nil || hv == nil {
		t.Fatalf("hook row of %s: %v", id, err)
	}
	env, err := store.DecodeEnvelope(hv)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func (r *rig) heldIDs(t *testing.T) []string {
	t.Helper()
	_, hs, err := r.pen.List(quarantine.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return ids(hs)
}

type step struct {
	moved, skipped int
	next           []byte
	done           bool
}

func release(t *testing.T, rel *quarantine.Release, source string, cursor []byte, untilMs int64, n int) step {
	t.Helper()
	moved, skipped, next, done, err := rel.Release(t.Context(), source, cursor, untilMs, n)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	return step{moved, skipped, next, done}
}

func githubSource() *edge.Source {
	return &edge.Source{
		ID: "gh", Tenant: "acme",
		Sinks:     []queue.SinkRef{{Num: 1, ID: "log"}},
		Dedupe:    dedupe.New(&dedupe.Options{Header: "X-GitHub-Delivery", TTL: 3600 * time.Second}),
		OnFailure: config.OnVerifyFailureQuarantine,
	}
}

// The provider rotated its secret before ankusa did: hooks signed with the
// new secret fail against the old one and are held. Once the source knows
// the new secret, a release commits them under their original ids and
// receive times and empties the pen of them; a hook that still fails stays.
func TestReleaseAfterSecretRotation(t *testing.T) {
	src := githubSource()
	src.Verifier = verifier(t, "github", 0, "old-secret")
	r := newRig(t, src, quarantine.Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)

	var good []string
	for i := range 4 {
		r.edgeNow.Set(base.Add(time.Duration(i) * time.Second))
		body := `{"n":` + strconv.Itoa(i) + `}`
		hdr := map[string]string{"X-Hub-Signature-256": githubSig("new-secret", body), "X-GitHub-Delivery": "d-" + strconv.Itoa(i)}
		if i == 2 {
			hdr["X-Hub-Signature-256"] = githubSig("forged", body)
		}
		r.quarantined(t, hdr, body, "no_match")
		_, hs, _ := r.pen.List(quarantine.Filter{Limit: 1})
		if i != 2 {
			good = append(good, hs[0].ID)
		}
	}
	held := r.heldIDs(t)
	forged := held[1] // newest first: 3, 2, 1, 0
	if len(held) != 4 {
		t.Fatalf("held %v", held)
	}
	for _, id := range held {
		if r.committed(t, id) != nil {
			t.Fatalf("held hook %s is committed before any release", id)
		}
	}

	r.rotate(verifier(t, "github", 0, "new-secret", "old-secret"))
	until := time.Now().UnixMilli()

	// Two rows per step: the cursor carries the job across steps.
	s1 := release(t, r.rel, "", nil, until, 2)
	if s1.moved != 2 || s1.skipped != 0 || s1.done || s1.next == nil {
		t.Fatalf("step 1 = %+v", s1)
	}
	s2 := release(t, r.rel, "", s1.next, until, 2)
	if s2.moved != 1 || s2.skipped != 1 || !s2.done {
		t.Fatalf("step 2 = %+v", s2)
	}

	for i, id := range good {
		env := r.committed(t, id)
		if env == nil {
			t.Fatalf("released hook %s is not committed under its original id", id)
		}
		n := i
		if i >= 2 {
			n = i + 1 // the forged one was the third
		}
		if env.ReceivedAt != base.Add(time.Duration(n)*time.Second).UnixNano() {
			t.Errorf("%s received_at = %d, want the original", id, env.ReceivedAt)
		}
		if env.Tenant != "acme" || env.Source != "gh" || env.Flagged || env.DedupeKey != "d-"+strconv.Itoa(n) {
			t.Errorf("%s committed as %+v", id, env)
		}
		if string(env.Body) != `{"n":`+strconv.Itoa(n)+`}` {
			t.Errorf("%s body = %q", id, env.Body)
		}
		if dv, _ := r.st.Get(store.DeliveryKey(env.Seq, 1)); dv == nil {
			t.Errorf("%s has no delivery row for the source's sink", id)
		}
	}
	if got := r.heldIDs(t); len(got) != 1 || got[0] != forged {
		t.Fatalf("pen after release = %v, want only the forged %s", got, forged)
	}
	if r.committed(t, forged) != nil {
		t.Fatal("a hook that fails verification was committed")
	}
	stats(t, r.pen, 1, int64(len(`{"n":2}`)))

	// The same job again finds nothing after its cursor; a new job passes
	// over the forged hook again and moves nothing.
	if s := release(t, r.rel, "", s2.next, until, 10); s.moved != 0 || s.skipped != 0 || !s.done {
		t.Fatalf("release after the end = %+v", s)
	}
	if s := release(t, r.rel, "", nil, until, 10); s.moved != 0 || s.skipped != 1 || !s.done {
		t.Fatalf("second release = %+v", s)
	}
	if n, _ := r.st.Count([]byte{store.PrefixHook}); n != 3 {
		t.Fatalf("%d hooks committed, want 3", n)
	}
}

// A timestamped scheme is judged at receive time: a Stripe hook held ten
// minutes ago, past the 300 s tolerance now, still passes at release.
func TestReleaseJudgesTimestampAtReceiveTime(t *testing.T) {
	src := &edge.Source{
		ID: "stripe", Sinks: []queue.SinkRef{{Num: 1, ID: "log"}},
		Dedupe:    dedupe.New(&dedupe.Options{Preset: "stripe", TTL: 3600 * time.Second}),
		OnFailure: config.OnVerifyFailureQuarantine,
		Verifier:  verifier(t, "stripe", 300, "whsec_old"),
	}
	r := newRig(t, src, quarantine.Options{})
	received := time.Now().Add(-10 * time.Minute)
	r.edgeNow.Set(received)
	body := `{"id":"evt_1","type":"charge.succeeded"}`
	hdr := map[string]string{"Stripe-Signature": stripeSig("whsec_new", received, body)}
	r.quarantined(t, hdr, body, "no_match")

	newV := verifier(t, "stripe", 300, "whsec_new")
	// The test is not vacuous: judged now, the hook is stale.
	h := http.Header{}
	h.Set("Stripe-Signature", hdr["Stripe-Signature"])
	if reason := verify.ReasonOf(newV.Verify(h, []byte(body), time.Now())); reason != verify.TimestampOutOfTolerance {
		t.Fatalf("verified now: %q, want %s", reason, verify.TimestampOutOfTolerance)
	}

	r.rotate(newV)
	id := r.heldIDs(t)[0]
	s := release(t, r.rel, "", nil, time.Now().UnixMilli(), 10)
	if s.moved != 1 || s.skipped != 0 || !s.done {
		t.Fatalf("release = %+v", s)
	}
	env := r.committed(t, id)
	if env == nil || env.DedupeKey != "evt_1" || env.ReceivedAt != received.UnixNano() {
		t.Fatalf("committed = %+v", env)
	}
	stats(t, r.pen, 0, 0)
}

// A job of one source releases only that source's hooks, and only those
// received up to until_ms.
func TestReleaseSourceAndUntil(t *testing.T) {
	st := memStore(t)
	q := testutil.StartQueue(t, st, queue.Options{})
	p := newPen(t, st, quarantine.Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var envs []*store.Envelope
	for i, s := range []string{"a", "b", "a", "b", "a"} {
		e := envelope(t, s, base.Add(time.Duration(i)*time.Second), "{}")
		hold(t, p, e)
		envs = append(envs, e)
	}
	srcs := map[string]*edge.Source{
		"a": {ID: "a", Sinks: []queue.SinkRef{{Num: 1, ID: "log"}}}, // verify none now
		"b": {ID: "b", Sinks: []queue.SinkRef{{Num: 2, ID: "log"}}},
	}
	rel := quarantine.NewRelease(p, func(id string) (*edge.Source, bool) { s, ok := srcs[id]; return s, ok }, q)

	until := base.Add(3 * time.Second).UnixMilli() // excludes envs[4]
	s := release(t, rel, "a", nil, until, 1)
	if s.moved != 1 || s.done {
		t.Fatalf("step 1 = %+v", s)
	}
	s = release(t, rel, "a", s.next, until, 1)
	if s.moved != 1 || !s.done {
		t.Fatalf("step 2 = %+v", s)
	}
	for i, e := range envs {
		st, _ := st.Get(store.HookIDKey(e.ID))
		if want := i == 0 || i == 2; (st != nil) != want {
			t.Errorf("hook %d (source %s) committed = %v, want %v", i, e.Source, st != nil, want)
		}
	}
	stats(t, p, 3, 6)
	// Every source, up to the end of time.
	if s := release(t, rel, "", nil, time.Now().UnixMilli(), 100); s.moved != 3 || !s.done {
		t.Fatalf("release all = %+v", s)
	}
	stats(t, p, 0, 0)
}

// failingQueue fails the commit of one id and passes the rest.
type failingQueue struct {
	q    *queue.Queue
	mu   sync.Mutex
	fail [16]byte
}

func (f *failingQueue) Submit(ctx context.Context, rec *queue.Record) (queue.Result, error) {
	f.mu.Lock()
	fail := rec.ID == f.fail
	f.mu.Unlock()
	if fail {
		return queue.Result{}, queue.ErrOverload
	}
	return f.q.Submit(ctx, rec)
}

// A commit error stops the step with the cursor before the failed row, so
// the next step retries it; nothing after it is touched.
func TestReleaseCommitErrorRetries(t *testing.T) {
	st := memStore(t)
	q := testutil.StartQueue(t, st, queue.Options{})
	p := newPen(t, st, quarantine.Options{})
	base := time.Now().Add(-time.Hour)
	var envs []*store.Envelope
	for i := range 3 {
		e := envelope(t, "a", base.Add(time.Duration(i)*time.Second), "{}")
		hold(t, p, e)
		envs = append(envs, e)
	}
	src := &edge.Source{ID: "a", Sinks: []queue.SinkRef{{Num: 1, ID: "log"}}}
	fq := &failingQueue{q: q, fail: envs[1].ID}
	rel := quarantine.NewRelease(p, func(string) (*edge.Source, bool) { return src, true }, fq)
	until := time.Now().UnixMilli()

	moved, skipped, next, done, err := rel.Release(t.Context(), "", nil, until, 10)
	if !errors.Is(err, queue.ErrOverload) || moved != 1 || skipped != 0 || done {
		t.Fatalf("release = %d %d %v %v", moved, skipped, done, err)
	}
	_, hs, _ := p.List(quarantine.Filter{})
	if want := []string{idOf(envs[2]), idOf(envs[1])}; len(hs) != 2 || hs[0].ID != want[0] || hs[1].ID != want[1] {
		t.Fatalf("held after the failed step: %v, want %v", ids(hs), want)
	}
	// next is the first row's key: the failed row comes right after it.
	_, _, next2, _, err := rel.Release(t.Context(), "", next, until, 10)
	if err == nil || next2 != nil {
		t.Fatalf("retry while still failing = %v, next %v; want the error and no progress", err, next2)
	}

	fq.mu.Lock()
	fq.fail = [16]byte{}
	fq.mu.Unlock()
	if s := release(t, rel, "", next, until, 10); s.moved != 2 || !s.done {
		t.Fatalf("retry = %+v", s)
	}
	stats(t, p, 0, 0)
	if n, _ := st.Count([]byte{store.PrefixHook}); n != 3 {
		t.Fatalf("%d hooks committed, want 3", n)
	}
}

// A hook committed by a step that crashed before deleting its pen row is
// not committed twice: the next release only deletes the row.
func TestReleaseAfterCrashDoesNotCommitTwice(t *testing.T) {
	st := memStore(t)
	q := testutil.StartQueue(t, st, queue.Options{})
	p := newPen(t, st, quarantine.Options{})
	e := envelope(t, "a", time.Now().Add(-time.Minute), `{"k":1}`)
	hold(t, p, e)
	src := &edge.Source{ID: "a", Sinks: []queue.SinkRef{{Num: 1, ID: "log"}}}
	// The earlier step's commit.
	if _, err := q.Submit(t.Context(), &queue.Record{
		ID: e.ID, ReceivedAt: time.Unix(0, e.ReceivedAt), Tenant: e.Tenant, Source: e.Source,
		ContentType: e.ContentType, Headers: e.Headers, Body: e.Body, Sinks: src.Sinks,
	}); err != nil {
		t.Fatal(err)
	}
	rel := quarantine.NewRelease(p, func(string) (*edge.Source, bool) { return src, true }, q)
	if s := release(t, rel, "", nil, time.Now().UnixMilli(), 10); s.moved != 1 || !s.done {
		t.Fatalf("release = %+v", s)
	}
	if n, _ := st.Count([]byte{store.PrefixHook}); n != 1 {
		t.Fatalf("%d hook rows, want 1", n)
	}
	stats(t, p, 0, 0)
}

// A held hook whose source is gone from the config stays held.
func TestReleaseUnknownSourceStays(t *testing.T) {
	st := memStore(t)
	q := testutil.StartQueue(t, st, queue.Options{})
	p := newPen(t, st, quarantine.Options{})
	hold(t, p, envelope(t, "gone", time.Now().Add(-time.Minute), "{}"))
	rel := quarantine.NewRelease(p, func(string) (*edge.Source, bool) { return nil, false }, q)
	if s := release(t, rel, "", nil, time.Now().UnixMilli(), 10); s.moved != 0 || s.skipped != 1 || !s.done {
		t.Fatalf("release = %+v", s)
	}
	stats(t, p, 1, 2)
}

// The edge's answers for the pen (CONTRACTS "Ingest"): 202 quarantined,
// 429 quarantine_rate_limited with Retry-After, 503 quarantine_full with
// Retry-After 60.
func TestEdgeAnswers(t *testing.T) {
	src := githubSource()
	src.Verifier = verifier(t, "github", 0, "secret")
	clk := newClock(time.Unix(1_700_000_000, 0))
	r := newRig(t, src, quarantine.Options{Rate: 1, Burst: 2, MaxBytes: 1 << 20, Now: clk.Now})
	bad := map[string]string{"X-Hub-Signature-256": githubSig("wrong", "{}")}
	r.quarantined(t, bad, "{}", "no_match")
	r.quarantined(t, map[string]string{}, "{}", "missing_signature")
	w := r.post(t, "gh", bad, "{}")
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"quarantine_rate_limited"`) || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("third = %d %s Retry-After %q", w.Code, w.Body, w.Header().Get("Retry-After"))
	}

	clk.Advance(time.Second)
	big := strings.Repeat("x", 1<<20)
	w = r.post(t, "gh", map[string]string{"X-Hub-Signature-256": githubSig("wrong", big)}, big)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"quarantine_full"`) || w.Header().Get("Retry-After") != "60" {
		t.Fatalf("over max_bytes = %d %s Retry-After %q", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	stats(t, r.pen, 2, 4)

	// A valid hook is not held.
	w = r.post(t, "gh", map[string]string{"X-Hub-Signature-256": githubSig("secret", "{}")}, "{}")
	if w.Code != http.StatusCreated {
		t.Fatalf("valid hook = %d %s", w.Code, w.Body)
	}
	stats(t, r.pen, 2, 4)
}
