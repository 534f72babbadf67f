package dispatch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/archive"
	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

var archiveKey = []byte("dispatch-archive-test-key")

// fileArchive is an archive on a file:// location in a temp dir (the
// backup package's file store, as archive.url: file:///… opens it).
func fileArchive(t *testing.T, dir string) (*archive.Archive, backup.Store) {
	t.Helper()
	bs, err := backup.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := archive.New(archive.Options{Store: bs, Prefix: "node-1", SigningKey: archiveKey, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return a, bs
}

func routeOut(source string) ([]store.DueSink, bool) {
	return []store.DueSink{{Num: 0, ID: "out"}}, source == "src"
}

func archiveOptions(clk *clock, a dispatch.Archiver) dispatch.Options {
	return dispatch.Options{Retention: time.Hour, SweepInterval: 5 * time.Millisecond, Now: clk.now,
		Archive: a, Route: routeOut}
}

// sweptPast moves the clock past an hour's retention and waits until the
// sweep has taken every hook row (archived and removed, with an archive).
func sweptPast(t *testing.T, e *env, clk *clock) {
	t.Helper()
	clk.advance(61 * time.Minute)
	testutil.Eventually(t, 10*time.Second, "every hook swept", func() bool {
		n, _ := e.st.Count([]byte{store.PrefixHook})
		return n == 0
	})
}

func catalogue(t *testing.T, dir string) archive.Catalogue {
	t.Helper()
	a, _ := fileArchive(t, dir) // a fresh reader: what is on the disk
	c, err := a.Catalogue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitJob(t *testing.T, d *dispatch.Dispatcher, id, state string) dispatch.Job {
	t.Helper()
	var j dispatch.Job
	testutil.Eventually(t, 10*time.Second, "job "+state, func() bool {
		var err error
		j, err = d.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return j.State == state
	})
	return j
}

// End to end on file://: a delivered hook past its retention is archived,
// its local rows go, the listing no longer has it, and an archive replay
// delivers it again with the same id and idempotency key.
func TestArchive_SweepThenReplay(t *testing.T) {
	clk := &clock{}
	dir := t.TempDir()
	a, _ := fileArchive(t, dir)
	s := newScripted()
	e := setup(t, s, archiveOptions(clk, a))
	res := e.submit(t, "archived body", "order-7")
	first := s.next(t)
	wantState(t, e.d, 1, "delivered")

	sweptPast(t, e, clk)
	for fam, n := range rows(t, e.st) {
		if n != 0 {
			t.Errorf("family %q: %d rows left after the archive sweep", fam, n)
		}
	}
	if hs, _, err := e.d.Hooks(dispatch.HookFilter{}); err != nil || len(hs) != 0 {
		t.Fatalf("listing after the sweep = %v, %v; want empty", hs, err)
	}
	cat := catalogue(t, dir)
	if len(cat.Segments) != 1 || cat.Segments[0].Count != 1 || cat.Segments[0].FirstSeq != res.Seq {
		t.Fatalf("catalogue = %+v, want one segment holding seq %d", cat.Segments, res.Seq)
	}
	if g := e.d.Gauges(); g.ArchivedHooks != 1 || g.HistoryHooks != 0 {
		t.Fatalf("gauges = %+v", g)
	}

	j, err := e.d.CreateJob(context.Background(), dispatch.JobSpec{Kind: "archive",
		Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	again := s.next(t)
	if again.ID != first.ID || again.IdempotencyKey() != first.IdempotencyKey() || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("replayed %s (%s, %q), want %s (%s, %q)", again.ID, again.IdempotencyKey(), again.Body,
			first.ID, first.IdempotencyKey(), first.Body)
	}
	if again.ReplayID != j.ID {
		t.Fatalf("replay id = %q, want the job's %q", again.ReplayID, j.ID)
	}
	if done := waitJob(t, e.d, j.ID, dispatch.JobDone); done.Moved != 1 || done.Skipped != 0 {
		t.Fatalf("job = %+v, want 1 moved", done)
	}
	hs := wantState(t, e.d, 1, "delivered")
	if hs[0].ID != uuid.UUID(res.ID).String() || hs[0].Seq != res.Seq {
		t.Fatalf("listed %+v, want id %s seq %d", hs[0], uuid.UUID(res.ID), res.Seq)
	}

	// A range that holds nothing replays nothing.
	j2, err := e.d.CreateJob(context.Background(), dispatch.JobSpec{Kind: "archive",
		Since: time.Now().Add(-3 * time.Hour), Until: time.Now().Add(-2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if done := waitJob(t, e.d, j2.ID, dispatch.JobDone); done.Moved != 0 {
		t.Fatalf("out-of-range job moved %d", done.Moved)
	}
}

// A segment changed in the object store is refused by replay: the job
// fails naming the signature, and nothing of it is written back.
func TestArchive_TamperedSegmentRefused(t *testing.T) {
	clk := &clock{}
	dir := t.TempDir()
	a, bs := fileArchive(t, dir)
	s := newScripted()
	e := setup(t, s, archiveOptions(clk, a))
	e.submit(t, "original body", "")
	s.next(t)
	wantState(t, e.d, 1, "delivered")
	sweptPast(t, e, clk)
	key := catalogue(t, dir).Segments[0].Key
	r, err := bs.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := io.ReadAll(r)
	_ = r.Close()
	// Flip one byte inside the signed payload (not the signature).
	i := bytes.Index(obj, []byte(`"tenant":"default"`))
	if i < 0 {
		t.Fatal("test did not find the tenant to tamper with")
	}
	obj[i+len(`"tenant":"`)] = 'D'
	if err := bs.Put(context.Background(), key, bytes.NewReader(obj)); err != nil {
		t.Fatal(err)
	}
	j, err := e.d.CreateJob(context.Background(), dispatch.JobSpec{Kind: "archive"})
	if err != nil {
		t.Fatal(err)
	}
	failed := waitJob(t, e.d, j.ID, dispatch.JobFailed)
	if !strings.Contains(failed.Error, "signature") || failed.Moved != 0 {
		t.Fatalf("job = %+v, want failed on the signature, nothing moved", failed)
	}
	if n, _ := e.st.Count([]byte{store.PrefixHook}); n != 0 {
		t.Fatalf("%d hooks written back from a tampered segment", n)
	}
}

// A power cut between the segment upload and the local delete loses
// nothing (the rows are still there) and archives nothing twice: the
// restarted sweep writes the same segment key again, with the hooks
// delivered since, and the catalogue lists each hook once.
func TestArchive_CrashBetweenUploadAndDelete(t *testing.T) {
	clk := &clock{}
	dir := t.TempDir()
	fs := vfs.NewCrashableMem()
	st := testutil.OpenStore(t, "store", fs)
	var d *dispatch.Dispatcher
	q := testutil.StartQueue(t, st, queue.Options{OnDurable: func() {
		if d != nil {
			d.Wake()
		}
	}})
	a, _ := fileArchive(t, dir)
	o := archiveOptions(clk, a)
	o.Targets = map[uint16]dispatch.Target{0: {ID: "out", Sink: newScripted()}}
	o.Durable, o.OnReclaim, o.Poll, o.Logger = q.Durable, q.Reclaimed, 10*time.Millisecond, testutil.Logger(t)
	d = dispatch.New(st, o)
	crashed := make(chan *vfs.MemFS, 1)
	errCrash := errors.New("power cut")
	dispatch.SetAfterArchive(d, func() error {
		select {
		case crashed <- fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}):
		default:
		}
		return errCrash // nothing after the upload happens
	})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, q: q, d: d}
	want := map[uint64]bool{}
	for _, b := range []string{"one", "two", "three"} {
		want[e.submit(t, b, "").Seq] = true
	}
	wantState(t, d, 3, "delivered")
	clk.advance(61 * time.Minute)
	var disk *vfs.MemFS
	select {
	case disk = <-crashed:
	case <-time.After(10 * time.Second):
		t.Fatal("no segment written")
	}
	d.Stop()
	if c := catalogue(t, dir); len(c.Segments) != 1 || c.Segments[0].Count != 3 {
		t.Fatalf("catalogue after the upload = %+v", c.Segments)
	}

	st2 := testutil.OpenStore(t, "store", disk)
	var d2 *dispatch.Dispatcher
	q2 := testutil.StartQueue(t, st2, queue.Options{OnDurable: func() {
		if d2 != nil {
			d2.Wake()
		}
	}})
	if n, _ := st2.Count([]byte{store.PrefixRetained}); n != 3 {
		t.Fatalf("after the crash %d retained hooks, want the 3 still local", n)
	}
	a2, _ := fileArchive(t, dir) // the restarted process reads the catalogue again
	o2 := archiveOptions(clk, a2)
	o2.Targets = map[uint16]dispatch.Target{0: {ID: "out", Sink: newScripted()}}
	o2.Durable, o2.OnReclaim, o2.Poll, o2.Logger = q2.Durable, q2.Reclaimed, 10*time.Millisecond, testutil.Logger(t)
	o2.SweepInterval = time.Hour // hold the sweep until a fourth hook is delivered too
	d2 = dispatch.New(st2, o2)
	if err := d2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.Stop)
	e2 := &env{st: st2, q: q2, d: d2}
	want[e2.submit(t, "four", "").Seq] = true
	wantState(t, d2, 4, "delivered")
	d2.Stop()
	clk.advance(61 * time.Minute)
	o2.SweepInterval = 5 * time.Millisecond
	d3 := dispatch.New(st2, o2)
	if err := d3.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d3.Stop)
	testutil.Eventually(t, 10*time.Second, "every hook archived and removed", func() bool {
		n, _ := st2.Count([]byte{store.PrefixHook})
		return n == 0
	})
	seen := map[uint64]int{}
	ar, _ := fileArchive(t, dir)
	c := catalogue(t, dir)
	for _, en := range c.Segments {
		seg, err := ar.ReadSegment(context.Background(), en)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range seg.Hooks {
			seen[h.Seq]++
		}
	}
	for seq := range want {
		if seen[seq] != 1 {
			t.Errorf("seq %d archived %d times, want once", seq, seen[seq])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("archive holds seqs %v, want %v", seen, want)
	}
}

// A job resumes a segment written again where it left it (invariant 5).
// A sweep whose removal did not happen writes the same key again with the
// hooks due since (A2). A job that had read the first version kept it, its
// cursor reached that version's end, and the catalogue's entry counted
// more: the job stayed running for good and the new hooks were never
// replayed (found by a helper's review). The job passes the new version
// from its start: a1, which it had passed while it was local, is archived
// now and written back too, and counted once.
func TestArchive_AJobResumesASegmentWrittenAgain(t *testing.T) {
	clk := &clock{}
	dir := t.TempDir()
	a, _ := fileArchive(t, dir)
	s := newScripted()
	o := archiveOptions(clk, a)
	var removalFails atomic.Bool
	removalFails.Store(true)
	e := setupBefore(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, o, queue.Options{}, true, func(d *dispatch.Dispatcher) {
		dispatch.SetAfterArchive(d, func() error {
			if removalFails.Load() {
				return errors.New("the removal does not happen (a crash, a failed store write)")
			}
			return nil
		})
	})
	ctx := context.Background()
	var ids [][16]byte
	for _, body := range []string{"a1", "a2", "a3"} {
		ids = append(ids, e.submit(t, body, "").ID)
		s.next(t)
	}
	wantState(t, e.d, 3, "delivered")
	clk.advance(61 * time.Minute)
	testutil.Eventually(t, 10*time.Second, "a segment of 3 hooks", func() bool {
		c := catalogue(t, dir)
		return len(c.Segments) == 1 && c.Segments[0].Count == 3
	})
	j, err := e.d.CreateJob(ctx, dispatch.JobSpec{Kind: "archive", Rate: 1,
		Since: time.Now().Add(-2 * time.Hour), Until: time.Now().Add(5 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	// At one hook a second, the job's first step reads the segment and
	// passes a1, still local.
	waitSkipped := func() bool {
		g, err := e.d.GetJob(ctx, j.ID)
		return err == nil && g.Skipped >= 1
	}
	testutil.Eventually(t, 10*time.Second, "the job passed the first hook", waitSkipped)
	if _, err := e.d.SetJobState(ctx, j.ID, dispatch.JobPaused); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, e.submit(t, "a4", "").ID)
	s.next(t)
	wantState(t, e.d, 4, "delivered")
	clk.advance(61 * time.Minute)
	testutil.Eventually(t, 10*time.Second, "the segment written again with 4 hooks", func() bool {
		c := catalogue(t, dir)
		return len(c.Segments) == 1 && c.Segments[0].Count == 4
	})
	removalFails.Store(false)
	testutil.Eventually(t, 10*time.Second, "all four archived and removed", func() bool {
		n, _ := e.st.Count([]byte{store.PrefixHook})
		return n == 0
	})
	if _, err := e.d.SetJobState(ctx, j.ID, dispatch.JobRunning); err != nil {
		t.Fatal(err)
	}
	done := waitJob(t, e.d, j.ID, dispatch.JobDone)
	if done.Moved != 4 || done.Skipped != 1 {
		t.Errorf("job = moved %d, skipped %d; want 4 moved (a1..a4), 1 skipped (a1, local when first passed)", done.Moved, done.Skipped)
	}
	for i, id := range ids {
		if local, err := e.st.HookIDStored(id); err != nil || !local {
			t.Errorf("a%d stored after the job: %v (%v), want true", i+1, local, err)
		}
	}
}

// staleCatalogue is the archive with its catalogue read from before the
// last write while stale is set: what a reader between Write's segment put
// and its catalogue put sees (a test double: the window is too short to
// hit on a real store on purpose).
type staleCatalogue struct {
	*archive.Archive
	stale atomic.Pointer[archive.Catalogue]
}

func (s *staleCatalogue) Catalogue(ctx context.Context) (archive.Catalogue, error) {
	if c := s.stale.Load(); c != nil {
		return *c, nil
	}
	return s.Archive.Catalogue(ctx)
}

// A job that meets a segment written again since the catalogue it read
// (archive.ErrStale) reads it again at the next tick instead of failing as
// on a tampered segment (invariant 6; found by a helper's review).
func TestArchive_AJobReadsASegmentWrittenAgainMidReadAgain(t *testing.T) {
	clk := &clock{}
	dir := t.TempDir()
	a, _ := fileArchive(t, dir)
	sc := &staleCatalogue{Archive: a}
	s := newScripted()
	o := archiveOptions(clk, sc)
	rec := testutil.NewLogRecorder()
	o.Logger = slog.New(rec)
	var removalFails atomic.Bool
	removalFails.Store(true)
	e := setupBefore(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, o, queue.Options{}, true, func(d *dispatch.Dispatcher) {
		dispatch.SetAfterArchive(d, func() error {
			if removalFails.Load() {
				return errors.New("the removal does not happen")
			}
			return nil
		})
	})
	ctx := context.Background()
	e.submit(t, "b1", "")
	s.next(t)
	wantState(t, e.d, 1, "delivered")
	clk.advance(61 * time.Minute)
	var first archive.Catalogue
	testutil.Eventually(t, 10*time.Second, "a segment of 1 hook", func() bool {
		c, err := a.Catalogue(ctx)
		first = c
		return err == nil && len(c.Segments) == 1
	})
	// The next pass writes the key again (another segment: its time
	// differs); a reader of the first catalogue meets the new bytes.
	testutil.Eventually(t, 10*time.Second, "the segment written again", func() bool {
		c, err := a.Catalogue(ctx)
		return err == nil && len(c.Segments) == 1 && c.Segments[0].SHA256 != first.Segments[0].SHA256
	})
	removalFails.Store(false)
	testutil.Eventually(t, 10*time.Second, "archived and removed", func() bool {
		n, _ := e.st.Count([]byte{store.PrefixHook})
		return n == 0
	})
	sc.stale.Store(&first)
	j, err := e.d.CreateJob(ctx, dispatch.JobSpec{Kind: "archive", Rate: 100,
		Since: time.Now().Add(-2 * time.Hour), Until: time.Now().Add(5 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var g dispatch.Job
	testutil.Eventually(t, 10*time.Second, "the job met the stale segment", func() bool {
		g, err = e.d.GetJob(ctx, j.ID)
		return err == nil && (g.State == dispatch.JobFailed || len(rec.Matching("written again since the catalogue was read")) > 0)
	})
	if g.State == dispatch.JobFailed {
		t.Fatalf("the job failed on a segment written again: %s", g.Error)
	}
	sc.stale.Store(nil)
	if done := waitJob(t, e.d, j.ID, dispatch.JobDone); done.Moved != 1 {
		t.Fatalf("job = %+v, want 1 moved", done)
	}
}

// heldReads is the archive with its segment reads held until released: a
// slow or unreachable object store (a test double: the stall is the
// point).
type heldReads struct {
	*archive.Archive
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *heldReads) ReadSegment(ctx context.Context, e archive.Entry) (archive.Segment, error) {
	if h.hold.Load() {
		h.entered <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return archive.Segment{}, ctx.Err()
		}
	}
	return h.Archive.ReadSegment(ctx, e)
}

// An archive job's segment read runs off the dispatch loop (invariant 7):
// while it stalls, a fresh hook is delivered. Before, the read ran on the
// loop, and nothing was delivered, recorded or answered to an operator
// until it returned, up to a minute a tick (found by a helper's review).
func TestArchive_AJobsSlowReadDoesNotHoldDelivery(t *testing.T) {
	clk := &clock{}
	a, _ := fileArchive(t, t.TempDir())
	h := &heldReads{Archive: a, entered: make(chan struct{}, 16), release: make(chan struct{})}
	s := newScripted()
	e := setup(t, s, archiveOptions(clk, h))
	e.submit(t, "old", "")
	s.next(t)
	wantState(t, e.d, 1, "delivered")
	sweptPast(t, e, clk)
	h.hold.Store(true)
	j, err := e.d.CreateJob(context.Background(), dispatch.JobSpec{Kind: "archive",
		Since: time.Now().Add(-2 * time.Hour), Until: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Receive(t, h.entered, "the job never read its segment")
	fresh := e.submit(t, "fresh", "")
	if m := s.next(t); m.Seq != fresh.Seq {
		t.Fatalf("delivered seq %d while the read stalls, want the fresh hook's %d", m.Seq, fresh.Seq)
	}
	h.hold.Store(false)
	close(h.release)
	if done := waitJob(t, e.d, j.ID, dispatch.JobDone); done.Moved != 1 {
		t.Fatalf("job = %+v, want 1 moved", done)
	}
	if m := s.next(t); m.Body == nil || string(m.Body) != "old" {
		t.Fatalf("replayed %q, want the archived hook", m.Body)
	}
}

// A job finishes a segment that a sweep keeps writing again (its removal
// failing every pass, so every pass writes the key anew: the segment's
// bytes carry their write time), and counts each hook once (invariant 5).
// Before, each rewrite sent the job back to the segment's start at the
// rate's cost, so a job slower than the sweep never passed its first
// hooks, and a second rewrite while the job was still in the part it had
// passed counted those hooks again (both found by a helper's review).
func TestArchive_AJobFinishesASegmentWrittenAgainEveryPass(t *testing.T) {
	clk := &clock{}
	dir := t.TempDir()
	a, _ := fileArchive(t, dir)
	s := newScripted()
	o := archiveOptions(clk, a)
	o.SweepInterval = 300 * time.Millisecond
	e := setupBefore(t, map[uint16]dispatch.Target{0: {ID: "out", Sink: s}}, o, queue.Options{}, true, func(d *dispatch.Dispatcher) {
		dispatch.SetAfterArchive(d, func() error { return errors.New("the removal does not happen") })
	})
	ctx := context.Background()
	const hooks = 6
	for i := range hooks {
		e.submit(t, fmt.Sprintf("a%d", i+1), "")
		s.next(t)
	}
	wantState(t, e.d, hooks, "delivered")
	clk.advance(61 * time.Minute)
	var first string
	testutil.Eventually(t, 10*time.Second, "a segment of every hook", func() bool {
		c := catalogue(t, dir)
		if len(c.Segments) == 1 && c.Segments[0].Count == hooks {
			first = c.Segments[0].SHA256
			return true
		}
		return false
	})
	testutil.Eventually(t, 10*time.Second, "the segment written again", func() bool {
		c := catalogue(t, dir)
		return len(c.Segments) == 1 && c.Segments[0].SHA256 != first
	})
	// Two hooks a second against a rewrite every 0.3 s: the hooks are all
	// still local (the removal fails), so the job passes them all.
	j, err := e.d.CreateJob(ctx, dispatch.JobSpec{Kind: "archive", Rate: 2,
		Since: time.Now().Add(-2 * time.Hour), Until: time.Now().Add(5 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	done := waitJob(t, e.d, j.ID, dispatch.JobDone)
	if done.Moved != 0 || done.Skipped != hooks {
		t.Fatalf("job = moved %d, skipped %d; want 0 moved, %d skipped (each hook counted once)", done.Moved, done.Skipped, hooks)
	}
}
