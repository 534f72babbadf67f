package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// restoredStore is a store as a backup left it: it holds this node's seqs
// below next and has applied the log up to offset.
func restoredStore(t *testing.T, offset intake.Position, next uint64) *store.Store {
	t.Helper()
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	b := st.NewBatch()
	defer b.Close()
	_ = b.Set(store.KeyIntakeOffset, store.U64(uint64(offset)), nil)
	_ = b.Set(store.KeyNextSeq, store.U64(next), nil)
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	return st
}

func recoverNode(t *testing.T, st *store.Store, in intake.Intake, node string, origin queue.Origin) (queue.Summary, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return queue.Recover(ctx, st, queue.RecoverOptions{
		Intake: in, Node: node, Origin: origin, Logger: testutil.Logger(t),
		Resolve: func(string) (queue.Route, bool) { return queue.Route{}, false },
	})
}

// TestIntake_RestoredIdleNodeNextToABusyOneIsNotTruncated (issue 18
// section 4): nodes share one stream, so the stream's first sequence says
// nothing about one node's records. An idle node whose records all aged
// out, restored while a busy node goes on writing, lost nothing and boots;
// a node whose own records after its backup's offset aged out is refused
// with intake_truncated; a fresh node with nothing in the stream boots.
func TestIntake_RestoredIdleNodeNextToABusyOneIsNotTruncated(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the stream's max_age to remove records")
	}
	t.Parallel()
	f := newFixture(t, func(c *natsjs.StreamConfig) {
		c.MaxAge = time.Second
		c.Duplicates = 500 * time.Millisecond // at most max_age
	})
	idle, busy, lossy := f.open(t, "idle-node", nil), f.open(t, "busy-node", nil), f.open(t, "lossy-node", nil)
	var idleLast, lossyBackup intake.Position
	for seq := uint64(1); seq <= 3; seq++ {
		idleLast = mustPublish(t, idle, intaketest.NewRecord("idle-node", seq))
	}
	lossyBackup = mustPublish(t, lossy, intaketest.NewRecord("lossy-node", 1))
	// The lossy node's backup holds seq 1; it then acked seqs 2 and 3,
	// which retention will drop.
	mustPublish(t, lossy, intaketest.NewRecord("lossy-node", 2), intaketest.NewRecord("lossy-node", 3))
	for seq := uint64(1); seq <= 3; seq++ {
		mustPublish(t, busy, intaketest.NewRecord("busy-node", seq))
	}
	testutil.Eventually(t, 30*time.Second, "every record aged out", func() bool {
		return f.c.StreamInfo(t, f.cfg.Name).State.Msgs == 0
	})
	// Retention stops removing: what is published next stays for the
	// checks, however slow the machine.
	cfg := f.cfg
	cfg.MaxAge = time.Hour
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if _, err := f.c.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("raise max_age: %v", err)
	}
	for seq := uint64(4); seq <= 6; seq++ {
		mustPublish(t, busy, intaketest.NewRecord("busy-node", seq))
	}
	mustPublish(t, lossy, intaketest.NewRecord("lossy-node", 4))
	if first := f.c.StreamInfo(t, f.cfg.Name).State.FirstSeq; intake.Position(first) <= idleLast+1 {
		t.Fatalf("stream first sequence %d: the case needs it above the idle node's offset+1 (%d)", first, idleLast+1)
	}

	if sum, err := recoverNode(t, restoredStore(t, idleLast, 4), idle, "idle-node", queue.OriginRestored); err != nil || sum.Gap {
		t.Fatalf("restored idle node: %s gap=%v err=%v; want a boot, no gap", sum, sum.Gap, err)
	}
	if sum, err := recoverNode(t, testutil.OpenStore(t, testutil.TempStoreDir(t), nil), idle, "idle-node", queue.OriginFresh); err != nil || sum.Gap {
		t.Fatalf("fresh idle node: %s gap=%v err=%v; want a boot, no gap", sum, sum.Gap, err)
	}
	fresh := f.open(t, "fresh-node", nil)
	if sum, err := recoverNode(t, testutil.OpenStore(t, testutil.TempStoreDir(t), nil), fresh, "fresh-node", queue.OriginFresh); err != nil || sum.Gap {
		t.Fatalf("fresh node: %s gap=%v err=%v; want a boot, no gap", sum, sum.Gap, err)
	}
	if sum, err := recoverNode(t, restoredStore(t, lossyBackup, 2), lossy, "lossy-node", queue.OriginRestored); !errors.Is(err, queue.ErrIntakeTruncated) {
		t.Fatalf("restored lossy node: %s err=%v; want intake_truncated (its seqs 2 and 3 aged out)", sum, err)
	}
	if sum, err := recoverNode(t, testutil.OpenStore(t, testutil.TempStoreDir(t), nil), lossy, "lossy-node", queue.OriginFresh); !errors.Is(err, queue.ErrIntakeTruncated) {
		t.Fatalf("fresh lossy node: %s err=%v; want intake_truncated (its seqs 1..3 aged out)", sum, err)
	}
}
