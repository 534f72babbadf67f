package store

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// The due count is read without a walk while C1 holds, and walked again
// after each event of C2. Each case skews the kept count by a known amount
// (as a lost row would), then runs the event: a read then answers the walk
// (C2) or still the skew (C1: no walk per read, so no cost per scrape).
func TestDueCount_WalkedAgainExactlyWhereC1CannotBeVouchedFor(t *testing.T) {
	const skew = 1000
	tests := []struct {
		name   string
		event  func(t *testing.T, s *Store, failSyncs *errorfs.Toggle)
		walked bool // the read after the event answers a walk
	}{
		{"an applied batch adds its delta", func(t *testing.T, s *Store, _ *errorfs.Toggle) {
			b := s.NewBatch()
			defer b.Close()
			_ = b.Set(DueKey(300, 9, 1), nil, nil)
			if err := s.ApplySync(b); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a reopen", func(t *testing.T, s *Store, _ *errorfs.Toggle) {
			if err := s.Reopen(); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a failed apply", func(t *testing.T, s *Store, failSyncs *errorfs.Toggle) {
			failSyncs.On()
			defer failSyncs.Off()
			b := s.NewBatch()
			defer b.Close()
			_ = b.Set(DueKey(300, 9, 1), nil, nil)
			if err := s.ApplySync(b); err == nil {
				t.Fatal("apply through a failed fsync succeeded")
			}
		}, true},
		{"the fence's DeleteRows", func(t *testing.T, s *Store, _ *errorfs.Toggle) {
			b := s.NewBatch()
			defer b.Close()
			_ = b.DeleteRows([]Row{{Key: DueKey(100, 1, 1)}, {Key: DueKey(100, 7, 1)}}) // the second is absent
			if err := s.ApplySync(b); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			failSyncs := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
				switch op.Kind {
				case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
				default:
					return nil
				}
				if strings.HasSuffix(op.Path, ".log") {
					return errorfs.ErrInjected
				}
				return nil
			})}
			s, err := Open(Options{Dir: "/store", FS: errorfs.Wrap(vfs.NewMem(), failSyncs),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			b := s.NewBatch()
			_ = b.Set(DueKey(100, 1, 1), nil, nil)
			_ = b.Set(DueKey(200, 2, 1), nil, nil)
			if err := s.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			_ = b.Close()
			if n, err := s.DueRows(); err != nil || n != 2 {
				t.Fatalf("DueRows = %d %v, want 2", n, err)
			}
			s.due.n.Add(skew)
			tc.event(t, s, failSyncs)
			walk, err := s.CountDue()
			if err != nil {
				t.Fatal(err)
			}
			want := walk
			if !tc.walked {
				want += skew
			}
			if got, err := s.DueRows(); err != nil || got != want {
				t.Fatalf("DueRows = %d %v, want %d (a walk counts %d; walked again: %v)", got, err, want, walk, tc.walked)
			}
		})
	}
}

// C3: a recount running while batches apply counts every batch once, by
// the walk or by its delta. Writers add and remove due rows while the count
// is made stale and read again and again; at the end it equals a walk.
func TestDueCount_RecountsDuringAppliesCountEveryBatchOnce(t *testing.T) {
	s, err := Open(Options{Dir: "/store", FS: vfs.NewMem(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writers, batches = 4, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range batches {
				b := s.NewBatch()
				seq := uint64(w*batches + i)
				_ = b.Set(DueKey(int64(i), seq, 1), nil, nil)
				_ = b.Set(DueKey(int64(i), seq, 2), nil, nil)
				if i%3 == 0 && i > 0 {
					_ = b.Delete(DueKey(int64(i-1), seq-1, 2), nil)
				}
				if err := s.Apply(b); err != nil {
					t.Error(err)
				}
				_ = b.Close()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		s.due.markStale()
		if _, err := s.DueRows(); err != nil {
			t.Fatal(err)
		}
	}
	walk, err := s.CountDue()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.DueRows(); err != nil || got != walk {
		t.Fatalf("DueRows = %d %v, a walk counts %d", got, err, walk)
	}
}
