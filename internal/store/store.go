// Package store owns the Pebble database of one instance: its lifecycle, the
// key layout (keys.go), value encodings (codec.go), WAL sync and the fence
// that survives a failed fsync.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrFailed is returned by every write after Pebble reported a fatal error
// (a failed WAL write or fsync), until Reopen succeeds.
var ErrFailed = errors.New("store: write failed, store is fenced until reopened")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("store: closed")

// FS is the filesystem a store runs on: Pebble's vfs.FS, named here so
// that the packages wiring a store (app, its tests' seams) need not import
// Pebble (only store does).
type FS = vfs.FS

// Options configure Open.
type Options struct {
	// Dir is the Pebble directory (<data_dir>/store).
	Dir string
	// FS is the filesystem; nil means the real disk. Tests pass errorfs or
	// vfs.NewCrashableMem here to inject failed fsyncs and power cuts.
	FS FS
	// Logger receives Pebble's own messages. Nil means slog.Default().
	Logger *slog.Logger
	// MemTableSize overrides Pebble's default (bytes); 0 keeps ours.
	MemTableSize uint64
}

// Store is one Pebble DB that can be reopened in place after a fatal error.
//
// Pebble treats a failed WAL write or sync as fatal: it calls
// Options.Logger.Fatalf and, if that returns, carries on as if the commit had
// succeeded, except where it closes a log, where it panics. The walGuard
// keeps WAL faults from Pebble and records them (F1, walguard.go), and
// fatalLogger turns Pebble's other Fatalf calls into the same recorded error
// instead of an exit; every write path checks it, so a failed fsync is seen
// as a failure rather than a silent success. The DB is then never written
// again: Reopen closes it and opens the directory afresh.
type Store struct {
	opts Options
	log  *slog.Logger

	// mu guards db: readers and writers hold it shared, Reopen and Close
	// hold it exclusively so nobody uses a DB that is being replaced.
	mu     sync.RWMutex
	db     *pebble.DB
	fatal  *fatalLogger // of the current db
	closed bool
	// diskBytes is the last DiskBytes measured, answered while mu is held
	// exclusively.
	diskBytes atomic.Uint64

	// auditMu serialises AppendAudit; lastAuditNs is the time of the
	// newest audit row this process wrote (0: none yet).
	auditMu     sync.Mutex
	lastAuditNs int64

	id      string // m:store_id, minted at first open
	created bool   // this Open created the store

	gen      uint64       // REQUIRES: mu; the DB generation, raised by every open
	dueFloor atomic.Int64 // earliest due row applied since TakeDueFloor; MaxInt64 = none
	due      dueCount     // the due rows of the open generation (duecount.go)
	// misuses counts the single deletes Pebble found breaking W1
	// (delivery.go): a compaction met a SINGLEDEL with no SET under it, or
	// with more than one.
	misuses atomic.Uint64
	// singleDeletes counts the single deletes applied since Open.
	singleDeletes atomic.Uint64
}

// fatalLogger is the Pebble logger of one DB generation.
type fatalLogger struct {
	log *slog.Logger
	err atomic.Pointer[error]
}

func (l *fatalLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (l *fatalLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf records the error and returns; Pebble then continues, and the store
// refuses to trust anything this DB says from now on.
func (l *fatalLogger) Fatalf(format string, args ...any) {
	l.record(fmt.Errorf("pebble fatal: "+format, args...))
}

// record logs err and keeps it as the generation's fatal error unless one
// is kept already: Pebble's Fatalf, or a WAL fault the walGuard kept from
// Pebble (F1).
func (l *fatalLogger) record(err error) {
	l.err.CompareAndSwap(nil, &err)
	l.log.Error(err.Error(), "component", "pebble")
}

func (l *fatalLogger) failed() error {
	if p := l.err.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrFailed, *p)
	}
	return nil
}

