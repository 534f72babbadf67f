package edge_test

// The edge's half of wal.type: dual: the refusals of the dual commit reach
// the provider as 503 with a Retry-After and a metric reason (the ADR's
// "intake_unavailable reaches the provider with Retry-After (router
// mapping, edge_test.exs)").

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
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
	"github.com/ankusa/ankusa/internal/testutil"
)

// stubCommitter answers every Submit with err.
type stubCommitter struct{ err error }

func (c stubCommitter) Submit(context.Context, *queue.Record) (queue.Result, error) {
	return queue.Result{}, c.err
}

// refusalLog records the edge's measurements.
type refusalLog struct {
	mu       sync.Mutex
	reasons  []string
	outcomes []string
}

func (o *refusalLog) Ingest(_, outcome string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes = append(o.outcomes, outcome)
}

func (o *refusalLog) IngestRefused(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reasons = append(o.reasons, reason)
}

func (o *refusalLog) take() (reasons, outcomes []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	reasons, outcomes = o.reasons, o.outcomes
	o.reasons, o.outcomes = nil, nil
	return reasons, outcomes
}

// dualPost sends one hook to h and returns the status, the Retry-After
// header and the decoded body.
func dualPost(t *testing.T, h http.Handler, path string, hdr map[string]string) (int, string, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"n":1}`))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("answer %q is not JSON: %v", w.Body.String(), err)
	}
	return w.Code, w.Header().Get("Retry-After"), body
}

func TestIngest_DualRefusalsMapTo503WithRetryAfter(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		intakeSecs int // edge.Options.IntakeRetryAfterSecs; 0 = default
		reason     string
		retryAfter string
	}{
		{"intake_unavailable carries intake.retry_after_s", fmt.Errorf("%w: publish: no quorum", queue.ErrIntakeUnavailable), 7, "intake_unavailable", "7"},
		{"intake_unavailable defaults to 2 s", queue.ErrIntakeUnavailable, 0, "intake_unavailable", "2"},
		{"intake_pending is always 1 s", queue.ErrIntakePending, 7, "intake_pending", "1"},
		{"store_unavailable of a dual commit keeps its own Retry-After", fmt.Errorf("%w: fsync", queue.ErrStoreUnavailable), 7, "store_unavailable", "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := &refusalLog{}
			h := edge.New(edge.Options{
				Routing: "path", Prefix: "/webhooks", MaxBodyBytes: 1000,
				Sources:   edge.NewRegistry(map[string]*edge.Source{"demo": {ID: "demo", Sinks: []queue.SinkRef{{Num: 0, ID: "log"}}}}),
				Committer: stubCommitter{err: tc.err}, Observer: obs, Logger: testutil.Logger(t),
				IntakeRetryAfterSecs: tc.intakeSecs,
			})
			status, ra, body := dualPost(t, h, "/webhooks/demo", nil)
			if status != http.StatusServiceUnavailable || ra != tc.retryAfter {
				t.Fatalf("answer %d Retry-After %q, want 503 and %q", status, ra, tc.retryAfter)
			}
			if len(body) != 1 || body["error"] != tc.reason {
				t.Fatalf("body %v, want exactly {\"error\":%q}", body, tc.reason)
			}
			reasons, outcomes := obs.take()
			if len(reasons) != 1 || reasons[0] != tc.reason {
				t.Fatalf("refusal reasons %v, want [%s]", reasons, tc.reason)
			}
			if len(outcomes) != 1 || outcomes[0] != edge.OutcomeRefused {
				t.Fatalf("outcomes %v, want [%s]", outcomes, edge.OutcomeRefused)
			}
		})
	}
}

// The same mapping over a real dual queue on the memory log: a publish
// failure is 503 intake_unavailable with intake.retry_after_s, the
// provider's retry meets the carried original (503 intake_pending,
// Retry-After 1, never 201), and once the reconciler has republished the
// retry is 201 duplicate with the first id.
func TestIngest_DualCommitThroughTheEdge(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), vfs.Default)
	lg, err := memory.Open(memory.Options{Dir: filepath.Join(t.TempDir(), "intake"), Node: "node-a", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	q := testutil.StartQueue(t, st, queue.Options{Dual: &queue.DualOptions{
		Intake: lg, Node: "node-a", PublishTimeout: 5 * time.Second, ReconcileEvery: -1, BreakerFailures: 3,
	}})
	sinks := []queue.SinkRef{{Num: 0, ID: "log"}}
	h := edge.New(edge.Options{
		Routing: "path", Prefix: "/webhooks", MaxBodyBytes: 1000,
		Sources: edge.NewRegistry(map[string]*edge.Source{
			"github": {ID: "github", Sinks: sinks, Dedupe: dedupe.New(&dedupe.Options{Preset: "github", TTL: 60 * time.Second})},
		}),
		Committer: q, Observer: nopObserver{}, Logger: testutil.Logger(t),
		IntakeRetryAfterSecs: 7,
	})
	hdr := map[string]string{"X-GitHub-Delivery": "d-dual"}

	lg.FailNext(1, intake.Unavailable)
	if status, ra, body := dualPost(t, h, "/webhooks/github", hdr); status != 503 || ra != "7" || body["error"] != "intake_unavailable" {
		t.Fatalf("publish failed: %d Retry-After %q %v, want 503 intake_unavailable Retry-After 7", status, ra, body)
	}
	if status, ra, body := dualPost(t, h, "/webhooks/github", hdr); status != 503 || ra != "1" || body["error"] != "intake_pending" {
		t.Fatalf("retry of a carried hook: %d Retry-After %q %v, want 503 intake_pending Retry-After 1", status, ra, body)
	}
	q.Reconcile(context.Background())
	recs := lg.Records()
	if len(recs) != 1 {
		t.Fatalf("records in the log = %d, want 1", len(recs))
	}
	status, _, body := dualPost(t, h, "/webhooks/github", hdr)
	if status != 201 || body["duplicate"] != true || body["id"] != uuid.UUID(recs[0].ID).String() {
		t.Fatalf("retry after the reconcile: %d %v, want 201 duplicate of %s", status, body, uuid.UUID(recs[0].ID))
	}
	if n := q.Stats().Hooks; n != 1 {
		t.Fatalf("hooks stored = %d, want 1", n)
	}
}
