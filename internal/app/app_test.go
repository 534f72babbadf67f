package app

// In-package tests of the dual wiring: they reach the instance's memory
// intake log (in.intake) to take the log down, which no public seam allows.

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/quarantine"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// startDualForTest runs a wal.type: dual instance on the memory log with
// config.Default()'s demo source and intake.retry_after_s 7.
func startDualForTest(t *testing.T) (*Instance, *memory.Log) {
	t.Helper()
	cfg := dualNodeConfig(t, filepath.Join(t.TempDir(), "intake"))
	// A plain range-checked number: nothing Validate derives depends on it.
	cfg.Intake.RetryAfterS = 7
	in := startForTest(t, cfg)
	lg, ok := in.intake.(*memory.Log)
	if !ok {
		t.Fatalf("intake is %T, want *memory.Log", in.intake)
	}
	return in, lg
}

type answered struct {
	status     int
	retryAfter string
	body       map[string]any
	raw        string
}

func call(t *testing.T, method, url string) answered {
	t.Helper()
	var rd io.Reader
	if method == http.MethodPost {
		rd = strings.NewReader(`{"n":1}`)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answered{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body) // /metrics is not JSON
	return a
}

// intakeState is intake.state of a GET /v1/wal answer ("" if absent).
func intakeState(a answered) string {
	m, _ := a.body["intake"].(map[string]any)
	s, _ := m["state"].(string)
	return s
}

// TestDual_IntakeDownIsReportedAndRefused: while the log says it is not
// answering, /ready is 503 with intake down, /v1/wal and the ready gauge
// say so, and a hook is refused 503 intake_unavailable with
// intake.retry_after_s, before anything is written. When the log answers
// again the node is ready and the gate's probe batch is acked.
func TestDual_IntakeDownIsReportedAndRefused(t *testing.T) {
	in, lg := startDualForTest(t)
	admin := "http://" + in.AdminAddr()
	hook := "http://" + in.IngestAddr() + "/webhooks/demo"

	if a := call(t, http.MethodPost, hook); a.status != http.StatusCreated {
		t.Fatalf("POST with the log up = %d %s, want 201", a.status, a.raw)
	}
	if a := call(t, http.MethodGet, admin+"/ready"); a.status != http.StatusOK || a.body["intake"] != "up" {
		t.Fatalf("/ready with the log up = %d %v, want 200 intake up", a.status, a.body)
	}

	lg.SetReady(false)
	a := call(t, http.MethodGet, admin+"/ready")
	if a.status != http.StatusServiceUnavailable || a.body["intake"] != "down" || a.body["reason"] != "intake_down" || a.retryAfter != "1" {
		t.Fatalf("/ready with the log down = %d %v Retry-After %q, want 503 intake down, reason intake_down, Retry-After 1", a.status, a.body, a.retryAfter)
	}
	if a := call(t, http.MethodGet, admin+"/v1/wal"); a.status != http.StatusOK || intakeState(a) != "down" {
		t.Fatalf("/v1/wal with the log down = %d %v, want intake.state down", a.status, a.body)
	}
	if a := call(t, http.MethodGet, admin+"/metrics"); !strings.Contains(a.raw, "\nankusa_intake_ready 0\n") {
		t.Fatal("/metrics with the log down: ankusa_intake_ready is not 0")
	}
	next := in.Queue().Stats().NextSeq
	a = call(t, http.MethodPost, hook)
	if a.status != http.StatusServiceUnavailable || a.body["error"] != "intake_unavailable" || a.retryAfter != "7" {
		t.Fatalf("POST with the log down = %d %v Retry-After %q, want 503 intake_unavailable, Retry-After 7", a.status, a.body, a.retryAfter)
	}
	if n := in.Queue().Stats().NextSeq; n != next {
		t.Fatalf("a refused hook consumed a seq (next %d → %d)", next, n)
	}

	lg.SetReady(true)
	if a := call(t, http.MethodGet, admin+"/ready"); a.status != http.StatusOK || a.body["intake"] != "up" {
		t.Fatalf("/ready with the log back = %d %v, want 200 intake up", a.status, a.body)
	}
	// The gate stays open until intake.probe_ms has passed; then one batch
	// probes it, and its confirm closes it.
	testutil.Eventually(t, 10*time.Second, "the probe batch acked", func() bool {
		return call(t, http.MethodPost, hook).status == http.StatusCreated
	})
	if a := call(t, http.MethodGet, admin+"/v1/wal"); intakeState(a) != "up" {
		t.Fatalf("/v1/wal after the probe = %v, want intake.state up", a.body)
	}
	if got := len(lg.Records()); got != 2 {
		t.Fatalf("records in the log = %d, want the two acked hooks", got)
	}
}

// TestDual_BootRecoveryRecountsThePen: the pen is opened (and counted)
// before boot recovery runs, and the replay deletes the pen row of a
// released hook it writes from the log (ack rule 7). The boot recounts the
// pen then, so a hook that is no longer held is no longer counted against
// quarantine.max_bytes. The store here holds the hook in the pen, as a
// backup taken before its release does; the log holds its release.
func TestDual_BootRecoveryRecountsThePen(t *testing.T) {
	intakeDir := filepath.Join(t.TempDir(), "intake")
	cfg := dualNodeConfig(t, intakeDir)
	st, err := store.Open(store.Options{Dir: filepath.Join(cfg.Node.DataDir, "store"), Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	pen, err := quarantine.New(st, quarantine.Options{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute)
	body := []byte(`{"held":true}`)
	env := &store.Envelope{ID: id, ReceivedAt: at.UnixNano(), Tenant: "default", Source: "demo",
		ContentType: "application/json", Body: body, SHA256: sha256.Sum256(body)}
	if err := pen.Hold(t.Context(), env, "no_match"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The release, committed under dual on the host that was lost.
	lg, err := memory.Open(memory.Options{Dir: intakeDir, Node: "node-a", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	lost := testutil.OpenStore(t, filepath.Join(t.TempDir(), "lost"), nil)
	q := testutil.StartQueue(t, lost, queue.Options{Dual: &queue.DualOptions{Intake: lg, Node: "node-a"}})
	if _, err := q.Submit(t.Context(), &queue.Record{ID: id, ReceivedAt: at, Tenant: "default", Source: "demo",
		ContentType: "application/json", Body: body}); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}

	in := startForTest(t, cfg)
	if v, err := in.store.ReadPen(store.HeldRef(env)); err != nil || v != nil {
		t.Fatalf("the released hook's pen row after boot recovery: %q, %v; want it gone", v, err)
	}
	if n, b := in.pen.Stats(); n != 0 || b != 0 {
		t.Fatalf("pen Stats() after boot recovery = %d records, %d bytes; want 0, 0", n, b)
	}
}
