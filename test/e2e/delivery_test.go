package e2e_test

import (
	"bytes"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

// TestE2E_RetryThenDelivered: a 500 is retried; the 200 that follows
// delivers the hook, which is then reclaimed.
func TestE2E_RetryThenDelivered(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, byAttempt(status(http.StatusInternalServerError), status(http.StatusOK)))
	in := startInstance(t, rc, nil)

	body := `{"order":1,"note":"héllo\u0000"}` + "\r\n"
	id := in.post(body, "application/json; charset=utf-8")

	first := rc.next(t, id)
	second := rc.next(t, id)
	in.waitReclaimed(id)

	if got := rc.attempts(id); len(got) != 2 {
		t.Fatalf("the receiver saw %d attempts for %s, want exactly 2 (500, then 200)", len(got), id)
	}
	if first.Attempt != 1 || second.Attempt != 2 {
		t.Errorf("attempt order = %d, %d", first.Attempt, second.Attempt)
	}
	for i, c := range []call{first, second} {
		if !bytes.Equal(c.Body, []byte(body)) {
			t.Errorf("attempt %d body = %q, want %q", i+1, c.Body, body)
		}
		if ct := c.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Errorf("attempt %d content-type = %q", i+1, ct)
		}
		if got := c.Header.Get("X-Ankusa-Idempotency-Key"); got != id {
			t.Errorf("attempt %d idempotency key = %q, want the hook id %s", i+1, got, id)
		}
		if got := c.Header.Get("X-Ankusa-Source"); got != sourceID {
			t.Errorf("attempt %d x-ankusa-source = %q, want %s", i+1, got, sourceID)
		}
		if got := c.Header.Get("X-Ankusa-Tenant"); got != "default" {
			t.Errorf("attempt %d x-ankusa-tenant = %q, want default", i+1, got)
		}
		if c.ReplayID != "" {
			t.Errorf("attempt %d carries x-ankusa-replay-id %q outside a replay", i+1, c.ReplayID)
		}
	}
}

// TestE2E_GoneIsDeadAtOnce: a 410 dead-letters the delivery after one
// attempt, and the DLQ and the hook view say so.
func TestE2E_GoneIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusGone))
	in := startInstance(t, rc, nil)

	id := in.post(`{"order":2}`, "application/json")
	rc.next(t, id)

	var v hookView
	testutil.Eventually(t, waitFor, "the delivery to be dead", func() bool {
		var ok bool
		v, ok = in.hook(id)
		if !ok {
			t.Fatalf("hook %s was reclaimed although its delivery got a 410", id)
		}
		return v.Deliveries[0].State == "dead"
	})
	d := v.Deliveries[0]
	if d.Sink != sinkID || d.Attempts != 1 || d.NextAt != nil || !strings.Contains(d.LastError, "410") {
		t.Errorf("delivery = %+v, want sink %s, attempts 1, no next_at, last_error naming 410", d, sinkID)
	}
	// The row is dead: no further attempt can be claimed.
	if n := len(rc.attempts(id)); n != 1 {
		t.Errorf("the receiver saw %d attempts, want 1", n)
	}

	q := in.dlq()
	if q.Total != 1 || len(q.Entries) != 1 {
		t.Fatalf("GET /v1/dlq = %+v, want exactly one entry", q)
	}
	e := q.Entries[0]
	if e.ID != id || e.SourceID != sourceID || e.Sink != sinkID || e.TenantID != "default" ||
		e.Size != len(`{"order":2}`) || e.ContentType != "application/json" || e.DeadLetteredAt == "" {
		t.Errorf("DLQ entry = %+v, want hook %s of %s/%s", e, id, sourceID, sinkID)
	}
	if !strings.Contains(e.Reason, "410") {
		t.Errorf("DLQ reason = %q, want it to mention 410", e.Reason)
	}
	if strings.Contains(e.Reason, "attempts exhausted") {
		t.Errorf("DLQ reason = %q: a permanent error is not an exhausted budget", e.Reason)
	}
}

