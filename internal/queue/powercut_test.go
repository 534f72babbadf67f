package queue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// powerCutDir is <data_dir>/store on the crashable in-memory disk. Neither
// directory exists before the store opens, as on a first boot: the store
// must make both entries durable itself, or a power cut loses every ack.
const powerCutDir = "/data/store"

// ack is one Submit that returned a nil error.
type ack struct {
	n      int // position in the order acks were recorded
	res    queue.Result
	dedupe string
	body   string
}

// ackLog records acks in the order the submitters saw them and signals
// when the count reaches each cut point.
type ackLog struct {
	mu      sync.Mutex
	acks    []ack
	cuts    []int           // ascending ack counts
	reached []chan struct{} // reached[i] is closed when len(acks) reaches cuts[i]
}

func newAckLog(cuts []int) *ackLog {
	l := &ackLog{cuts: cuts}
	for range cuts {
		l.reached = append(l.reached, make(chan struct{}))
	}
	return l
}

func (l *ackLog) add(a ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a.n = len(l.acks)
	l.acks = append(l.acks, a)
	for i, c := range l.cuts {
		if len(l.acks) == c {
			close(l.reached[i])
		}
	}
}

func (l *ackLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// snapshot is every ack recorded so far. An ack in it returned from Submit
// before snapshot did, so before the power cut that follows it.
func (l *ackLog) snapshot() []ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acks)
}

// powerCut is the disk as a power cut left it, and what callers had been
// told by then.
type powerCut struct {
	before []ack
	disk   *vfs.MemFS
}

type powerCutRound struct {
	name string
	seed uint64
	// unsyncedPercent is how much of what was written but never synced
	// happens to survive each cut (0: exactly what was synced).
	unsyncedPercent int
	// cutAfter lists the ack counts at which the disk is cloned, all during
	// one run: each cut is a separate power cut of the same history.
	cutAfter []int
	// sharedKeys is the size of the dedupe key pool all submitters draw
	// from; the smaller, the more duplicates (and all-duplicate groups).
	sharedKeys int
	opts       queue.Options
	long       bool // skipped with -short
}

