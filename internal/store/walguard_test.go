package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

// walFaults fails every WAL (*.log) write or sync of the kinds armed.
func walFaults(kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		for _, k := range kinds {
			if op.Kind == k {
				return errorfs.ErrInjected
			}
		}
		return nil
	})}
}

// fillUntilAnApplyFails applies unsynced batches of one size-byte row
// each until one fails, and returns its error; with a 1 MiB memtable the
// log switches long before the 8 MiB after which it fails the test.
func fillUntilAnApplyFails(t *testing.T, st *store.Store, size int) error {
	t.Helper()
	value := make([]byte, size)
	for i := 0; ; i++ {
		if i*size > 8<<20 {
			t.Fatalf("no apply failed after %d bytes written with a 1 MiB memtable and the WAL failing", i*size)
		}
		b := st.NewBatch()
		_ = b.Set([]byte(fmt.Sprintf("fill/%06d", i)), value, nil)
		err := st.Apply(b)
		_ = b.Close()
		if err != nil {
			return err
		}
	}
}

// reopenKeepsTheAckedRow reopens st once its WAL fault healed, checks the
// row "acked" synced before the fault, and takes a synced write ("later").
func reopenKeepsTheAckedRow(t *testing.T, st *store.Store) {
	t.Helper()
	if err := st.Reopen(); err != nil {
		t.Fatalf("reopen after the fault healed: %v", err)
	}
	if v, err := st.Get([]byte("acked")); err != nil || string(v) != "durable before the fault" {
		t.Fatalf("after the reopen, the row synced before the fault: %q, %v", v, err)
	}
	storePut(t, st, "later", "synced after the reopen")
}

// nthWALWrite fails, once armed, the WAL writes from the nth on.
type nthWALWrite struct {
	mu      sync.Mutex
	armed   bool
	n, seen int
}

func (f *nthWALWrite) arm(n int)      { f.mu.Lock(); f.armed, f.n, f.seen = true, n, 0; f.mu.Unlock() }
func (f *nthWALWrite) off()           { f.mu.Lock(); f.armed = false; f.mu.Unlock() }
func (f *nthWALWrite) String() string { return "the nth WAL write on fails" }

func (f *nthWALWrite) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") || (op.Kind != errorfs.OpFileWrite && op.Kind != errorfs.OpFileWriteAt) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed {
		return nil
	}
	f.seen++
	if f.seen >= f.n {
		return errorfs.ErrInjected
	}
	return nil
}

// A WAL fault that Pebble meets while it switches to a new WAL (a full
// memtable: the old log is closed, and the close flushes and syncs it)
// must fail the store, as every other failed WAL write or sync does, and
// not the process: Pebble panics when that close fails, with its own mutex
// released, which ends in a fatal error no recover can catch. Found by
// the simulator (seed 203506: a dispatcher's unsynced apply filled the
// memtable just after two WAL fsyncs were armed to fail).
func TestStore_AWALFaultAtTheLogSwitchFailsTheStoreNotTheProcess(t *testing.T) {
	syncs := []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}
	for _, tc := range []struct {
		name, dir string
		kinds     []errorfs.OpKind
	}{
		{"sync", "/store", syncs},
		{"write", "/store", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}},
		{"create", "/store", []errorfs.OpKind{errorfs.OpCreate, errorfs.OpReuseForWrite}},
		// Pebble cleans the names it opens; the guard must match them.
		{"sync, dir given with a trailing slash", "/store/", syncs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faults := walFaults(tc.kinds...)
			st, err := store.Open(store.Options{Dir: tc.dir, FS: errorfs.Wrap(vfs.NewMem(), faults),
				MemTableSize: 1 << 20, Logger: testutil.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			storePut(t, st, "acked", "durable before the fault")

			// Armed, then only unsynced applies: the first WAL sync Pebble
			// makes is the one that closes the full memtable's log.
			faults.On()
			if applyErr := fillUntilAnApplyFails(t, st, 64<<10); !errors.Is(applyErr, store.ErrFailed) {
				t.Fatalf("apply after the WAL failed: %v, want store.ErrFailed", applyErr)
			}
			// The generation stays failed: nothing it says is trusted.
			b := st.NewBatch()
			_ = b.Set([]byte("after"), []byte("x"), nil)
			if err := st.ApplySync(b); !errors.Is(err, store.ErrFailed) {
				t.Fatalf("a synced apply on the failed generation: %v, want store.ErrFailed", err)
			}
			_ = b.Close()

			faults.Off()
			reopenKeepsTheAckedRow(t, st)
		})
	}
}

