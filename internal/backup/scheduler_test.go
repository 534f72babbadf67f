package backup_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/testutil"
)

// newScheduler is a Scheduler over a file location and a fake store,
// recording its runs and counting the calls of its Close.
func newScheduler(t *testing.T, interval time.Duration, primary backup.Store) (*backup.Scheduler, *runRecord, *atomic.Int32) {
	t.Helper()
	rec := &runRecord{}
	var closed atomic.Int32
	s, err := backup.NewScheduler(backup.SchedulerOptions{
		Backup: backup.Options{
			Primary: primary, Prefix: testPrefix, SigningKey: testKey, Keep: 3,
			Store:   newFakeStore("store-1", gen1),
			TempDir: filepath.Join(t.TempDir(), "tmp", "backup"),
			OnRun:   rec.onRun, Logger: slog.New(slog.DiscardHandler),
		},
		Interval: interval,
		Close:    func() { closed.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, rec, &closed
}

func (r *runRecord) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.results)
}

// TestScheduler_RunBacksUpEveryIntervalUntilCtxEnds: the loop takes a
// backup per interval, each one OK, and Run returns once ctx ends.
func TestScheduler_RunBacksUpEveryIntervalUntilCtxEnds(t *testing.T) {
	s, rec, _ := newScheduler(t, 20*time.Millisecond, locations[0].new(t))
	if age := s.Age(); age != 0 {
		t.Fatalf("Age before any backup = %s, want 0", age)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	testutil.Eventually(t, 10*time.Second, "three periodic backups", func() bool { return rec.count() >= 3 })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its ctx ended")
	}
	for i, r := range rec.results {
		if r != backup.ResultOK {
			t.Fatalf("run %d: %s, want ok", i, r)
		}
	}
	if age := s.Age(); age <= 0 || age > time.Minute {
		t.Fatalf("Age after a backup = %s, want a small positive age", age)
	}
}

// TestScheduler_StopTakesAFinalBackup: Stop ends the loop Start began and
// takes one more backup (a clean stop's), then closes the locations once;
// Close after it does not close them again.
func TestScheduler_StopTakesAFinalBackup(t *testing.T) {
	loc := locations[0].new(t)
	s, rec, closed := newScheduler(t, time.Hour, loc)
	s.Start()
	s.Start() // a second Start does not start a second loop
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if n := rec.count(); n != 1 || rec.last() != backup.ResultOK {
		t.Fatalf("runs %v, want exactly the final one, ok", rec.results)
	}
	if _, err := backup.List(context.Background(), loc, testPrefix); err != nil {
		t.Fatalf("List after the final backup: %v", err)
	}
	s.Close()
	if n := closed.Load(); n != 1 {
		t.Fatalf("locations closed %d times, want 1", n)
	}
}

// TestScheduler_CloseTakesNoBackup: Close (a New that failed) stops the
// loop and closes the locations without a backup.
func TestScheduler_CloseTakesNoBackup(t *testing.T) {
	s, rec, closed := newScheduler(t, time.Hour, locations[0].new(t))
	s.Start()
	s.Close()
	s.Close()
	if n := rec.count(); n != 0 {
		t.Fatalf("runs %v, want none", rec.results)
	}
	if n := closed.Load(); n != 1 {
		t.Fatalf("locations closed %d times, want 1", n)
	}
}

// TestScheduler_FailedStopReportsTheFinalBackup: a final backup that fails
// is Stop's error, and the locations are closed anyway.
func TestScheduler_FailedStopReportsTheFinalBackup(t *testing.T) {
	sp := spy(locations[0].new(t))
	sp.failPut = func(string) error { return errUnreachable }
	s, rec, closed := newScheduler(t, time.Hour, sp)
	err := s.Stop(context.Background())
	if !errors.Is(err, errUnreachable) {
		t.Fatalf("Stop = %v, want the location's error", err)
	}
	if rec.last() != backup.ResultError || closed.Load() != 1 {
		t.Fatalf("runs %v, closed %d; want one error run and the locations closed", rec.results, closed.Load())
	}
	if s.Age() != 0 {
		t.Fatalf("Age = %s after only a failed run, want 0", s.Age())
	}
}

func TestNewScheduler_Refuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		primary  backup.Store
	}{
		{"no interval", 0, locations[0].new(t)},
		{"no primary", time.Hour, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var closed atomic.Int32
			_, err := backup.NewScheduler(backup.SchedulerOptions{
				Backup: backup.Options{
					Primary: tc.primary, SigningKey: testKey, Keep: 1, Store: newFakeStore("s", gen1),
				},
				Interval: tc.interval,
				Close:    func() { closed.Add(1) },
			})
			if err == nil {
				t.Fatal("NewScheduler accepted it")
			}
			if closed.Load() != 1 {
				t.Fatalf("locations closed %d times on a refusal, want 1", closed.Load())
			}
		})
	}
}