// Open opens (or creates) the store.
func Open(opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	s := &Store{opts: opts, log: opts.Logger.With("component", "store")}
	s.dueFloor.Store(math.MaxInt64)
	if err := s.openLocked(); err != nil {
		return nil, err
	}
	if err := s.initMeta(); err != nil {
		_ = s.Close()
		return nil, err
	}
	// The due count lives in memory: counted once at boot (C2), so the
	// first scrape answers at once.
	if err := s.recountDue(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// REQUIRES: s.mu held exclusively, or s not yet shared.
func (s *Store) openLocked() error {
	fl := &fatalLogger{log: s.opts.Logger}
	po := &pebble.Options{
		FS:     newWALGuard(s.opts.FS, s.opts.Dir, fl), // F1
		Logger: fl,
		// The WAL is our durability record; WALMinSyncInterval stays 0 so a
		// Sync write is not delayed to merge with others (the syncer already
		// merges them).
		EventListener: &pebble.EventListener{PossibleAPIMisuse: s.misuse},
	}
	if s.opts.MemTableSize > 0 {
		po.MemTableSize = s.opts.MemTableSize
	}
	if err := mkdirAllSynced(s.opts.FS, s.opts.Dir); err != nil {
		return fmt.Errorf("open store %s: %w", s.opts.Dir, err)
	}
	db, err := pebble.Open(s.opts.Dir, po)
	if err != nil {
		return fmt.Errorf("open store %s: %w", s.opts.Dir, err)
	}
	// F2. A generation has written its manifest before anyone uses it.
	// Pebble writes a manifest at its first version edit only (a flush's),
	// and Checkpoint copies as much of it as this generation wrote. An open
	// that replayed no log makes no edit: the last open's flush had emptied
	// the logs it replayed, and that open's own new log was never created
	// (a fence's Reopen, or a restart, on a disk that refused the file). A
	// checkpoint of it held an empty manifest, and the backup never opened
	// (simulator, log creation faults: seed 95). Open flushes the replayed
	// logs itself, so this flush's memtable is empty: the edit costs a new
	// log and a manifest record, no sstable.
	err = db.Flush()
	if ferr := fl.failed(); ferr != nil || err != nil {
		_ = safeClose(db)
		if ferr != nil {
			err = ferr
		}
		return fmt.Errorf("open store %s: %w", s.opts.Dir, err)
	}
	s.db, s.fatal = db, fl
	s.gen++
	return nil
}

// misuse is Pebble's report of a single delete that broke W1
// (delivery.go), seen by a compaction. It cannot lose a hook (a single
// delete only ever removes); it means a deleted row may come back. Logged
// and counted (SingleDeleteMisuses) so that tests and operators see it.
func (s *Store) misuse(info pebble.PossibleAPIMisuseInfo) {
	s.misuses.Add(1)
	s.log.Error("pebble: possible misuse of a single delete (store invariant W1)", "kind", info.Kind.String(), "family", familyOf(info.UserKey))
}

// Compact flushes the memtables and compacts the whole key space into the
// last level: every shadowed version and every tombstone that can go,
// goes. Tests use it to make Pebble meet a single delete with what lies
// under it (W1, SingleDeleteMisuses). It holds the store shared for the
// whole compaction, so a Reopen or Close waits for it: not for a serving
// node.
func (s *Store) Compact(ctx context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return ErrClosed
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff}, false); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	return nil
}

// SingleDeletes is how many single deletes (W1) were applied since Open.
func (s *Store) SingleDeletes() uint64 { return s.singleDeletes.Load() }

// SingleDeleteMisuses is how many single deletes a compaction found
// breaking W1 since Open (0 unless there is a bug).
func (s *Store) SingleDeleteMisuses() uint64 { return s.misuses.Load() }

// familyOf names a key's family for a log line, without the key's bytes.
func familyOf(k []byte) string {
	if len(k) == 0 {
		return ""
	}
	return string(k[:1])
}

