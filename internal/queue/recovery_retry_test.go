package queue_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

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