// TestE2E_RetryAfterIsHonoured: a 429 with Retry-After: 2 holds the next
// attempt for at least two seconds, though the retry policy alone would
// retry within 40 ms.
func TestE2E_RetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, byAttempt(
		status(http.StatusTooManyRequests, "Retry-After", "2"),
		status(http.StatusOK),
	))
	in := startInstance(t, rc, nil)

	id := in.post(`{"order":3}`, "application/json")
	first := rc.next(t, id)

	// While it waits, the hook view shows the row due, one attempt spent,
	// the next attempt two seconds out. This is observed inside the
	// Retry-After window, which the assertions below prove is ≥ 2 s.
	var v hookView
	testutil.Eventually(t, waitFor, "the 429 to be recorded", func() bool {
		var ok bool
		v, ok = in.hook(id)
		return !ok || v.Deliveries[0].Attempts == 1
	})
	second := rc.next(t, id)
	minGap := 2 * time.Second
	// Measured on the wall clock (Round(0) drops the monotonic reading):
	// due times are wall-clock milliseconds (they outlive the process), so
	// that is the clock the retry is held by. For about a minute on
	// 2026-12-07 the monotonic gap came out 1.992-1.993 s in seven runs in
	// a row, on code that passed before and after; the likeliest cause is
	// the VM's clock being slewed, which moves the wall clock against the
	// monotonic one.
	if gap := second.At.Round(0).Sub(first.At.Round(0)); gap < minGap {
		t.Errorf("second attempt came %s after the first, want >= %s (Retry-After: 2)", gap, minGap)
	}
	if len(v.Deliveries) == 1 {
		d := v.Deliveries[0]
		if d.State != "due" || !strings.Contains(d.LastError, "429") || d.NextAt == nil {
			t.Errorf("delivery while waiting = %+v, want due with last_error naming 429 and a next_at", d)
		} else if next, err := time.Parse(time.RFC3339Nano, *d.NextAt); err != nil {
			t.Errorf("next_at %q: %v", *d.NextAt, err)
		} else if gap := next.Sub(first.At.Truncate(time.Millisecond)); gap < 2*time.Second {
			// next_at has millisecond resolution: compare at that resolution.
			t.Errorf("next_at %s is %s after the first attempt (ms resolution), want >= 2s", *d.NextAt, gap)
		}
	} else {
		t.Error("the hook was gone before its Retry-After elapsed")
	}
	in.waitReclaimed(id)
	if n := len(rc.attempts(id)); n != 2 {
		t.Errorf("the receiver saw %d attempts, want 2", n)
	}
}

// TestE2E_HangingReceiverIsCut: an attempt that outlives
// attempt_timeout_ms is cut, recorded as a timeout, and retried.
func TestE2E_HangingReceiverIsCut(t *testing.T) {
	t.Parallel()
	cut := make(chan struct{}, 1)
	release := make(chan struct{})
	rc := newReceiver(t, byAttempt(
		// First attempt: hang until Ankusa gives up on it.
		func(w http.ResponseWriter, r *http.Request, _ call, stop <-chan struct{}) {
			select {
			case <-r.Context().Done():
				cut <- struct{}{}
			case <-stop:
			}
		},
		// Later attempts: held until the test has seen the timeout in the
		// hook view, so the hook cannot be delivered and reclaimed first.
		func(w http.ResponseWriter, r *http.Request, _ call, stop <-chan struct{}) {
			select {
			case <-release:
				w.WriteHeader(http.StatusOK)
			case <-r.Context().Done():
			case <-stop:
			}
		},
	))
	in := startInstance(t, rc, func(c *config.Config) {
		c.Dispatch.AttemptTimeoutMs = 300
		c.Dispatch.BreakerFailures = 100 // held retries must not park the sink
	})

	id := in.post(`{"order":4}`, "application/json")
	rc.next(t, id)
	select {
	case <-cut:
	case <-time.After(waitFor):
		t.Fatal("the hanging attempt was never cut (its request context did not end)")
	}
	second := rc.next(t, id)
	if second.Attempt != 2 {
		t.Fatalf("second call is attempt %d", second.Attempt)
	}

	testutil.Eventually(t, waitFor, "last_error to mention the timeout", func() bool {
		v, ok := in.hook(id)
		if !ok {
			t.Fatal("hook reclaimed before any attempt succeeded")
		}
		d := v.Deliveries[0]
		return d.Attempts >= 1 && d.State != "dead" && strings.Contains(d.LastError, "timed out")
	})
	close(release)
	in.waitReclaimed(id)
	if n := len(rc.attempts(id)); n < 2 {
		t.Errorf("the receiver saw %d attempts, want at least 2", n)
	}
}