// A WAL fault in the middle of the log (the nth write after it is armed,
// so that earlier writes of the same log landed) leaves a torn log. The
// store must still reopen, and open again from the files alone (a restart
// or a power cut), with every synced row: Pebble reads a torn end only in
// the newest log, so no newer log may be created on the disk after the
// fault (F1).
func TestStore_AfterAWALFaultInTheLogTheStoreReopensAndOpens(t *testing.T) {
	for _, size := range []int{1000, 20 << 10, 64 << 10} {
		for n := 1; n <= 8; n++ {
			t.Run(fmt.Sprintf("value=%d/write=%d", size, n), func(t *testing.T) {
				fs := vfs.NewMem()
				faults := &nthWALWrite{}
				opts := store.Options{Dir: "/store", FS: errorfs.Wrap(fs, faults),
					MemTableSize: 1 << 20, Logger: testutil.Logger(t)}
				st, err := store.Open(opts)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				storePut(t, st, "acked", "durable before the fault")
				faults.arm(n)
				if err := fillUntilAnApplyFails(t, st, size); !errors.Is(err, store.ErrFailed) {
					t.Fatalf("apply: %v, want store.ErrFailed", err)
				}
				value := make([]byte, size)
				// Writes the failed generation takes before the reopen.
				for i := range 64 {
					b := st.NewBatch()
					_ = b.Set([]byte(fmt.Sprintf("after/%06d", i)), value, nil)
					_ = st.Apply(b)
					_ = b.Close()
				}
				faults.off()
				reopenKeepsTheAckedRow(t, st)
				if err := st.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				// A fresh open of the same files, as a restart makes.
				st2, err := store.Open(opts)
				if err != nil {
					t.Fatalf("open after the reopen: %v", err)
				}
				defer st2.Close()
				for k, want := range map[string]string{"acked": "durable before the fault", "later": "synced after the reopen"} {
					if v, err := st2.Get([]byte(k)); err != nil || string(v) != want {
						t.Fatalf("after a fresh open, %s: %q, %v", k, v, err)
					}
				}
			})
		}
	}
}

// A checkpoint's copies of the logs are not the store's logs: a fault
// writing them fails the checkpoint, not the live store (F1 guards only
// the store's own directory), and a failed generation checkpoints nothing.
func TestStore_ACheckpointsLogFaultFailsTheCheckpointNotTheStore(t *testing.T) {
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasPrefix(op.Path, "/ckpt") && strings.HasSuffix(op.Path, ".log") &&
			(op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) {
			return errorfs.ErrInjected
		}
		return nil
	})
	st, err := store.Open(store.Options{Dir: "/store", FS: errorfs.Wrap(vfs.NewMem(), inj),
		Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storePut(t, st, "acked", "v")
	if err := st.Checkpoint("/ckpt"); err == nil {
		t.Fatal("a checkpoint whose log copy failed reported success")
	}
	storePut(t, st, "after", "the live store still takes synced writes")

	faults := walFaults(errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
	st2, err := store.Open(store.Options{Dir: "/store", FS: errorfs.Wrap(vfs.NewMem(), faults),
		Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	faults.On()
	b := st2.NewBatch()
	_ = b.Set([]byte("k"), []byte("v"), nil)
	if err := st2.ApplySync(b); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("synced apply with the WAL failing: %v, want store.ErrFailed", err)
	}
	_ = b.Close()
	if err := st2.Checkpoint("/ckpt2"); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("checkpoint of a failed generation: %v, want store.ErrFailed", err)
	}
}

// closeFaultFS fails the close of a WAL file while armed (errorfs never
// fails a close).
type closeFaultFS struct {
	vfs.FS
	armed atomic.Bool
}

type closeFaultFile struct {
	vfs.File
	fs *closeFaultFS
}

func (f *closeFaultFile) Close() error {
	err := f.File.Close()
	if f.fs.armed.Load() {
		return errors.New("injected close fault")
	}
	return err
}

func (fs *closeFaultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &closeFaultFile{File: f, fs: fs}, nil
}

func (fs *closeFaultFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	if err != nil {
		return f, err
	}
	return &closeFaultFile{File: f, fs: fs}, nil
}

// A failed close of the old log at the switch is a fault like a failed
// sync: Pebble panics on it too (F1).
func TestStore_AFailedWALCloseAtTheLogSwitchFailsTheStoreNotTheProcess(t *testing.T) {
	fs := &closeFaultFS{FS: vfs.NewMem()}
	st, err := store.Open(store.Options{Dir: "/store", FS: fs,
		MemTableSize: 1 << 20, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storePut(t, st, "acked", "durable before the fault")
	fs.armed.Store(true)
	if applyErr := fillUntilAnApplyFails(t, st, 64<<10); !errors.Is(applyErr, store.ErrFailed) {
		t.Fatalf("apply after a WAL close failed: %v, want store.ErrFailed", applyErr)
	}
	fs.armed.Store(false)
	if err := st.Reopen(); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if v, err := st.Get([]byte("acked")); err != nil || string(v) != "durable before the fault" {
		t.Fatalf("the row synced before the fault: %q, %v", v, err)
	}
}

// A power cut at any point after a WAL fault (taken as crash clones of the
// disk: only synced data, or a seeded share of the rest) keeps every row
// synced before the fault, and every clone opens (F1: the torn log stays
// the newest one on the disk).
func TestStore_APowerCutAfterAWALFaultKeepsEverySyncedRow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{
		{"sync", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}},
		{"write", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}},
	} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				mem := vfs.NewCrashableMem()
				faults := walFaults(tc.kinds...)
				opts := store.Options{Dir: "/store", FS: errorfs.Wrap(mem, faults),
					MemTableSize: 1 << 20, Logger: testutil.Logger(t)}
				st, err := store.Open(opts)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				// Enough synced rows for several log switches (and recycled logs).
				value := make([]byte, 1024)
				const synced = 3000
				for i := 0; i < synced; i += 100 {
					b := st.NewBatch()
					for j := i; j < i+100; j++ {
						_ = b.Set([]byte(fmt.Sprintf("synced/%06d", j)), value, nil)
					}
					if err := st.ApplySync(b); err != nil {
						t.Fatal(err)
					}
					_ = b.Close()
				}
				var clones []*vfs.MemFS
				clone := func() {
					clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}))
				}
				faults.On()
				big := make([]byte, 16<<10)
				for i := range 400 {
					b := st.NewBatch()
					_ = b.Set([]byte(fmt.Sprintf("fill/%06d", i)), big, nil)
					_ = st.Apply(b)
					_ = b.Close()
					if i%50 == 0 {
						clone()
					}
				}
				clone()
				faults.Off()
				if err := st.Reopen(); err != nil {
					t.Fatalf("reopen: %v", err)
				}
				clone()
				storePut(t, st, "later", "synced after the reopen")
				clone()
				for i, fs := range clones {
					c, err := store.Open(store.Options{Dir: "/store", FS: fs, Logger: opts.Logger})
					if err != nil {
						t.Fatalf("clone %d does not open: %v", i, err)
					}
					for j := range synced {
						if v, err := c.Get([]byte(fmt.Sprintf("synced/%06d", j))); err != nil || len(v) != len(value) {
							_ = c.Close()
							t.Fatalf("clone %d lost synced/%06d: %d bytes, %v", i, j, len(v), err)
						}
					}
					_ = c.Close()
				}
			})
		}
	}
}

