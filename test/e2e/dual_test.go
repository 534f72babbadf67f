package e2e_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/app/apptest"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// dualConfig is startInstance's configuration under wal.type: dual on the
// memory intake log in intakeDir, as node.
func dualConfig(t *testing.T, rc *receiver, dataDir, intakeDir, node string) *config.Config {
	t.Helper()
	cfg := baseConfig("e2e-dual", dataDir, rc.srv.URL+"/hooks")
	cfg.Retry.BaseMs, cfg.Retry.MaxMs = 10, 40
	cfg.WAL.Type = "dual"
	cfg.Intake.Type = "memory"
	cfg.Intake.NodeID = node
	cfg.Intake.Memory = &config.IntakeMemory{Path: intakeDir}
	withBackups(intakeDir + "-backups")(cfg) // dual requires backups
	if err := cfg.Validate(); err != nil {
		t.Fatalf("dual test config is invalid: %v", err)
	}
	return cfg
}

// startDual starts an instance from cfg and returns it with its stop,
// which may be called early (it is also a cleanup) and runs once.
func startDual(t *testing.T, cfg *config.Config) (*instance, func()) {
	t.Helper()
	in, stop := apptest.StartStoppable(t, cfg, app.Options{})
	return &instance{Instance: in, t: t, admin: "http://" + in.AdminAddr()}, stop
}

// walIntakeView is the intake object of GET /v1/wal.
type walIntakeView struct {
	WAL struct {
		Type string `json:"type"`
	} `json:"wal"`
	Intake *struct {
		Node      string `json:"node"`
		Partition int    `json:"partition"`
		Offset    int64  `json:"offset"`
		Watermark uint64 `json:"watermark"`
		Pending   int    `json:"pending"`
		Stuck     int    `json:"stuck"`
		State     string `json:"state"`
	} `json:"intake"`
}

// TestE2E_DualMemoryIntake runs one node under wal.type: dual on the
// memory log: a 201 hook is in the log with its id and delivered once,
// the operator API and metrics show the intake, a clean stop leaves the
// marks at the log head, and a store stamped by node-a refuses to boot as
// node-b.
func TestE2E_DualMemoryIntake(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK))
	dataDir, intakeDir := t.TempDir(), filepath.Join(t.TempDir(), "intake")
	in, stop := startDual(t, dualConfig(t, rc, dataDir, intakeDir, "node-a"))

	line := in.DurabilityLine()
	if !strings.Contains(line, "dual") || !strings.Contains(line, "TEST ONLY") || strings.Contains(line, "UNVERIFIED") {
		t.Errorf("durability line %q must name dual, say TEST ONLY and (verify_topic on) not UNVERIFIED", line)
	}

	id := in.post(`{"order":"dual"}`, "application/json")
	rc.next(t, id)
	in.waitReclaimed(id)
	if n := len(rc.attempts(id)); n != 1 {
		t.Errorf("the receiver saw %d deliveries of %s, want 1", n, id)
	}

	var wal walIntakeView
	if code := in.api(http.MethodGet, "/v1/wal", nil, &wal); code != http.StatusOK {
		t.Fatalf("GET /v1/wal = %d", code)
	}
	if wal.WAL.Type != "dual" || wal.Intake == nil {
		t.Fatalf("GET /v1/wal: wal.type %q, intake %v; want dual with an intake object", wal.WAL.Type, wal.Intake)
	}
	if i := wal.Intake; i.Node != "node-a" || i.Pending != 0 || i.Stuck != 0 || i.State != "up" || i.Watermark != 1 || i.Offset != 0 {
		t.Errorf("GET /v1/wal intake = %+v, want node-a, pending 0, stuck 0, state up, watermark 1, offset 0", *i)
	}

	var ready map[string]any
	if code := in.api(http.MethodGet, "/ready", nil, &ready); code != http.StatusOK {
		t.Fatalf("GET /ready = %d, want 200", code)
	}
	if ready["intake"] != "up" || ready["status"] != "ready" {
		t.Errorf("GET /ready = %v, want status ready, intake up", ready)
	}

	m := in.metrics()
	for series, want := range map[string]float64{
		"ankusa_intake_pending_records": 0,
		"ankusa_intake_reconcile_stuck": 0,
		"ankusa_intake_ready":           1,
	} {
		if got, found := m[series]; !found || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, found, want)
		}
	}
	if got := m[`ankusa_intake_publish_duration_seconds_count{outcome="ok"}`]; got < 1 {
		t.Errorf(`ankusa_intake_publish_duration_seconds_count{outcome="ok"} = %v, want ≥ 1`, got)
	}

	stop()

	// The log under intake.memory.path holds the acked hook, with its id.
	lg, err := memory.Open(memory.Options{Dir: intakeDir, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	recs := lg.Records()
	head := lg.Last()
	_ = lg.Close()
	if len(recs) != 1 || recs[0].ID != uuid.MustParse(id) || recs[0].Node != "node-a" || recs[0].Seq != 1 {
		t.Fatalf("intake log after the stop = %+v, want one record of hook %s (node-a, seq 1)", recs, id)
	}

	// A clean stop leaves the watermark at the last seq and the offset at
	// the log head.
	st, err := store.Open(store.Options{Dir: filepath.Join(dataDir, "store"), Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]uint64{string(store.KeyIntakeSeq): 1, string(store.KeyIntakeOffset): uint64(head)} {
		v, err := st.Get([]byte(key))
		got, ok := store.ParseU64(v)
		if err != nil || !ok || got != want {
			t.Errorf("%s after a clean stop = %d (%v, %x), want %d", key, got, err, v, want)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The store is stamped with node-a: booting it as node-b is refused,
	// naming both.
	_, err = app.New(dualConfig(t, rc, dataDir, intakeDir, "node-b"), app.Options{Logger: testutil.Logger(t)})
	if err == nil {
		t.Fatal("app.New as node-b on node-a's store succeeded, want intake_node_mismatch")
	}
	for _, want := range []string{"intake_node_mismatch", "node-a", "node-b"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}

	// The refused boot released the store: node-a starts on it again.
	again, stopAgain := startDual(t, dualConfig(t, rc, dataDir, intakeDir, "node-a"))
	if n := again.Queue().Stats().NextSeq; n != 2 {
		t.Errorf("next seq after the restart = %d, want 2", n)
	}
	stopAgain()
}

// TestE2E_DualStartupLineSaysUnverified: with intake.verify_topic: false
// the startup line says the log's settings were not checked, and still
// states the loss window.
func TestE2E_DualStartupLineSaysUnverified(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK))
	cfg := dualConfig(t, rc, t.TempDir(), filepath.Join(t.TempDir(), "intake"), "node-a")
	unverified := false
	cfg.Intake.VerifyTopic = &unverified
	in, _ := startDual(t, cfg)
	line := in.DurabilityLine()
	for _, want := range []string{"wal.type=dual", "UNVERIFIED", "lost if this host's disk is lost"} {
		if !strings.Contains(line, want) {
			t.Errorf("durability line %q does not say %q", line, want)
		}
	}
}