// TestE2E_ReplayFromDLQ: a dead-lettered hook is replayed once the receiver
// is fixed, with the same id and the job id as replay id.
func TestE2E_ReplayFromDLQ(t *testing.T) {
	t.Parallel()
	fixed := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ call, _ <-chan struct{}) {
		select {
		case <-fixed:
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusGone)
		}
	})
	in := startInstance(t, rc, nil)

	body := `{"order":5}`
	id := in.post(body, "application/json")
	first := rc.next(t, id)
	testutil.Eventually(t, waitFor, "the hook to be dead-lettered", func() bool { return in.dlq().Total == 1 })

	close(fixed)
	var job jobView
	if code := in.api(http.MethodPost, "/v1/replays", map[string]any{"kind": "dlq", "rate": 50}, &job); code != http.StatusCreated {
		t.Fatalf("POST /v1/replays = %d, want 201", code)
	}
	if job.ID == "" || job.Kind != "dlq" || job.Rate != 50 {
		t.Fatalf("created job = %+v", job)
	}

	again := rc.next(t, id)
	if again.ID != first.ID {
		t.Errorf("replayed x-ankusa-id = %q, want the original %q", again.ID, first.ID)
	}
	if again.ReplayID != job.ID {
		t.Errorf("replayed x-ankusa-replay-id = %q, want the job id %q", again.ReplayID, job.ID)
	}
	if got, want := again.Header.Get("X-Ankusa-Idempotency-Key"), first.Header.Get("X-Ankusa-Idempotency-Key"); got != want {
		t.Errorf("replayed idempotency key = %q, want the original %q", got, want)
	}
	if !bytes.Equal(again.Body, []byte(body)) {
		t.Errorf("replayed body = %q, want %q", again.Body, body)
	}

	testutil.Eventually(t, waitFor, "the replay job to be done", func() bool {
		var j jobView
		if code := in.api(http.MethodGet, "/v1/replays/"+job.ID, nil, &j); code != http.StatusOK {
			t.Fatalf("GET /v1/replays/%s = %d", job.ID, code)
		}
		if j.State == "done" {
			if j.Moved != 1 {
				t.Errorf("done job = %+v, want moved 1", j)
			}
			return true
		}
		if j.State != "running" {
			t.Fatalf("job state = %q, want running then done", j.State)
		}
		return false
	})
	if q := in.dlq(); q.Total != 0 || len(q.Entries) != 0 {
		t.Errorf("GET /v1/dlq after the replay = %+v, want empty", q)
	}
	in.waitReclaimed(id)

	var list struct {
		Replays []jobView `json:"replays"`
	}
	if code := in.api(http.MethodGet, "/v1/replays", nil, &list); code != http.StatusOK {
		t.Fatalf("GET /v1/replays = %d", code)
	}
	if len(list.Replays) != 1 || list.Replays[0].ID != job.ID || list.Replays[0].State != "done" {
		t.Errorf("GET /v1/replays = %+v, want the one done job", list.Replays)
	}
	testutil.Eventually(t, waitFor, "ankusa_queue_dead to fall back to 0", func() bool {
		return in.metrics()["ankusa_queue_dead"] == 0
	})
}

