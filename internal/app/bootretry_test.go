package app

// Boot recovery meets a log that is briefly unavailable (ADR section 8):
// the replacement node stays unready and waits, instead of exiting.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// dualNodeConfig is a wal.type: dual config for node-a on the memory log in
// intakeDir, with its own data dir and backup location (a replacement host
// has an empty disk; a separate, empty backup location makes its store
// fresh, so every hook must come back from the log).
func dualNodeConfig(t *testing.T, intakeDir string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Node.Instance = "app-dual"
	cfg.Node.DataDir = t.TempDir()
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	cfg.WAL.Type = "dual"
	cfg.Intake.Type = "memory"
	cfg.Intake.NodeID = "node-a"
	cfg.Intake.Memory = &config.IntakeMemory{Path: intakeDir}
	cfg.Intake.ProbeMs = 100
	cfg.Backup = config.BackupConfig{
		Enabled: true, IntervalMs: 3_600_000, MaxAgeMs: 7_200_000, Keep: 3,
		Primary: "file://" + filepath.Join(t.TempDir(), "backups"), SigningKey: "0123456789abcdef-test",
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config is invalid: %v", err)
	}
	return cfg
}

// ackHooksIntoLog runs node-a on intakeDir, acks n hooks and stops it: the
// log then holds them, as it does when the node's host is lost.
func ackHooksIntoLog(t *testing.T, intakeDir string, n int) {
	t.Helper()
	in, err := New(dualNodeConfig(t, intakeDir), Options{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := in.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	for i := range n {
		resp, err := http.Post("http://"+in.IngestAddr()+"/webhooks/demo", "application/json", strings.NewReader(fmt.Sprintf(`{"n":%d}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %d = %d, want 201", i, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// startInBackground runs StartContext on its own goroutine; the channel
// gets its answer. The instance is stopped when the test ends, after Start
// has answered.
func startInBackground(t *testing.T, in *Instance) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- in.StartContext(ctx)
	}()
	t.Cleanup(func() {
		cancel() // a boot still waiting for the log gives up
		<-done
		stop, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelStop()
		_ = in.Stop(stop)
	})
	return errc
}

// ADR section 8: a replacement node whose log answers "temporarily
// unavailable" (JetStream's 503/10008 just after its servers come back)
// stays unready with intake "recovering" and retries every intake.probe_ms;
// once the log answers, the boot completes with every hook of the log in
// the store. Before the fix the boot exited with "boot recovery: earliest
// position: intake unavailable".
func TestDual_BootRecoveryWaitsOutALogOutage(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(*memory.Log)
	}{
		{"earliest unavailable", func(l *memory.Log) { l.FailEarliestNext(1<<20, intake.Unavailable) }},
		{"replay throttled", func(l *memory.Log) { l.FailReplayNext(1<<20, intake.Throttled) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			intakeDir := filepath.Join(t.TempDir(), "intake")
			const hooks = 5
			ackHooksIntoLog(t, intakeDir, hooks)

			cfg := dualNodeConfig(t, intakeDir)
			// No dispatch: a delivered hook is deleted, and the test reads
			// the store for every hook of the log.
			cfg.Node.Roles = []string{"ingest"}
			in, err := New(cfg, Options{Logger: testutil.Logger(t)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			lg := in.intake.(*memory.Log)
			tc.arm(lg)
			errc := startInBackground(t, in)

			// Two injected failures: the boot met the outage and tried again.
			testutil.Eventually(t, 10*time.Second, "boot recovery to retry the log", func() bool {
				select {
				case err := <-errc:
					t.Fatalf("the boot ended during the log outage: %v", err)
				default:
				}
				return lg.ReadFailures() >= 2
			})
			// ReadFailures synchronises with the boot goroutine (the fault's
			// mutex), which bound the listeners before it met the log.
			admin, hook := "http://"+in.AdminAddr(), "http://"+in.IngestAddr()+"/webhooks/demo"
			if a := call(t, http.MethodGet, admin+"/ready"); a.status != http.StatusServiceUnavailable || a.body["intake"] != "recovering" {
				t.Fatalf("/ready while the boot waits for the log = %d %v, want 503 intake recovering", a.status, a.body)
			}
			if a := call(t, http.MethodPost, hook); a.status != http.StatusServiceUnavailable || a.body["error"] != "intake_unavailable" {
				t.Fatalf("POST while the boot waits for the log = %d %v, want 503 intake_unavailable", a.status, a.body)
			}

			lg.ClearFaults() // the log answers again
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("Start after the log came back: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the boot did not complete within 20 s of the log coming back")
			}
			if a := call(t, http.MethodGet, admin+"/ready"); a.status != http.StatusOK || a.body["intake"] != "up" {
				t.Fatalf("/ready after the boot = %d %v, want 200 intake up", a.status, a.body)
			}
			recs := lg.Records()
			if len(recs) != hooks {
				t.Fatalf("the log holds %d records, want the %d acked hooks", len(recs), hooks)
			}
			for _, r := range recs {
				v, err := in.Store().Get(store.HookKey(r.Seq))
				if err != nil || v == nil {
					t.Fatalf("hook seq %d of the log is not in the store (%v)", r.Seq, err)
				}
				if env, err := store.DecodeEnvelope(v); err != nil || env.ID != r.ID {
					t.Fatalf("seq %d holds another hook than the log's %x (%v)", r.Seq, r.ID, err)
				}
			}
		})
	}
}

// A store failure during boot recovery is not a log outage: the boot fails
// with it, promptly, instead of retrying it forever (an unclassified error
// must not pass for an unavailable log).
func TestDual_BootRecoveryStoreFailureFailsTheBoot(t *testing.T) {
	intakeDir := filepath.Join(t.TempDir(), "intake")
	ackHooksIntoLog(t, intakeDir, 3)

	full := &enospc{}
	rec := testutil.NewLogRecorder()
	in, err := New(dualNodeConfig(t, intakeDir), Options{
		Logger: slog.New(rec), FS: errorfs.Wrap(vfs.Default, full), OnFatal: func(error) {},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	full.armed.Store(true) // the disk fills before the replay's first chunk
	errc := startInBackground(t, in)
	t.Cleanup(func() { full.armed.Store(false) }) // runs before the Stop
	select {
	case err := <-errc:
		if err == nil || !errors.Is(err, store.ErrFailed) {
			t.Fatalf("Start with the store failing = %v, want a boot recovery error wrapping store.ErrFailed", err)
		}
		t.Logf("boot failed as it should: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Start with the store failing did not return in 20 s: the store failure was retried as a log outage")
	}
	if lines := rec.Matching("boot recovery waits for the intake log"); len(lines) != 0 {
		t.Fatalf("a store failure was retried as a log outage: %q", lines)
	}
}
