package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
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

// postTenant posts one hook to tenant's URL (http.routing: tenant_path)
// and returns its id.
func postTenant(t *testing.T, in *instance, tenant string) string {
	t.Helper()
	url := "http://" + in.IngestAddr() + "/webhooks/" + tenant + "/" + sourceID
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"t":"`+tenant+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ID string `json:"id"`
	}
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&out) != nil || out.ID == "" {
		t.Fatalf("POST %s = %d, want 201 with an id", url, resp.StatusCode)
	}
	return out.ID
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

	// One hook posted and delivered: every lazily created series exists.
	first := postTenant(t, in, "tenant-0")
	rc.next(t, first)
	in.waitReclaimed(first)
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
	var ids []string
	for i := 1; i < 50; i++ {
		id := postTenant(t, in, fmt.Sprintf("tenant-%d", i))
		ids = append(ids, id)
		rc.next(t, id)
		in.waitReclaimed(id)
	}
	after := in.metrics()
	// A series may still appear lazily from a fixed label set (a delivery
	// attempt that timed out under load adds result="retry"): that is not
	// growth with tenants. A series is, when it names a tenant or a hook,
	// or when as many new series appear as tenants were added.
	var grown, fromRequests []string
	for k := range after {
		if _, ok := before[k]; ok {
			continue
		}
		grown = append(grown, k)
		for i := 1; i < 50; i++ {
			if strings.Contains(k, fmt.Sprintf(`"tenant-%d"`, i)) {
				fromRequests = append(fromRequests, k)
			}
		}
		for _, id := range ids {
			if strings.Contains(k, id) {
				fromRequests = append(fromRequests, k)
			}
		}
	}
	if len(fromRequests) > 0 || len(grown) >= len(ids) {
		t.Errorf("/metrics has %d series after 50 tenants, %d after one; new: %v; naming a tenant or a hook: %v", len(after), len(before), grown, fromRequests)
	} else if len(grown) > 0 {
		t.Logf("series that appeared from fixed label sets: %v", grown)
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

// TestE2E_UpgradeOldStoreBootsUnderDualStampsAndRepublishesEverything is
// the ADR's upgrade case (section 12, disk → dual): a store written under
// wal.type: disk has no intake rows. Its first dual boot stamps them and
// republishes every local hook before it serves, so the hooks acked under
// disk are covered by the log from that boot on.
func TestE2E_UpgradeOldStoreBootsUnderDualStampsAndRepublishesEverything(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusServiceUnavailable)) // the hooks stay in the store
	dataDir, intakeDir := t.TempDir(), filepath.Join(t.TempDir(), "intake")
	old := startInstance(t, rc, func(c *config.Config) { c.Node.DataDir = dataDir })
	ids := map[string]bool{}
	for range 5 {
		ids[old.post(`{"acked":"under disk"}`, "application/json")] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	in, stop := startDual(t, dualConfig(t, rc, dataDir, intakeDir, "node-a"))
	var wal walIntakeView
	if code := in.api(http.MethodGet, "/v1/wal", nil, &wal); code != http.StatusOK || wal.Intake == nil {
		t.Fatalf("GET /v1/wal = %d %+v", code, wal.Intake)
	}
	if wal.Intake.Watermark != 5 || wal.Intake.Pending != 0 {
		t.Errorf("after the first dual boot: watermark %d pending %d, want 5 and 0", wal.Intake.Watermark, wal.Intake.Pending)
	}
	stop()

	lg, err := memory.Open(memory.Options{Dir: intakeDir, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	recs := lg.Records()
	_ = lg.Close()
	for _, r := range recs {
		delete(ids, uuid.UUID(r.ID).String())
	}
	if len(recs) != 5 || len(ids) != 0 {
		t.Fatalf("log holds %d records; hooks acked under disk missing from it: %v", len(recs), ids)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(dataDir, "store"), Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	node, _ := st.Get([]byte("m:intake_node"))
	wm, _ := st.Get(store.KeyIntakeSeq)
	if string(node) != "node-a" || string(wm) != string(store.U64(5)) {
		t.Errorf("stamped rows: m:intake_node %q, m:intake_seq %x; want node-a and 5", node, wm)
	}
}

// A hook stored under disk that is larger than the dual log takes (the
// operator lowered http.max_body_bytes, and so intake.max_record_bytes,
// when moving to dual): the first dual boot's republish places the others
// and carries it as a stuck record instead of failing the boot; it is
// still delivered from the store, and the watermark stays below it.
func TestE2E_UpgradeWithAHookTheLogRefusesBootsAndCarriesIt(t *testing.T) {
	t.Parallel()
	for _, byHand := range []bool{false, true} {
		name := "boot recovery"
		if byHand {
			name = "ankusa recover, then a boot with recover_on_boot false"
		}
		t.Run(name, func(t *testing.T) { t.Parallel(); upgradeWithARefusedHook(t, byHand) })
	}
}

// upgradeWithARefusedHook is the case above; byHand runs the recovery as
// `ankusa recover` does and then boots without it: the boot must still
// carry the refused hook (it is above the stored watermark), or the
// writer's first mark flush would move the watermark past it.
func upgradeWithARefusedHook(t *testing.T, byHand bool) {
	rc := newReceiver(t, status(http.StatusServiceUnavailable)) // the hooks stay in the store
	dataDir, intakeDir := t.TempDir(), filepath.Join(t.TempDir(), "intake")
	old := startInstance(t, rc, func(c *config.Config) { c.Node.DataDir = dataDir; c.HTTP.MaxBodyBytes = 200_000 })
	small1 := old.post(`{"n":1}`, "application/json")
	big := old.post(`{"big":"`+strings.Repeat("x", 100_000)+`"}`, "application/json")
	small2 := old.post(`{"n":3}`, "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := dualConfig(t, rc, dataDir, intakeDir, "node-a")
	cfg.HTTP.MaxBodyBytes = 1024
	cfg.Intake.MaxRecordBytes = 1024 + 65_536 // the smallest the rule allows: below the big hook
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if byHand {
		sum, err := app.Recover(context.Background(), cfg, app.RecoverFlags{}, testutil.Logger(t))
		if err != nil || len(sum.Refused) != 1 {
			t.Fatalf("ankusa recover: %s, %v; want one refused", sum, err)
		}
		off := false
		cfg.Intake.RecoverOnBoot = &off
	}
	in, stop := startDual(t, cfg)
	// By hand, the boot carries both hooks above the watermark (the big
	// one and the one after it, whose log half it cannot know); the
	// reconciler places the second again and keeps the first, stuck.
	var wal walIntakeView
	testutil.Eventually(t, 10*time.Second, "the big hook, seq 2, carried alone and stuck", func() bool {
		wal = walIntakeView{}
		code := in.api(http.MethodGet, "/v1/wal", nil, &wal)
		return code == http.StatusOK && wal.Intake != nil && wal.Intake.Pending == 1 && wal.Intake.Stuck == 1
	})
	if wal.Intake.Watermark != 1 {
		t.Errorf("watermark %d, want 1 (below the carried seq 2)", wal.Intake.Watermark)
	}
	var h struct {
		ID string `json:"id"`
	}
	if code := in.api(http.MethodGet, "/v1/hooks/"+big, nil, &h); code != http.StatusOK || h.ID != big {
		t.Errorf("GET /v1/hooks/%s = %d %+v: the carried hook must stay in the store", big, code, h)
	}
	stop()

	lg, err := memory.Open(memory.Options{Dir: intakeDir, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	recs := lg.Records()
	_ = lg.Close()
	got := map[string]bool{}
	for _, r := range recs {
		got[uuid.UUID(r.ID).String()] = true
	}
	if len(got) != 2 || !got[small1] || !got[small2] || got[big] {
		t.Fatalf("log holds %d records of hooks %v; want the two small hooks only", len(recs), got)
	}
}
