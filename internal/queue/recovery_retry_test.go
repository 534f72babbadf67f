package queue_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/testutil"
)

// cutReplay wraps the real memory log so that one Replay stops, with a
// classified Unavailable error, after passing `after` records: the log
// going away part way through a replay, which the memory log's own faults
// (at the start of a call) do not model.
type cutReplay struct {
	*memory.Log
	after int // records passed before the cut; <0: no cut
}

var errCut = errors.New("log went away mid-replay")

func (c *cutReplay) Replay(ctx context.Context, from intake.Position, fn func(intake.Record, intake.Position) error) error {
	if c.after < 0 {
		return c.Log.Replay(ctx, from, fn)
	}
	n := c.after
	c.after = -1 // one cut
	return c.Log.Replay(ctx, from, func(r intake.Record, p intake.Position) error {
		if n == 0 {
			return &intake.Error{Class: intake.Unavailable, Err: errCut}
		}
		n--
		return fn(r, p)
	})
}

// I2: a Recover that failed part way through its replay (a log outage) is
// run again and completes: every acked hook is in the store once, under
// its seq, and the retry, sharing Replayed, republishes nothing the log
// already holds (the log still holds exactly the acked records).
func TestRecovery_RetryAfterAnOutageMidReplay(t *testing.T) {
	lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
	acked := ackIntoLog(t, lg, 10)
	in := &cutReplay{Log: lg, after: 5}

	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	replayed := map[uint64]bool{}
	run := func() (queue.Summary, error) {
		o := queue.RecoverOptions{Intake: in, Node: "node-a", Origin: queue.OriginFresh, Resolve: route,
			Logger: testutil.Logger(t), Chunk: 3, Replayed: replayed}
		return queue.Recover(t.Context(), st, o)
	}
	first, err := run()
	if transient, _ := intake.IsTransient(err); !transient || !errors.Is(err, errCut) {
		t.Fatalf("first run = %v, want the classified outage", err)
	}
	// One chunk of 3 was durable before the cut; the 2 records after it
	// were never applied.
	if first.Applied != 3 {
		t.Fatalf("first run applied %d, want the one durable chunk of 3", first.Applied)
	}
	second, err := run()
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if second.Applied != 7 || second.Present != 0 || second.Collided != 0 || second.Republished != 0 {
		t.Fatalf("second run %s, want applied=7 (from the stored offset) and nothing republished", second)
	}
	assertHooks(t, st, acked)
	if n := len(lg.Records()); n != len(acked) {
		t.Fatalf("the log holds %d records after the retry, want the %d acked (a republish of replayed hooks)", n, len(acked))
	}
}

// RecoverNode is boot recovery's one entry point (the boot and ankusa
// recover): it stamps the node, waits out a log outage only when given a
// probe (the boot's patience), replays only when asked, and tells the app a
// restored store is recovered only after a replay that wrote.
func TestRecoverNode_StepsByCaller(t *testing.T) {
	tests := []struct {
		name      string
		stampedAs string // the store's node stamp before the run; "" none
		opts      queue.NodeOptions
		cut       int // records the first Replay passes before an outage; <0 none
		wantErr   string
		// what the run leaves
		wantApplied   int
		wantStamp     string
		wantRecovered bool
		wantOnReplay  int // calls
	}{
		{name: "boot: an outage mid-replay is waited out", cut: 5,
			opts:        queue.NodeOptions{Replay: true, Probe: 5 * time.Millisecond},
			wantApplied: 10, wantStamp: "node-a", wantOnReplay: 1},
		{name: "recover command: one attempt, the outage is the answer", cut: 5,
			opts:    queue.NodeOptions{Replay: true},
			wantErr: errCut.Error(), wantApplied: 3, wantStamp: "node-a", wantOnReplay: 1},
		{name: "recover_on_boot false: identity and topology only", cut: -1,
			opts:      queue.NodeOptions{Replay: false, Probe: 5 * time.Millisecond},
			wantStamp: "node-a"},
		{name: "another node's store is refused before any replay", cut: -1, stampedAs: "node-b",
			opts:    queue.NodeOptions{Replay: true},
			wantErr: "intake_node_mismatch", wantStamp: "node-b"},
		{name: "a restored store is marked recovered after the replay", cut: -1,
			opts:        queue.NodeOptions{Replay: true, RecoverOptions: queue.RecoverOptions{Origin: queue.OriginRestored}},
			wantApplied: 10, wantStamp: "node-a", wantRecovered: true, wantOnReplay: 1},
		{name: "a dry run stamps nothing and marks nothing", cut: -1,
			opts:        queue.NodeOptions{Replay: true, RecoverOptions: queue.RecoverOptions{Origin: queue.OriginRestored, DryRun: true}},
			wantApplied: 10, wantOnReplay: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lg := openLog(t, filepath.Join(t.TempDir(), "intake"))
			acked := ackIntoLog(t, lg, 10)
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			if tc.stampedAs != "" {
				if err := queue.StampNode(st, tc.stampedAs); err != nil {
					t.Fatal(err)
				}
			}
			o := tc.opts
			o.Intake, o.Node, o.Resolve, o.Logger = &cutReplay{Log: lg, after: tc.cut}, "node-a", route, testutil.Logger(t)
			if o.Origin == queue.OriginExisting {
				o.Origin = queue.OriginFresh
			}
			o.Chunk = 3
			recovered, onReplay := false, 0
			o.Recovered = func() error { recovered = true; return nil }
			var reported queue.Summary
			o.OnReplay = func(total queue.Summary, _ time.Duration) { onReplay++; reported = total }

			sum, err := queue.RecoverNode(t.Context(), st, o)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("RecoverNode: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("RecoverNode = %v, want an error naming %q", err, tc.wantErr)
			}
			if sum.Applied != tc.wantApplied {
				t.Fatalf("applied %d (%s), want %d", sum.Applied, sum, tc.wantApplied)
			}
			if onReplay != tc.wantOnReplay || (onReplay > 0 && !reflect.DeepEqual(reported, sum)) {
				t.Fatalf("OnReplay called %d times with %s, want %d with the returned %s", onReplay, reported, tc.wantOnReplay, sum)
			}
			if recovered != tc.wantRecovered {
				t.Fatalf("Recovered called = %v, want %v", recovered, tc.wantRecovered)
			}
			node, _, err := st.IntakeNode()
			if err != nil || node != tc.wantStamp {
				t.Fatalf("store stamped %q (%v), want %q", node, err, tc.wantStamp)
			}
			if tc.wantApplied == len(acked) && !o.DryRun {
				assertHooks(t, st, acked)
			}
			if n := len(lg.Records()); n != len(acked) {
				t.Fatalf("the log holds %d records, want the %d acked (a retry republished replayed hooks)", n, len(acked))
			}
		})
	}
}
