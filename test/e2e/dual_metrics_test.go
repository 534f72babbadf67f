package e2e_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// intakeSeries are the ankusa_intake_* names of ADR section 11, as a scrape
// shows them (a histogram by its _count).
var intakeSeries = []string{
	"ankusa_intake_publish_duration_seconds_count",
	"ankusa_intake_failures_total",
	"ankusa_intake_pending_records",
	"ankusa_intake_pending_bytes",
	"ankusa_intake_reconcile_oldest_age_seconds",
	"ankusa_intake_reconcile_stuck",
	"ankusa_intake_reconciled_total",
	"ankusa_intake_refused_total",
	"ankusa_intake_offset_lag_seconds",
	"ankusa_intake_ready",
	"ankusa_intake_replay_total",
	"ankusa_intake_replay_duration_seconds",
}

// postTenant posts one hook to tenant's URL (http.routing: tenant_path).
func postTenant(t *testing.T, in *instance, tenant string) {
	t.Helper()
	url := "http://" + in.IngestAddr() + "/webhooks/" + tenant + "/" + sourceID
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"t":"`+tenant+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s = %d, want 201", url, resp.StatusCode)
	}
}

// TestE2E_DualMetricsEveryIntakeSeriesAndNoneGrowWithTenants is the ADR's
// metrics case: every ankusa_intake_* series of section 11 is on /metrics
// under dual, and the number of series does not grow with the number of
// tenants (labels are fixed sets, none from request input; rule 8). It
// then restarts the node: /v1/wal reports the stored offset at once, not
// -1 until the next publish.
func TestE2E_DualMetricsEveryIntakeSeriesAndNoneGrowWithTenants(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK))
	dataDir, intakeDir := t.TempDir(), filepath.Join(t.TempDir(), "intake")
	cfg := dualConfig(t, rc, dataDir, intakeDir, "node-a")
	cfg.HTTP.Routing = "tenant_path"
	in, stop := startDual(t, cfg)

	postTenant(t, in, "tenant-0") // every lazily created series exists now
	before := in.metrics()
	for _, name := range intakeSeries {
		found := false
		for k := range before {
			if k == name || strings.HasPrefix(k, name+"{") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("series %s is not on /metrics under wal.type: dual", name)
		}
	}
	for i := 1; i < 50; i++ {
		postTenant(t, in, fmt.Sprintf("tenant-%d", i))
	}
	after := in.metrics()
	if len(after) != len(before) {
		var grown []string
		for k := range after {
			if _, ok := before[k]; !ok {
				grown = append(grown, k)
			}
		}
		t.Errorf("/metrics has %d series after 50 tenants, %d after one; new: %v", len(after), len(before), grown)
	}

	var wal walIntakeView
	if code := in.api(http.MethodGet, "/v1/wal", nil, &wal); code != http.StatusOK || wal.Intake == nil {
		t.Fatalf("GET /v1/wal = %d %+v", code, wal.Intake)
	}
	offset := wal.Intake.Offset
	if offset < 0 {
		t.Fatalf("offset %d while serving, after 50 confirmed hooks", offset)
	}
	stop()

	again, _ := startDual(t, cfg)
	var wal2 walIntakeView
	if code := again.api(http.MethodGet, "/v1/wal", nil, &wal2); code != http.StatusOK || wal2.Intake == nil {
		t.Fatalf("GET /v1/wal after the restart = %d %+v", code, wal2.Intake)
	}
	if wal2.Intake.Offset < offset {
		t.Errorf("GET /v1/wal after a restart: intake.offset = %d, want the stored offset (at least %d)", wal2.Intake.Offset, offset)
	}
}