func (s *Store) initMeta() error {
	v, err := s.Get(KeyStoreID)
	if err != nil {
		return fmt.Errorf("read store id: %w", err)
	}
	if v == nil {
		var raw [16]byte
		_, _ = rand.Read(raw[:])
		v = []byte(hex.EncodeToString(raw[:]))
		b := s.NewBatch()
		_ = b.Set(KeyStoreID, v, nil)
		_ = b.Set(KeyFormat, U64(FormatVersion), nil)
		if err := s.ApplySync(b); err != nil {
			return fmt.Errorf("write store id: %w", err)
		}
		s.created = true
	} else if f, _ := s.Get(KeyFormat); f != nil {
		if n, ok := ParseU64(f); !ok || n != FormatVersion {
			return fmt.Errorf("store %s has format %d, this binary reads %d", s.opts.Dir, n, FormatVersion)
		}
	}
	s.id = string(v)
	return nil
}

// Created reports whether this Open created a new, empty store.
func (s *Store) Created() bool { return s.created }

// ID is the store's identity, minted when it was first created.
func (s *Store) ID() string { return s.id }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.opts.Dir }

// Apply writes b without waiting for the WAL to reach the disk: the rows are
// visible at once and durable only after a later SyncWAL returns nil.
func (s *Store) Apply(b *Batch) error { return s.apply(b, pebble.NoSync) }

// ApplySync writes b and waits for the WAL fsync that covers it.
func (s *Store) ApplySync(b *Batch) error { return s.apply(b, pebble.Sync) }

func (s *Store) apply(b *Batch, wo *pebble.WriteOptions) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case b.err != nil:
		return b.err
	case s.closed:
		return ErrClosed
	case s.db == nil:
		return fmt.Errorf("%w: no open store generation (the last reopen failed)", ErrFailed)
	case b.gen != s.gen:
		return fmt.Errorf("%w: batch of generation %d applied to generation %d (the store was reopened)", ErrFailed, b.gen, s.gen)
	}
	if err := s.fatal.failed(); err != nil {
		return err
	}
	s.due.mu.RLock()
	err := s.db.Apply(b.b, wo)
	if err == nil && b.singles > 0 {
		s.singleDeletes.Add(b.singles)
	}
	if ferr := s.fatal.failed(); err != nil || ferr != nil || b.dueUnsure {
		// Applied or not, and kept by the next generation or not: recount
		// (C2).
		s.due.markStale()
	} else if b.dueDelta != 0 {
		s.due.n.Add(b.dueDelta)
	}
	s.due.mu.RUnlock()
	if b.minDue != math.MaxInt64 {
		// Lowered even when the apply then reports a failure: a batch whose
		// WAL sync failed may still have reached the log file, and after
		// the fence's reopen its due rows are back, behind the dispatcher's
		// cursor (found by the simulator). A floor too low costs one scan.
		s.lowerDueFloor(b.minDue)
	}
	if err != nil {
		return fmt.Errorf("apply batch: %w", err)
	}
	// Pebble returns nil after calling Fatalf; the recorded error is the truth.
	return s.fatal.failed()
}

// SyncWAL forces one WAL fsync. A nil return means every batch applied
// before the call started is durable.
func (s *Store) SyncWAL() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return ErrClosed
	}
	if err := s.fatal.failed(); err != nil {
		return err
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("sync wal: %w", err)
	}
	return s.fatal.failed()
}

// Generation names the open DB generation; Reopen changes it. A reader
// that keeps state about the rows (the dispatcher's claims, its gauges)
// compares it to learn that a reopen may have dropped writes Pebble had
// reported applied.
func (s *Store) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// Failed reports the fatal error of the current DB generation, if any.
func (s *Store) Failed() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.fatal == nil {
		return ErrClosed
	}
	return s.fatal.failed()
}

