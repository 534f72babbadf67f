package e2e_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/app/apptest"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/testutil"
)

func withBackups(loc string) func(*config.Config) {
	return func(c *config.Config) {
		c.Backup = config.BackupConfig{
			Enabled: true, IntervalMs: 3_600_000, MaxAgeMs: 7_200_000, Keep: 3,
			Primary: "file://" + loc, SigningKey: "0123456789abcdef-test-key",
		}
	}
}

func chain(fs ...func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		for _, f := range fs {
			f(c)
		}
	}
}

// copyTree snapshots a backup location, as it stood at one moment.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestE2E_DiskBackupRestoresOnAnEmptyDataDir: under disk mode a clean stop
// takes a final backup; a node started on an empty data dir restores it
// and delivers the hooks it holds.
func TestE2E_DiskBackupRestoresOnAnEmptyDataDir(t *testing.T) {
	loc := t.TempDir()
	down := newReceiver(t, status(503))
	a := startInstance(t, down, withBackups(loc))
	var acked []string
	for range 10 {
		acked = append(acked, a.post(`{"x":1}`, "application/json"))
	}
	if err := a.Stop(context.Background()); err != nil { // final backup
		t.Fatal(err)
	}
	up := newReceiver(t, status(200))
	startInstance(t, up, withBackups(loc))
	for _, id := range acked {
		up.next(t, id)
	}
}

// TestE2E_DualHostLossFromBackupPlusLog: the recovery point is the backup
// plus the intake log since its offset. Hooks acked before the backup come
// back from it; hooks acked after it come back from the log.
func TestE2E_DualHostLossFromBackupPlusLog(t *testing.T) {
	loc, logDir := t.TempDir(), filepath.Join(t.TempDir(), "intake")
	down := newReceiver(t, status(503))
	a := startInstance(t, down, chain(dualOn(logDir, ""), withBackups(loc)))
	var before, after []string
	for range 8 {
		before = append(before, a.post(`{"phase":"before"}`, "application/json"))
	}
	if err := a.BackupNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The host is lost right after that backup: freeze the location now.
	frozen := t.TempDir()
	copyTree(t, loc, frozen)
	for range 7 {
		after = append(after, a.post(`{"phase":"after"}`, "application/json"))
	}
	up := newReceiver(t, status(200))
	b := startInstance(t, up, chain(dualOn(logDir, t.TempDir()), withBackups(frozen)))
	for _, id := range append(before, after...) {
		up.next(t, id)
	}
	var w struct {
		Intake struct{ Node string } `json:"intake"`
	}
	b.api("GET", "/v1/wal", nil, &w)
	if w.Intake.Node != "node-a" {
		t.Fatalf("intake node %q", w.Intake.Node)
	}
}

// TestE2E_BackupCommands: ankusa backup now|list|verify on a stopped node,
// and verify refuses a tampered manifest.
func TestE2E_BackupCommands(t *testing.T) {
	loc := t.TempDir()
	rc := newReceiver(t, status(503))
	a := startInstance(t, rc, withBackups(loc))
	a.post(`{}`, "application/json")
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Node.DataDir = a.Config().Node.DataDir
	cfg.Node.Instance = a.Config().Node.Instance
	withBackups(loc)(cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := testutil.Logger(t)
	if _, err := app.BackupCommand(context.Background(), cfg, "now", log); err != nil {
		t.Fatalf("backup now: %v", err)
	}
	out, err := app.BackupCommand(context.Background(), cfg, "list", log)
	if err != nil || !strings.Contains(fmt.Sprint(out), "primary") {
		t.Fatalf("backup list: %v %v", out, err)
	}
	if _, err := app.BackupCommand(context.Background(), cfg, "verify", log); err != nil {
		t.Fatalf("backup verify: %v", err)
	}
	// Tamper with every manifest: verify must refuse.
	_ = filepath.WalkDir(loc, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "manifest.json" {
			b, _ := os.ReadFile(p)
			_ = os.WriteFile(p, []byte(strings.Replace(string(b), `"version"`, `"versiom"`, 1)), 0o644)
		}
		return nil
	})
	if _, err := app.BackupCommand(context.Background(), cfg, "verify", log); err == nil {
		t.Fatal("verify passed a tampered manifest")
	}
}

