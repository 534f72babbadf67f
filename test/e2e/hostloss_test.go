package e2e_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

// dualOn configures wal.type: dual with the memory log at logDir: a log
// that outlives the "host" (the data dir) in this test.
func dualOn(logDir, dataDir string) func(*config.Config) {
	return func(c *config.Config) {
		c.WAL.Type = "dual"
		c.Intake.Type = "memory"
		c.Intake.NodeID = "node-a"
		c.Intake.Memory = &config.IntakeMemory{Path: logDir}
		// Dual requires backups. Each node of these tests gets its own
		// location: the lost host's final backup at the test's end must not
		// land on its replacement's prefix (a dead host takes no backup).
		loc := logDir + "-backups-first"
		if dataDir != "" {
			loc = dataDir + "-backups"
		}
		withBackups(loc)(c)
		if dataDir != "" {
			c.Node.DataDir = dataDir
		}
	}
}

// TestE2E_HostLossReplacementDeliversEveryAckedHook: a dual node acks hooks
// while its receiver is down, then its host is lost (the data dir is
// abandoned). A replacement with the same node id on an empty data dir
// replays the log at boot and delivers every acked hook.
func TestE2E_HostLossReplacementDeliversEveryAckedHook(t *testing.T) {
	logDir := filepath.Join(t.TempDir(), "intake")
	down := newReceiver(t, status(503))
	a := startInstance(t, down, dualOn(logDir, ""))
	var acked []string
	for range 25 {
		acked = append(acked, a.post(`{"n":1}`, "application/json"))
	}
	// Host loss: a's disk is gone. (a is stopped by its cleanup; nothing of
	// its store is used again.)
	up := newReceiver(t, status(200))
	b := startInstance(t, up, dualOn(logDir, t.TempDir()))
	for _, id := range acked {
		c := up.next(t, id)
		if c.ID != id {
			t.Fatalf("delivered %s, want %s", c.ID, id)
		}
	}
	var w struct {
		Intake struct {
			Node      string `json:"node"`
			Watermark uint64 `json:"watermark"`
		} `json:"intake"`
	}
	b.api("GET", "/v1/wal", nil, &w)
	if w.Intake.Node != "node-a" || w.Intake.Watermark < uint64(len(acked)) {
		t.Fatalf("replacement intake view %+v", w.Intake)
	}
}

// TestE2E_RecoverCommandSameAsBoot: ankusa recover's library path replays
// into a stopped store; a second run changes nothing; --dry-run writes
// nothing.
func TestE2E_RecoverCommandSameAsBoot(t *testing.T) {
	logDir := filepath.Join(t.TempDir(), "intake")
	rc := newReceiver(t, status(503))
	a := startInstance(t, rc, dualOn(logDir, ""))
	for range 5 {
		a.post(`{}`, "application/json")
	}
	cfg := config.Default()
	dualOn(logDir, t.TempDir())(cfg)
	cfg.Sources = map[string]config.SourceConfig{sourceID: {
		Verify: config.VerifyConfig{Type: "none"}, Sinks: []config.SinkConfig{{ID: "log", Type: "log"}},
	}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dry, err := app.Recover(ctx, cfg, app.RecoverFlags{DryRun: true}, testutil.Logger(t))
	if err != nil || dry.Applied != 5 {
		t.Fatalf("dry run: %s %v", dry, err)
	}
	first, err := app.Recover(ctx, cfg, app.RecoverFlags{Node: "node-a"}, testutil.Logger(t))
	if err != nil || first.Applied != 5 {
		t.Fatalf("first run: %s %v; want applied=5 (the dry run must not have written)", first, err)
	}
	second, err := app.Recover(ctx, cfg, app.RecoverFlags{From: "earliest"}, testutil.Logger(t))
	if err != nil || second.Applied != 0 || second.Present != 5 {
		t.Fatalf("second run: %s %v; want applied=0 present=5", second, err)
	}
	if _, err := app.Recover(ctx, cfg, app.RecoverFlags{Node: "node-b"}, testutil.Logger(t)); err == nil || !strings.Contains(err.Error(), "node-b") {
		t.Fatalf("--node mismatch: %v", err)
	}
}