// Get returns a copy of the value at key, or nil if absent.
func (s *Store) Get(key []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, c, err := s.getLocked(key)
	if err != nil || c == nil {
		return nil, err
	}
	// Non-nil even when empty: due and expiry rows have empty values, and
	// "present but empty" must not read as "absent".
	out := make([]byte, len(v))
	copy(out, v)
	_ = c.Close()
	return out, nil
}

// view calls fn with the value at key, valid only during the call and
// never to be modified: Pebble's own bytes, not a copy. found is false,
// and fn is not called, if key is absent.
func (s *Store) view(key []byte, fn func(v []byte) error) (found bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, c, err := s.getLocked(key)
	if err != nil || c == nil {
		return false, err
	}
	defer c.Close()
	return true, fn(v)
}

// getLocked is Get's and view's Pebble lookup: Pebble's value and its
// closer, or a nil closer if key is absent. REQUIRES: s.mu held.
func (s *Store) getLocked(key []byte) ([]byte, io.Closer, error) {
	if s.closed || s.db == nil {
		return nil, nil, ErrClosed
	}
	v, c, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get %q: %w", key, err)
	}
	return v, c, nil
}

// Scan calls fn for every key in [lower, upper) in order until fn returns
// false. Keys and values are only valid during the call.
func (s *Store) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	return s.scan(lower, upper, false, fn)
}

// Count returns how many keys start with prefix.
func (s *Store) Count(prefix []byte) (uint64, error) {
	var n uint64
	err := s.Scan(prefix, PrefixEnd(prefix), func(_, _ []byte) bool { n++; return true })
	return n, err
}

// DiskBytes is the on-disk size Pebble reports. It never waits: while a
// Reopen or Close holds the store (for as long as a failing disk takes) it
// returns the last size measured, so /metrics and /v1/wal keep answering
// during a store fault.
func (s *Store) DiskBytes() uint64 {
	if !s.mu.TryRLock() {
		return s.diskBytes.Load()
	}
	defer s.mu.RUnlock()
	if s.db == nil {
		return s.diskBytes.Load()
	}
	m := s.db.Metrics()
	v := m.DiskSpaceUsage()
	s.diskBytes.Store(v)
	return v
}

// Warm reports whether this DB generation is past Pebble's memtable growth,
// so that a write no longer touches memory the process has never touched.
// Pebble's first memtable is 256 KiB and each next one doubles up to
// MemTableSize; a rotated memtable's arena is reused only once it is full
// size. Until then rows land on fresh pages, each first touch a page fault
// (at 1 KiB bodies ~0.4 faults per hook during the growth, 0.001–0.01
// after). The arenas touched before reuse begins add up to less than three
// memtables' worth (the growth series sums to under two, then one more
// full one before the first is recycled), and a memtable fills with more
// bytes than its WAL records carry, so the generation is warm once its WAL
// has taken in three memtables' worth. `ankusa bench` primes each store
// until then, so that its window is the steady state by construction.
func (s *Store) Warm() bool {
	// Never waits, like DiskBytes: a store held by a Reopen or Close is
	// not warm yet.
	if !s.mu.TryRLock() {
		return false
	}
	defer s.mu.RUnlock()
	if s.db == nil {
		return false
	}
	size := s.opts.MemTableSize
	if size == 0 {
		size = 4 << 20 // Pebble's default
	}
	return s.db.Metrics().WAL.BytesIn >= 3*size
}

// WALBytesIn is how many bytes the WAL of generation gen has taken in
// (Pebble's WAL.BytesIn); ok is false while a Reopen or Close holds the
// store. The bench divides a window's delta, both ends in one generation,
// by the window's fsyncs to size a group's write.
func (s *Store) WALBytesIn() (bytes, gen uint64, ok bool) {
	if !s.mu.TryRLock() {
		return 0, 0, false
	}
	defer s.mu.RUnlock()
	if s.db == nil {
		return 0, 0, false
	}
	return s.db.Metrics().WAL.BytesIn, s.gen, true
}