// TestE2E_TruncatedLogRefusesARestoredStoreAtEveryBoot: a restored store
// whose log no longer reaches back to its backup's offset is refused at
// boot, and again at the next boot (a supervisor's restart must not turn
// the refusal into an ordinary start), until ankusa recover --allow-gap
// accepts the gap.
func TestE2E_TruncatedLogRefusesARestoredStoreAtEveryBoot(t *testing.T) {
	loc, logDir := t.TempDir(), filepath.Join(t.TempDir(), "intake")
	rc := newReceiver(t, status(503))
	a := startInstance(t, rc, chain(dualOn(logDir, ""), withBackups(loc)))
	for range 3 {
		a.post(`{}`, "application/json")
	}
	// A clean stop: the final backup's offset is the log head (position 2).
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The node went on writing after that backup, and retention has since
	// dropped the first of those records: positions 3 and 4 are gone.
	lg, err := memory.Open(memory.Options{Dir: logDir, Node: "node-a", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(100); seq < 103; seq++ {
		if _, err := lg.PublishBatch(context.Background(), []intake.Record{intaketest.NewRecord("node-a", seq)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Truncate(4); err != nil {
		t.Fatal(err)
	}
	_ = lg.Close()

	dataDir := t.TempDir()
	cfg := loopbackConfig("e2e", dataDir)
	chain(dualOn(logDir, dataDir), withBackups(loc))(cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	boot := func() error { return apptest.Boot(t, cfg, app.Options{}) }
	for i := range 2 {
		if err := boot(); err == nil || !strings.Contains(err.Error(), "intake_truncated") {
			t.Fatalf("boot %d of the restored store: %v, want intake_truncated", i+1, err)
		}
	}
	sum, err := app.Recover(context.Background(), cfg, app.RecoverFlags{AllowGap: true}, testutil.Logger(t))
	if err != nil || !sum.Gap {
		t.Fatalf("recover --allow-gap: %s %v", sum, err)
	}
	if err := boot(); err != nil {
		t.Fatalf("boot after --allow-gap: %v", err)
	}
}

// TestE2E_TruncatedLogRefusesAFreshStoreAtEveryBoot: ADR section 8 step 4
// for a replacement with no usable backup. Its store is fresh, the log for
// its node id is not empty, and retention has dropped the node's first
// records: boot refuses with intake_truncated, the next boot (the store is
// no longer new on disk) refuses again, and ankusa recover --allow-gap
// decides.
func TestE2E_TruncatedLogRefusesAFreshStoreAtEveryBoot(t *testing.T) {
	logDir := filepath.Join(t.TempDir(), "intake")
	lg, err := memory.Open(memory.Options{Dir: logDir, Node: "node-a", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// node-a's seqs 1..5 at positions 0..4; retention dropped 0..2.
	for seq := uint64(1); seq <= 5; seq++ {
		if _, err := lg.PublishBatch(context.Background(), []intake.Record{intaketest.NewRecord("node-a", seq)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Truncate(2); err != nil {
		t.Fatal(err)
	}
	_ = lg.Close()

	dataDir := t.TempDir()
	cfg := loopbackConfig("e2e", dataDir)
	chain(dualOn(logDir, dataDir), withBackups(t.TempDir()))(cfg) // an empty backup location
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	boot := func() error { return apptest.Boot(t, cfg, app.Options{}) }
	for i := range 2 {
		if err := boot(); err == nil || !strings.Contains(err.Error(), "intake_truncated") {
			t.Fatalf("boot %d of the fresh store: %v, want intake_truncated", i+1, err)
		}
	}
	sum, err := app.Recover(context.Background(), cfg, app.RecoverFlags{AllowGap: true}, testutil.Logger(t))
	if err != nil || !sum.Gap || sum.Records != 2 {
		t.Fatalf("recover --allow-gap: %s gap=%v %v, want the gap and the 2 records held read", sum, sum.Gap, err)
	}
	if err := boot(); err != nil {
		t.Fatalf("boot after --allow-gap: %v", err)
	}
}
