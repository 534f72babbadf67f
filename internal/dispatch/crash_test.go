package dispatch_test

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// A crash right after a delivered outcome reached the store must not leave
// the hook behind: the outcome and the reclaim are one write, and a restart
// sweeps any fully delivered hook an older build left.
func TestDispatch_CrashAfterDeliveredOutcomeLeavesNoHook(t *testing.T) {
	fs := vfs.NewCrashableMem()
	st := testutil.OpenStore(t, "store", fs)
	var d *dispatch.Dispatcher
	q := testutil.StartQueue(t, st, queue.Options{OnDurable: func() {
		if d != nil {
			d.Wake()
		}
	}})
	s := newScripted()
	crashed := make(chan *vfs.MemFS, 1)
	d = dispatch.New(st, dispatch.Options{Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Poll: 10 * time.Millisecond, Logger: testutil.Logger(t)})
	dispatch.SetAfterOutcome(d, func() {
		// Power cut here: everything written so far is on the disk (a
		// kill -9 keeps written bytes), nothing after it.
		if err := st.SyncWAL(); err != nil {
			t.Error(err)
		}
		select {
		case crashed <- fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}):
		default:
		}
	})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	(&env{st: st, q: q, d: d}).submit(t, "hello", "")
	var disk *vfs.MemFS
	select {
	case disk = <-crashed:
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome written")
	}

	st2 := testutil.OpenStore(t, "store", disk)
	q2 := testutil.StartQueue(t, st2, queue.Options{})
	d2 := dispatch.New(st2, dispatch.Options{Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: newScripted()}},
		Durable: q2.Durable, OnReclaim: q2.Reclaimed, Poll: 10 * time.Millisecond, Logger: testutil.Logger(t)})
	if err := d2.Start(); err != nil {
		t.Fatal(err)
	}
	defer d2.Stop()
	if n := count(t, st2, store.PrefixHook); n != 0 {
		t.Fatalf("hooks after a crash between outcome and reclaim and a restart = %d, want 0", n)
	}
	if n := count(t, st2, store.PrefixDelivery); n != 0 {
		t.Fatalf("delivery rows left = %d, want 0", n)
	}
	if n := q2.Stats().Hooks; n != 0 {
		t.Fatalf("queue's hooks gauge = %d, want 0", n)
	}
}

// An older build's crash left a hook whose every delivery row says
// delivered: the next start removes it (and one with a row still due stays).
func TestDispatch_BootSweepsFullyDeliveredHooks(t *testing.T) {
	st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
	q := testutil.StartQueue(t, st, queue.Options{})
	e := &env{st: st, q: q}
	leaked := e.submit(t, "leaked", "")
	pending := e.submit(t, "pending", "")
	testutil.Eventually(t, 5*time.Second, "durable", func() bool { return q.Durable() >= pending.Seq })
	// The state a crash between the old two writes left: delivered, not
	// reclaimed.
	dl := e.delivery(t, leaked.Seq)
	dl.State, dl.NextAtMs = store.StateDelivered, 0
	b := st.NewBatch()
	_ = b.Set(store.DeliveryKey(leaked.Seq, 0), store.EncodeDelivery(dl), nil)
	var dueKeys [][]byte
	if err := st.Scan([]byte{store.PrefixDue}, []byte{store.PrefixDue + 1}, func(k, _ []byte) bool {
		dueKeys = append(dueKeys, append([]byte(nil), k...))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range dueKeys {
		_ = b.Delete(k, nil)
	}
	if err := st.ApplySync(b); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if n := count(t, st, store.PrefixHook); n != 2 {
		t.Fatalf("hooks before the restart = %d, want 2", n)
	}
	s := newScripted()
	s.block = make(chan struct{}) // the pending hook is not delivered during the check
	d := dispatch.New(st, dispatch.Options{Targets: map[uint16]dispatch.Target{0: {ID: "out", Sink: s}},
		Durable: q.Durable, OnReclaim: q.Reclaimed, Poll: 10 * time.Millisecond, Logger: testutil.Logger(t)})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if n := count(t, st, store.PrefixHook); n != 1 {
		t.Fatalf("hooks after the boot sweep = %d, want 1 (the pending one)", n)
	}
	if dl := e.delivery(t, pending.Seq); dl == nil {
		t.Fatal("the pending hook's delivery row was swept")
	}
	if n := q.Stats().Hooks; n != 1 {
		t.Fatalf("queue's hooks gauge = %d, want 1", n)
	}
}