// TestE2E_ReplayJobAPI: state changes and the API's refusals.
func TestE2E_ReplayJobAPI(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK))
	in := startInstance(t, rc, nil)

	// At 0.1 rows/s the job needs 10 s for its first token: it stays
	// running for the whole test.
	var job jobView
	if code := in.api(http.MethodPost, "/v1/replays", map[string]any{"kind": "dlq", "rate": 0.1}, &job); code != http.StatusCreated {
		t.Fatalf("POST /v1/replays = %d, want 201", code)
	}
	if job.State != "running" {
		t.Fatalf("new job state = %q, want running", job.State)
	}
	path := "/v1/replays/" + job.ID

	patch := func(state any, wantCode int, wantState string) {
		t.Helper()
		var j jobView
		code := in.api(http.MethodPatch, path, map[string]any{"state": state}, &j)
		if code != wantCode {
			t.Fatalf("PATCH %s {state: %v} = %d, want %d", path, state, code, wantCode)
		}
		if wantState != "" && j.State != wantState {
			t.Fatalf("PATCH %s {state: %v} answered state %q, want %q", path, state, j.State, wantState)
		}
		if wantState != "" {
			var g jobView
			if code := in.api(http.MethodGet, path, nil, &g); code != http.StatusOK || g.State != wantState {
				t.Fatalf("GET %s = %d state %q, want 200 %q", path, code, g.State, wantState)
			}
		}
	}
	patch("paused", http.StatusOK, "paused")
	patch("sleeping", http.StatusBadRequest, "")
	patch("done", http.StatusBadRequest, "") // not a state an operator sets
	patch(7, http.StatusBadRequest, "")
	patch("running", http.StatusOK, "running")
	patch("cancelled", http.StatusOK, "cancelled")
	patch("running", http.StatusBadRequest, "") // a cancelled job stays cancelled

	if code := in.api(http.MethodPatch, "/v1/replays/0190aaaa-0000-7000-8000-000000000000", map[string]any{"state": "paused"}, nil); code != http.StatusNotFound {
		t.Errorf("PATCH unknown job = %d, want 404", code)
	}
	if code := in.api(http.MethodGet, "/v1/replays/0190aaaa-0000-7000-8000-000000000000", nil, nil); code != http.StatusNotFound {
		t.Errorf("GET unknown job = %d, want 404", code)
	}
	for _, spec := range []map[string]any{
		{"kind": "bogus"},
		{"kind": "dlq", "rate": -1},
		{"kind": "dlq", "rate": 1e9},
		{"kind": "dlq", "max_lag_ms": -5},
		{"kind": "dlq", "colour": "red"},
	} {
		if code := in.api(http.MethodPost, "/v1/replays", spec, nil); code != http.StatusBadRequest {
			t.Errorf("POST /v1/replays %v = %d, want 400", spec, code)
		}
	}
}

// TestE2E_Metrics: delivery results and the DLQ gauge are exported.
func TestE2E_Metrics(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, c call, _ <-chan struct{}) {
		if bytes.Contains(c.Body, []byte("gone")) {
			w.WriteHeader(http.StatusGone)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	in := startInstance(t, rc, nil)

	ok := in.post(`{"fine":true}`, "application/json")
	dead := in.post(`{"gone":true}`, "application/json")
	rc.next(t, ok)
	rc.next(t, dead)
	in.waitReclaimed(ok)

	delivered := `ankusa_dispatch_deliveries_total{result="delivered",sink="` + sinkID + `"}`
	deadSeries := `ankusa_dispatch_deliveries_total{result="dead",sink="` + sinkID + `"}`
	var m map[string]float64
	testutil.Eventually(t, waitFor, "the delivery counters and ankusa_queue_dead", func() bool {
		m = in.metrics()
		return m[delivered] >= 1 && m[deadSeries] >= 1 && m["ankusa_queue_dead"] >= 1
	})
	if m[delivered] != 1 || m[deadSeries] != 1 || m["ankusa_queue_dead"] != 1 {
		t.Errorf("%s = %v, %s = %v, ankusa_queue_dead = %v; want 1 each",
			delivered, m[delivered], deadSeries, m[deadSeries], m["ankusa_queue_dead"])
	}
	if v, found := m["ankusa_dispatch_dead_lettered_total"]; !found || v != 1 {
		t.Errorf("ankusa_dispatch_dead_lettered_total = %v (present %v), want 1", v, found)
	}
}

// TestE2E_LastErrorHidesURLSecrets: a failed attempt's error is shown by
// GET /v1/hooks; like GET /v1/config it must not reveal the sink URL's
// credentials or query values.
func TestE2E_LastErrorHidesURLSecrets(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close() // connection refused from now on

	rc := newReceiver(t, status(http.StatusOK)) // unused: the sink points elsewhere
	in := startInstance(t, rc, func(c *config.Config) {
		c.Sources[sourceID].Sinks[0].HTTP.URL = "http://ops:pa55word@" + closed + "/in?api_key=s3cr3t"
	})
	id := in.post(`{"order":6}`, "application/json")
	var lastErr string
	testutil.Eventually(t, waitFor, "a failed attempt to be recorded", func() bool {
		v, ok := in.hook(id)
		if ok {
			lastErr = v.Deliveries[0].LastError
		}
		return lastErr != ""
	})
	for _, secret := range []string{"pa55word", "s3cr3t", "ops:"} {
		if strings.Contains(lastErr, secret) {
			t.Errorf("last_error %q reveals %q from the sink URL", lastErr, secret)
		}
	}
}