// TestQueue_PowerCut checks the promise end to end: a hook whose Submit
// returned nil survives a power cut taken at an arbitrary moment of a
// concurrent load, keeps its seq and id, is still the answer to its dedupe
// key, and its seq is never handed out again.
func TestQueue_PowerCut(t *testing.T) {
	rounds := []powerCutRound{
		{name: "synced only", seed: 1, cutAfter: []int{200, 400, 600}, sharedKeys: 64},
		{name: "synced only, small groups", seed: 2, cutAfter: []int{200, 400, 600}, sharedKeys: 64,
			opts: queue.Options{MaxBatch: 4}},
		{name: "synced only, duplicate storm", seed: 3, cutAfter: []int{200, 400, 600}, sharedKeys: 4},
		{name: "half of unsynced survives", seed: 4, unsyncedPercent: 50, cutAfter: []int{300, 600}, sharedKeys: 64},
		{name: "most of unsynced survives, delayed groups", seed: 5, unsyncedPercent: 90, cutAfter: []int{300, 600}, sharedKeys: 16,
			opts: queue.Options{MaxDelay: time.Millisecond}},
		{name: "cuts deep into the run", seed: 6, unsyncedPercent: 25, cutAfter: []int{1000, 2500, 4000}, sharedKeys: 64, long: true},
	}
	for _, r := range rounds {
		t.Run(r.name, func(t *testing.T) {
			if r.long && testing.Short() {
				t.Skip("long power-cut round skipped with -short")
			}
			start := time.Now()
			runPowerCut(t, r)
			t.Logf("round took %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

func runPowerCut(t *testing.T, r powerCutRound) {
	fs := vfs.NewCrashableMem()
	st := testutil.OpenStore(t, powerCutDir, fs)
	storeID := st.ID()
	q := testutil.StartQueue(t, st, r.opts)

	// Load: every submitter mixes records without a dedupe key, with a key
	// of its own, and with a key from the shared pool, so that concurrent
	// duplicates (in one group, or of a hook still waiting for its fsync)
	// happen all the time.
	const submitters = 32
	log := newAckLog(r.cutAfter)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(r.seed, uint64(g)))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf(`{"g":%d,"n":%d}`, g, n)
				var key string
				switch rng.IntN(3) {
				case 1:
					key = fmt.Sprintf("own-%d-%d", g, n)
				case 2:
					key = fmt.Sprintf("shared-%d", rng.IntN(r.sharedKeys))
				}
				res, err := q.Submit(context.Background(), rec(body, key))
				if err != nil {
					// Submitters stop before the queue closes and the disk
					// never fails here: every record must be acked.
					t.Errorf("submitter %d: %v", g, err)
					return
				}
				log.add(ack{res: res, dedupe: key, body: body})
			}
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	var cloneRNG *rand.Rand
	if r.unsyncedPercent > 0 {
		cloneRNG = rand.New(rand.NewPCG(r.seed, 0xc0ffee))
	}
	var cuts []powerCut
	for i, want := range r.cutAfter {
		select {
		case <-log.reached[i]:
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d acks after 20s, want %d before cut %d", log.len(), want, i+1)
		}
		// Snapshot first, cut second: everything in the snapshot was acked
		// before the power went, so all of it must be in the clone. Acks
		// recorded after the snapshot may or may not have beaten the cut,
		// and are not checked for presence.
		before := log.snapshot()
		disk := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: r.unsyncedPercent, RNG: cloneRNG})
		cuts = append(cuts, powerCut{before: before, disk: disk})
	}

	stopLoad()
	q.Close()
	if err := st.Close(); err != nil {
		t.Fatalf("close original store: %v", err)
	}
	checkLiveAcks(t, log.snapshot())

	for i, c := range cuts {
		t.Run(fmt.Sprintf("cut %d after %d acks", i+1, len(c.before)), func(t *testing.T) {
			checkAfterPowerCut(t, r, c, storeID)
		})
	}
}

// checkAfterPowerCut reboots on the disk a power cut left and checks that
// nothing acked before it is lost, reused or forgotten by dedupe.
func checkAfterPowerCut(t *testing.T, r powerCutRound, c powerCut, storeID string) {
	st := testutil.OpenStore(t, powerCutDir, c.disk)
	if st.ID() != storeID {
		t.Fatalf("store id after the cut = %q, want %q: the store directory did not survive, every ack is lost", st.ID(), storeID)
	}
	diskMax, diskHooks := scanHooks(t, st)

	var maxAcked uint64
	present, missing := 0, 0
	for _, a := range c.before {
		maxAcked = max(maxAcked, a.res.Seq)
		if problem := ackedHookProblem(st, a); problem != "" {
			missing++
			if missing <= 10 {
				t.Errorf("ack #%d (id %x, seq %d, duplicate %v) lost by the power cut: %s",
					a.n, a.res.ID, a.res.Seq, a.res.Duplicate, problem)
			}
			continue
		}
		present++
	}
	t.Logf("acked before the cut: %d, present after: %d, missing: %d (hooks on disk: %d, highest seq %d; unsynced kept: %d%%)",
		len(c.before), present, missing, diskHooks, diskMax, r.unsyncedPercent)
	if missing > 0 {
		t.Fatalf("%d of %d acked hooks missing after the power cut", missing, len(c.before))
	}

	q := testutil.StartQueue(t, st, r.opts)
	floor := max(maxAcked, diskMax)
	if next := q.Stats().NextSeq; next <= floor {
		t.Fatalf("next seq after the cut = %d, want > %d (highest acked %d, highest on disk %d)", next, floor, maxAcked, diskMax)
	}

	// Every dedupe key acked before the cut still names its original: a
	// provider retrying after the reboot gets the same hook back.
	originals := make(map[string]queue.Result)
	for _, a := range c.before {
		if _, seen := originals[a.dedupe]; a.dedupe != "" && !seen {
			originals[a.dedupe] = a.res
		}
	}
	for key, want := range originals {
		got, err := q.Submit(context.Background(), rec(`{"retry":true}`, key))
		if err != nil {
			t.Fatalf("resubmit %q: %v", key, err)
		}
		if !got.Duplicate || got.ID != want.ID || got.Seq != want.Seq {
			t.Fatalf("resubmit %q after the cut = %+v, want duplicate of id %x seq %d", key, got, want.ID, want.Seq)
		}
	}

	// A fresh hook never reuses a seq the disk holds or a caller was told.
	fresh, err := q.Submit(context.Background(), rec(`{"fresh":true}`, ""))
	if err != nil {
		t.Fatalf("fresh submit after the cut: %v", err)
	}
	if fresh.Duplicate || fresh.Seq <= floor {
		t.Fatalf("fresh submit after the cut = %+v, want a new hook with seq > %d", fresh, floor)
	}
}

// checkLiveAcks checks what the callers were told, before any crash: one
// seq per id, one id per seq, one id per dedupe key (the TTL is an hour, so
// no key expires during the test), and no duplicate answer without a key.
func checkLiveAcks(t *testing.T, acks []ack) {
	t.Helper()
	seqOf := make(map[[16]byte]uint64)
	idOf := make(map[uint64][16]byte)
	keyID := make(map[string][16]byte)
	for _, a := range acks {
		if a.res.Seq == 0 {
			t.Fatalf("ack #%d has seq 0", a.n)
		}
		if s, ok := seqOf[a.res.ID]; ok && s != a.res.Seq {
			t.Fatalf("id %x acked with seqs %d and %d", a.res.ID, s, a.res.Seq)
		}
		if id, ok := idOf[a.res.Seq]; ok && id != a.res.ID {
			t.Fatalf("seq %d acked for two ids %x and %x", a.res.Seq, id, a.res.ID)
		}
		seqOf[a.res.ID], idOf[a.res.Seq] = a.res.Seq, a.res.ID
		if a.dedupe == "" {
			if a.res.Duplicate {
				t.Fatalf("ack #%d without a dedupe key answered duplicate", a.n)
			}
			continue
		}
		if id, ok := keyID[a.dedupe]; ok && id != a.res.ID {
			t.Fatalf("dedupe key %q acked for ids %x and %x", a.dedupe, id, a.res.ID)
		}
		keyID[a.dedupe] = a.res.ID
	}
}

// scanHooks returns the highest seq in the h family and how many hooks it
// holds, checking that each row is the hook its key says.
func scanHooks(t *testing.T, st *store.Store) (maxSeq uint64, n int) {
	t.Helper()
	var bad error
	err := st.Scan([]byte{store.PrefixHook}, []byte{store.PrefixHook + 1}, func(k, v []byte) bool {
		seq, ok := store.ParseU64(k[1:])
		if !ok {
			bad = fmt.Errorf("hook key %x has no seq", k)
			return false
		}
		env, err := store.DecodeEnvelope(v)
		if err != nil {
			bad = fmt.Errorf("hook %d: %w", seq, err)
			return false
		}
		if env.Seq != seq {
			bad = fmt.Errorf("hook row %d holds seq %d", seq, env.Seq)
			return false
		}
		maxSeq = max(maxSeq, seq)
		n++
		return true
	})
	if err != nil {
		t.Fatalf("scan hooks: %v", err)
	}
	if bad != nil {
		t.Fatal(bad)
	}
	return maxSeq, n
}

// ackedHookProblem says why the hook a caller was told about is not intact
// in st, or "" if it is: its id row must point at its seq, and the hook row
// at that seq must hold that id (and, for an original, that body).
func ackedHookProblem(st *store.Store, a ack) string {
	v, err := st.Get(store.HookIDKey(a.res.ID))
	if err != nil {
		return fmt.Sprintf("get id row: %v", err)
	}
	if v == nil {
		return "no id row"
	}
	if seq, ok := store.ParseU64(v); !ok || seq != a.res.Seq {
		return fmt.Sprintf("id row points at seq %d", seq)
	}
	hv, err := st.Get(store.HookKey(a.res.Seq))
	if err != nil {
		return fmt.Sprintf("get hook row: %v", err)
	}
	if hv == nil {
		return "no hook row"
	}
	env, err := store.DecodeEnvelope(hv)
	if err != nil {
		return fmt.Sprintf("hook row: %v", err)
	}
	if env.ID != a.res.ID {
		return fmt.Sprintf("hook row holds id %x", env.ID)
	}
	if !a.res.Duplicate && string(env.Body) != a.body {
		return fmt.Sprintf("hook row holds body %q, want %q", env.Body, a.body)
	}
	return ""
}