// fakeIncarnations is an in-memory Incarnations.
type fakeIncarnations struct {
	inc, from string
	mints     int
	fail      error
}

func (f *fakeIncarnations) IncarnationFrom() (string, error) { return f.from, nil }
func (f *fakeIncarnations) SetIncarnation(inc, from string) error {
	if f.fail != nil {
		return f.fail
	}
	f.inc, f.from = inc, from
	f.mints++
	return nil
}

// TestMintIncarnation: a store without a restore marker is no restored
// store and keeps its incarnation; a restored one gets a new incarnation
// once per backup it was restored from, however many boots find the
// marker again (a refused recovery reboots).
func TestMintIncarnation(t *testing.T) {
	dir := t.TempDir()
	st := &fakeIncarnations{}
	if restored, err := backup.MintIncarnation(st, dir); err != nil || restored || st.mints != 0 {
		t.Fatalf("no marker: restored %v err %v mints %d, want false, nil, 0", restored, err, st.mints)
	}
	writeMarker := func(id string) {
		if err := os.WriteFile(filepath.Join(dir, backup.MarkerName), []byte(id+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeMarker("backup-1")
	for boot := range 2 {
		restored, err := backup.MintIncarnation(st, dir)
		if err != nil || !restored || st.mints != 1 || st.from != "backup-1" || len(st.inc) != 16 {
			t.Fatalf("boot %d: restored %v err %v mints %d from %q inc %q; want one mint for backup-1", boot, restored, err, st.mints, st.from, st.inc)
		}
	}
	first := st.inc
	writeMarker("backup-2")
	if _, err := backup.MintIncarnation(st, dir); err != nil || st.mints != 2 || st.inc == first {
		t.Fatalf("a second restore: err %v mints %d inc %q (was %q); want a new incarnation", err, st.mints, st.inc, first)
	}
	writeMarker("backup-3")
	st.fail = errUnreachable
	if restored, err := backup.MintIncarnation(st, dir); !errors.Is(err, errUnreachable) || !restored {
		t.Fatalf("failed write: restored %v err %v; want true and the store's error", restored, err)
	}
}

// TestRestoreIfEmpty: a store dir with files is left alone, an empty one
// with no backup anywhere starts fresh, and an empty one with a backup is
// restored (marker written).
func TestRestoreIfEmpty(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	loc := locations[0].new(t)

	empty := filepath.Join(t.TempDir(), "store")
	if ok, err := backup.RestoreIfEmpty(ctx, []backup.Store{loc}, testPrefix, empty, testKey, log); err != nil || ok {
		t.Fatalf("no backup: %v %v, want a fresh start", ok, err)
	}
	b, _ := newBackuper(t, loc, nil, newFakeStore("store-1", gen1), nil)
	m := run(t, b)

	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "CURRENT"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := backup.RestoreIfEmpty(ctx, []backup.Store{loc}, testPrefix, full, testKey, log); err != nil || ok {
		t.Fatalf("non-empty dir: %v %v, want it left alone", ok, err)
	}
	if ok, err := backup.RestoreIfEmpty(ctx, []backup.Store{loc}, testPrefix, empty, testKey, log); err != nil || !ok {
		t.Fatalf("empty dir with a backup: %v %v, want restored", ok, err)
	}
	if id, ok, err := backup.ReadMarker(empty); err != nil || !ok || id != m.ID {
		t.Fatalf("marker %q %v %v, want %s", id, ok, err, m.ID)
	}
	bad := spy(loc)
	bad.failGet = func(string) error { return errUnreachable }
	if ok, err := backup.RestoreIfEmpty(ctx, []backup.Store{bad}, testPrefix, filepath.Join(t.TempDir(), "s"), testKey, log); err == nil || ok {
		t.Fatalf("unreadable location: %v %v, want the boot refused", ok, err)
	}
}

func TestNextWait(t *testing.T) {
	const interval = time.Minute
	for _, tc := range []struct {
		prev   time.Duration
		failed bool
		want   time.Duration
	}{
		{interval, false, interval},
		{7 * time.Second, false, interval}, // success resets the backoff
		{interval, true, 30 * time.Second},
		{30 * time.Second, true, 15 * time.Second},
		{8 * time.Second, true, 5 * time.Second}, // never below minRetry
		{5 * time.Second, true, 5 * time.Second},
	} {
		if got := backup.NextWait(tc.prev, interval, tc.failed); got != tc.want {
			t.Errorf("NextWait(%s, %s, failed=%v) = %s, want %s", tc.prev, interval, tc.failed, got, tc.want)
		}
	}
	// An interval below minRetry caps the retry at the interval.
	if got := backup.NextWait(time.Second, 2*time.Second, true); got != 2*time.Second {
		t.Errorf("short interval: %s, want 2s", got)
	}
}