// A store opened after an open whose new log could not be created (a
// fence's Reopen, or a restart, on a disk that refused the file) found no
// log to replay: that open's flush had emptied the logs it replayed. Pebble
// writes its manifest only at its first version edit, a flush's, and
// Checkpoint copies the manifest up to the size this generation wrote: none.
// The backup then held an empty manifest and never opened (simulator, log
// creation faults: seed 95). Every checkpoint must open with the rows
// synced before it.
func TestStore_ACheckpointAfterAnOpenWhoseLogCreateFailedOpens(t *testing.T) {
	for _, tc := range []struct {
		name string
		// again fails an open of st's directory with the log create failing,
		// then opens it with the faults off.
		again func(t *testing.T, st *store.Store, open func() (*store.Store, error), faults *errorfs.Toggle) *store.Store
	}{
		{"fence's reopen", func(t *testing.T, st *store.Store, _ func() (*store.Store, error), faults *errorfs.Toggle) *store.Store {
			faults.On()
			if err := st.Reopen(); err == nil {
				t.Fatal("a reopen whose log create failed reported success")
			}
			faults.Off()
			if err := st.Reopen(); err != nil {
				t.Fatalf("reopen with the disk healed: %v", err)
			}
			return st
		}},
		{"restart", func(t *testing.T, st *store.Store, open func() (*store.Store, error), faults *errorfs.Toggle) *store.Store {
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			faults.On()
			if st2, err := open(); err == nil {
				_ = st2.Close()
				t.Fatal("an open whose log create failed reported success")
			}
			faults.Off()
			st, err := open()
			if err != nil {
				t.Fatalf("open with the disk healed: %v", err)
			}
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			faults := walFaults(errorfs.OpCreate)
			open := func() (*store.Store, error) {
				return store.Open(store.Options{Dir: "/store", FS: errorfs.Wrap(mem, faults), Logger: testutil.Logger(t)})
			}
			st, err := open()
			if err != nil {
				t.Fatal(err)
			}
			storePut(t, st, "before", "synced before the failed open")
			st = tc.again(t, st, open, faults)
			defer st.Close()
			storePut(t, st, "after", "synced after it")
			if err := st.Checkpoint("/ckpt"); err != nil {
				t.Fatalf("checkpoint: %v", err)
			}
			cp, err := store.Open(store.Options{Dir: "/ckpt", FS: mem, Logger: testutil.Logger(t)})
			if err != nil {
				t.Fatalf("the checkpoint does not open: %v", err)
			}
			defer cp.Close()
			for _, k := range []string{"before", "after"} {
				if _, err := cp.Get([]byte(k)); err != nil {
					t.Errorf("checkpoint lost %q: %v", k, err)
				}
			}
			if cp.ID() != st.ID() {
				t.Errorf("checkpoint store id %s, want %s", cp.ID(), st.ID())
			}
		})
	}
}