// Reopen closes the current DB generation and opens the directory again.
// It is the only way back after a fatal error: Pebble must not be used once
// it has reported one. Rows that were applied but never synced may still be
// read back (they can be in the OS page cache or even on disk); the caller
// deletes what no successful fsync covered.
func (s *Store) Reopen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.db != nil {
		if err := safeClose(s.db); err != nil {
			s.log.Warn("closing failed store generation", "err", err)
		}
		s.db, s.fatal = nil, nil
	}
	// The new generation holds what the WAL kept, not what was applied: the
	// due count is walked again (C2), also if this open fails.
	s.due.markStale()
	if err := s.openLocked(); err != nil {
		return err
	}
	// The new generation holds what the WAL kept: a write the old one had
	// applied without a sync may be gone — a claim that deleted a due row,
	// say — so due rows can be back behind the dispatcher's cursor though no
	// batch wrote them. The floor goes to the start: one full scan, where a
	// floor too high would strand them.
	s.lowerDueFloor(0)
	return nil
}

// Close closes the store. It is safe to call twice.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.fatal = nil
	if s.db == nil {
		return nil
	}
	err := safeClose(s.db)
	s.db = nil
	return err
}

// safeClose closes a DB that may have reported a fatal error; Pebble can
// panic on invariants a failed generation no longer keeps, and nothing it
// holds is trusted any more.
func safeClose(db *pebble.DB) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("close panicked: %v", r)
		}
	}()
	return db.Close()
}

// mkdirAllSynced creates dir and its missing parents and fsyncs the parent of
// every directory it created. Pebble syncs the entries inside its directory
// but not the directory's own entry in its parent: without this, a power cut
// soon after the first boot could lose the whole store, acked hooks included.
func mkdirAllSynced(fs vfs.FS, dir string) error {
	var created []string
	for d := dir; ; {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		p := fs.PathDir(d)
		if p == d {
			break
		}
		d = p
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range created {
		if err := syncDir(fs, fs.PathDir(d)); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	f, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return f.Close()
}

// Checkpoint writes a consistent copy of the store into dir (which must not
// exist), with the WAL flushed into it: the backup primitive. It does not
// block the writer.
func (s *Store) Checkpoint(dir string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return ErrClosed
	}
	// A failed generation's logs end at the fault and its later writes
	// went nowhere (F1): nothing it copies is trusted.
	if err := s.fatal.failed(); err != nil {
		return fmt.Errorf("checkpoint into %s: %w", dir, err)
	}
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("checkpoint into %s: %w", dir, err)
	}
	if err := s.fatal.failed(); err != nil {
		return fmt.Errorf("checkpoint into %s: %w", dir, err)
	}
	return nil
}

// LastKey returns a copy of the largest key in [lower, upper), or nil when
// the range is empty. One seek, not a scan.
func (s *Store) LastKey(lower, upper []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return nil, ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("last key: %w", err)
	}
	var k []byte
	if it.Last() {
		k = append([]byte(nil), it.Key()...)
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return nil, fmt.Errorf("last key: %w", err)
	}
	return k, it.Close()
}

// ScanReverse calls fn for every key in [lower, upper) from the largest
// down until fn returns false. Keys and values are only valid during the
// call. Listings that show the newest first use it.
func (s *Store) ScanReverse(lower, upper []byte, fn func(k, v []byte) bool) error {
	return s.scan(lower, upper, true, fn)
}

// scan is Scan and ScanReverse: one iterator over [lower, upper), walked
// forward or backward.
func (s *Store) scan(lower, upper []byte, reverse bool, fn func(k, v []byte) bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	first, next := it.First, it.Next
	if reverse {
		first, next = it.Last, it.Prev
	}
	for ok := first(); ok && it.Valid(); ok = next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("scan value: %w", err)
		}
		if !fn(it.Key(), v) {
			break
		}
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return fmt.Errorf("scan: %w", err)
	}
	return it.Close()
}
