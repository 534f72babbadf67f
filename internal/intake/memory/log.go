package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
)

// ErrClosed is wrapped by the Unavailable error of a call on a closed Log:
// the intake package's, as the Intake contract states. The test-only
// helpers (Truncate, CopyTo, …) return it bare.
var ErrClosed = intake.ErrClosed

// ErrTooLarge is wrapped by the Permanent error of a record whose frame is
// larger than Options.MaxRecordBytes.
var ErrTooLarge = fmt.Errorf("record too large (%w)", intake.ErrRecordRefused)

// nodePattern restricts node ids to what is safe in a file name (a superset
// of the intake.node_id rule).
var nodePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Options configures Open.
type Options struct {
	// Dir is the log directory (intake.memory.path), created if missing. It
	// may live outside the node's data dir so that it outlives a "host" in a
	// drill, and several nodes may share it.
	Dir string
	// Node is this node's id: it names the node's file (<Dir>/<Node>.log)
	// and Replay returns only records stamped with it.
	Node string
	// ConfirmLatency is the least time a publish takes to confirm, counted
	// from the start of its append (intake.memory.confirm_latency_ms). See
	// SetConfirmLatency.
	ConfirmLatency time.Duration
	// MaxRecordBytes bounds one record's frame body (headers and value); a
	// larger record is refused Permanent, as a broker refuses a message over
	// max.message.bytes. 0 means maxFrameBytes (64 MiB).
	MaxRecordBytes int64
	// Logger receives the torn-tail and skipped-record warnings. Nil
	// discards.
	Logger *slog.Logger
}

// Log is one node's view of a memory intake log. Its methods are safe for
// concurrent use.
//
// Invariants (kept under mu):
//
//	L1: offsets[i] is the byte offset of the frame at position i, and every
//	    frame in [0, end) is complete, crc-checked and fsynced. Only [0, end)
//	    is ever read, copied or confirmed.
//	L2: [end, wend) holds whole frames written and awaiting an fsync, of the
//	    lengths in wlens, from writes numbered up to written. One fsync
//	    covers every write made before it began (group commit: concurrent
//	    publishes share it instead of queueing an fsync each).
//	L3: every write numbered up to synced is in [0, end); one numbered in
//	    (synced, dropped] failed and is not; a write is never both. Bytes
//	    at and past wend (a torn tail, a failed write or fsync) are never
//	    read and are truncated before the next write.
type Log struct {
	dir       string
	node      string
	path      string // <dir>/<node>.log
	startPath string // <dir>/<node>.start: the first position held (Truncate)
	maxRecord int64
	log       *slog.Logger

	mu        sync.Mutex
	f         *os.File // read-write, appends at end; nil once closed
	end       int64
	offsets   []int64
	start     intake.Position
	dirty     bool // bytes may exist at or past wend
	published int

	// Group commit (L2, L3).
	wend    int64
	wlens   []int64
	written uint64     // writes made
	synced  uint64     // writes made durable
	dropped uint64     // writes failed by an fsync error or Close
	syncing bool       // a leader is in f.Sync, without mu
	syncEnd *sync.Cond // on mu: broadcast when a leader's fsync returns

	// frames recycles the encode buffers of PublishBatch (*frameBuf): a
	// batch's frames are garbage once append has written them, and growing
	// a fresh buffer per publish was a fifth of the dual commit's bytes
	// per hook (issue 14).
	frames sync.Pool
	// timers recycles the confirm latency's timers (*time.Timer), two
	// allocations a publish otherwise. Since Go 1.23 a stopped timer
	// delivers nothing stale, so a recycled one is as good as new.
	timers sync.Pool

	closed  atomic.Bool
	ready   atomic.Bool
	latency atomic.Int64 // time.Duration
	skipped atomic.Int64
	faults  faults
}

var _ intake.Intake = (*Log)(nil)

// Open opens (creating if needed) node's file in opts.Dir and reads it to
// its last good frame. A torn tail is logged and ignored; the first append
// truncates it.
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("memory intake: no directory")
	}
	if !nodePattern.MatchString(opts.Node) {
		return nil, fmt.Errorf("memory intake: node id %q must match %s", opts.Node, nodePattern)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Log{
		dir:       opts.Dir,
		node:      opts.Node,
		path:      filepath.Join(opts.Dir, opts.Node+".log"),
		startPath: filepath.Join(opts.Dir, opts.Node+".start"),
		maxRecord: opts.MaxRecordBytes,
		log:       logger.With("component", "intake.memory", "node", opts.Node),
	}
	if l.maxRecord <= 0 || l.maxRecord > maxFrameBytes {
		l.maxRecord = maxFrameBytes
	}
	if err := mkdirSynced(l.dir); err != nil {
		return nil, fmt.Errorf("memory intake: %w", err)
	}
	f, err := openOrCreate(l.path, l.dir)
	if err != nil {
		return nil, fmt.Errorf("memory intake: %w", err)
	}
	if err := l.load(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("memory intake: open %s: %w", l.path, err)
	}
	l.f = f
	l.wend = l.end
	l.syncEnd = sync.NewCond(&l.mu)
	l.ready.Store(true)
	l.SetConfirmLatency(opts.ConfirmLatency)
	l.log.Warn("memory intake log opened: TEST ONLY, not replicated", "dir", l.dir, "records", len(l.offsets), "earliest", l.start)
	return l, nil
}

// load scans f to its last good frame and reads the retention sidecar.
func (l *Log) load(f *os.File) error {
	fr := newFrameReader(f, 0)
	var tornErr error
	for {
		_, off, err := fr.next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errTorn) {
			tornErr = err
			break
		}
		if err != nil {
			return err
		}
		l.offsets = append(l.offsets, off)
	}
	l.end = fr.off
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > l.end {
		l.dirty = true
		l.log.Warn("memory intake log: ignoring torn tail", "file", l.path,
			"good_bytes", l.end, "torn_bytes", fi.Size()-l.end, "records", len(l.offsets), "reason", tornErr)
	}
	raw, err := os.ReadFile(l.startPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		v, perr := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if perr != nil || v < 0 {
			return fmt.Errorf("retention sidecar %s: bad start %q", l.startPath, raw)
		}
		l.start = intake.Position(min(v, int64(len(l.offsets))))
	}
	return nil
}

// PublishBatch appends recs, in order, to this node's file, fsyncs it and
// returns the position of the last record once the confirm latency, counted
// from the start of the append, has passed as well.
//
// In order: a Hang blocks (ctx ending returns Unavailable wrapping
// ctx.Err()); a FailNext failure is returned; a ctx already ended returns
// Unavailable; an invalid record (empty version, kind or node; a frame over
// MaxRecordBytes) fails the whole batch Permanent. In none of these cases
// is anything appended. Then the batch is appended and fsynced as one write
// (an I/O failure is Unavailable and the partial write is truncated before
// the next append); a TimeoutAfterAppendNext fault, or ctx ending during the
// confirm latency, returns Unavailable wrapping ErrAckLost with the records
// in the log. The version and kind are written as given, so a test can
// publish a record a reader must skip. An empty batch is refused Permanent.
func (l *Log) PublishBatch(ctx context.Context, recs []intake.Record) (intake.Position, error) {
	if l.closed.Load() {
		return -1, &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	if err := l.faults.waitHang(ctx); err != nil {
		return -1, &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("publish held by Hang: %w", err)}
	}
	if err := l.faults.takeFailure(); err != nil {
		return -1, err
	}
	if err := ctx.Err(); err != nil {
		return -1, &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("publish: %w", err)}
	}
	fb, err := l.encodeBatch(recs)
	if err != nil {
		return -1, err
	}
	// The latency runs from here, across the append and fsync below: it
	// imitates a broker whose leader writes while it replicates, so a
	// confirm costs max(write, latency), not their sum. Waiting it after
	// the fsync (as before) made a 5 ms confirm cost 5 ms plus this log's
	// own fsync plus the wait for the appends ahead of it, 7-9 ms under
	// load, which no broker's confirm includes twice.
	confirmAt := time.Now().Add(time.Duration(l.latency.Load()))
	last, lostAck, err := l.append(fb.buf, fb.lens)
	// append copied the frames out: the buffer goes back now, not after
	// the confirm latency, so concurrent publishes share fewer of them.
	l.recycle(fb)
	if err != nil {
		return -1, err
	}
	if lostAck {
		return -1, &intake.Error{Class: intake.Unavailable,
			Err: fmt.Errorf("publish up to position %d: %w (%w)", last, ErrAckLost, ErrInjected)}
	}
	if d := time.Until(confirmAt); d > 0 {
		t, _ := l.timers.Get().(*time.Timer)
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		defer func() { t.Stop(); l.timers.Put(t) }()
		select {
		case <-t.C:
		case <-ctx.Done():
			return -1, &intake.Error{Class: intake.Unavailable,
				Err: fmt.Errorf("confirm of position %d: %w: %w", last, ErrAckLost, ctx.Err())}
		}
	}
	return last, nil
}

// frameBuf is one batch's encoded frames and each frame's total length.
type frameBuf struct {
	buf  []byte
	lens []int64
}

// maxPooledFrames: a larger encode buffer is dropped after its publish, so
// one big batch does not pin its size in the pool.
const maxPooledFrames = 1 << 20

// encodeBatch validates recs and encodes their frames into one buffer from
// the pool; the caller recycles it once the frames are written.
func (l *Log) encodeBatch(recs []intake.Record) (*frameBuf, error) {
	if len(recs) == 0 {
		return nil, intake.Errorf(intake.Permanent, "memory intake: empty batch")
	}
	fb, _ := l.frames.Get().(*frameBuf)
	if fb == nil {
		fb = &frameBuf{}
	}
	fb.buf, fb.lens = fb.buf[:0], fb.lens[:0]
	// Sized once for the whole batch: appending frame by frame regrew a
	// fresh buffer through every doubling, about half a body per record
	// at 1 KiB (issue 14).
	need := 0
	for i := range recs {
		need += frameBound(&recs[i])
	}
	fb.buf = slices.Grow(fb.buf, need)
	for i := range recs {
		r := &recs[i]
		var missing []string
		for _, f := range [][2]string{{"version", r.Version}, {"kind", r.Kind}, {"node", r.Node}} {
			if f[1] == "" {
				missing = append(missing, f[0])
			}
		}
		if len(missing) > 0 {
			l.recycle(fb)
			return nil, intake.Errorf(intake.Permanent, "memory intake: record %d (seq %d): empty %s", i, r.Seq, strings.Join(missing, ", "))
		}
		before := len(fb.buf)
		var n int
		fb.buf, n = appendFrame(fb.buf, r)
		if int64(n) > l.maxRecord {
			l.recycle(fb)
			return nil, intake.Errorf(intake.Permanent, "memory intake: record %d (seq %d) is %d bytes, over %d: %w", i, r.Seq, n, l.maxRecord, ErrTooLarge)
		}
		fb.lens = append(fb.lens, int64(len(fb.buf)-before))
	}
	return fb, nil
}

// recycle returns fb to the pool. REQUIRES: nothing reads fb any more
// (append copies the frames into the file and wlens before it returns).
func (l *Log) recycle(fb *frameBuf) {
	if cap(fb.buf) <= maxPooledFrames {
		l.frames.Put(fb)
	}
}

// append writes buf (the frames of one batch, of lengths lens) past the
// frames already written and returns once an fsync covers it: the last
// position and whether a lost ack was injected for this append. The first
// writer to find no fsync running leads one for every write made so far;
// the others wait for it (L2).
func (l *Log) append(buf []byte, lens []int64) (intake.Position, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return -1, false, &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	if l.dirty {
		if err := l.f.Truncate(l.wend); err != nil {
			return -1, false, intake.Errorf(intake.Unavailable, "memory intake: truncate tail of %s: %w", l.path, err)
		}
		l.dirty = false
	}
	if _, err := l.f.WriteAt(buf, l.wend); err != nil {
		l.dirty = true
		return -1, false, intake.Errorf(intake.Unavailable, "memory intake: append to %s: %w", l.path, err)
	}
	last := intake.Position(len(l.offsets) + len(l.wlens) + len(lens) - 1)
	l.wend += int64(len(buf))
	l.wlens = append(l.wlens, lens...)
	l.written++
	me := l.written
	for {
		switch {
		case l.synced >= me:
			return last, l.faults.takeLostAck(), nil
		case l.dropped >= me:
			return -1, false, intake.Errorf(intake.Unavailable, "memory intake: fsync %s failed or the log closed", l.path)
		case !l.syncing:
			l.syncLocked()
		default:
			l.syncEnd.Wait()
		}
	}
}

// syncLocked fsyncs every write made so far, without holding mu during the
// fsync, and moves them into [0, end) (L1), or drops every pending write on
// failure. REQUIRES: l.mu held, no fsync running.
func (l *Log) syncLocked() {
	defer l.syncEnd.Broadcast()
	f, upto, frames := l.f, l.written, len(l.wlens)
	var err error
	if f == nil {
		err = ErrClosed
	} else {
		l.syncing = true
		l.mu.Unlock()
		// The fsync also makes a truncation before the write durable (the
		// file size).
		err = f.Sync()
		l.mu.Lock()
		l.syncing = false
	}
	if err != nil {
		// Nothing says which pages reached the disk: every write not yet
		// synced fails, including those made during this fsync, and their
		// bytes are truncated before the next write.
		l.dirty = true
		l.dropped = l.written
		l.wlens = l.wlens[:0]
		l.wend = l.end
		return
	}
	for _, n := range l.wlens[:frames] {
		l.offsets = append(l.offsets, l.end)
		l.end += n
	}
	l.published += frames
	l.wlens = append(l.wlens[:0], l.wlens[frames:]...)
	l.synced = upto
}

// snapshot returns the byte range and the positions [from, n) that a read
// starting at position from covers, as of now. REQUIRES: l.mu not held.
func (l *Log) snapshot(from intake.Position) (off, end int64, pos, n intake.Position) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pos = max(from, l.start, 0)
	n = intake.Position(len(l.offsets))
	if pos < n {
		off = l.offsets[pos]
	}
	return off, l.end, pos, n
}

// scan calls fn with each frame body from position from to the end at call
// time. A frame that no longer reads back inside that (once good) range is
// corruption: Permanent.
func (l *Log) scan(ctx context.Context, from intake.Position, fn func(body []byte, pos intake.Position) error) error {
	off, end, pos, n := l.snapshot(from)
	if pos >= n {
		return nil
	}
	f, err := os.Open(l.path)
	if err != nil {
		return intake.Errorf(intake.Unavailable, "memory intake: %w", err)
	}
	defer f.Close()
	fr := newFrameReader(io.NewSectionReader(f, off, end-off), off)
	for ; pos < n; pos++ {
		if err := ctx.Err(); err != nil {
			return &intake.Error{Class: intake.Unavailable, Err: fmt.Errorf("memory intake: read: %w", err)}
		}
		body, _, err := fr.next()
		switch {
		case err == io.EOF || errors.Is(err, errTorn):
			return intake.Errorf(intake.Permanent, "memory intake: %s position %d was confirmed and no longer reads: %v", l.path, pos, err)
		case err != nil:
			return intake.Errorf(intake.Unavailable, "memory intake: read %s: %w", l.path, err)
		}
		if err := fn(body, pos); err != nil {
			return err
		}
	}
	return nil
}

// Replay calls fn for each record of this node after position from
// (exclusive), in log order, up to the last record confirmed when Replay
// was called. It skips, counts (Skipped) and logs records of an unknown
// version or kind, or of an unknown frame format; records stamped with
// another node are passed over without counting (normal in a shared
// partition). A from before Earliest starts at Earliest: the gap is the
// caller's to detect with Earliest, as with a broker. fn's error is
// returned as it is; ctx ending is Unavailable.
func (l *Log) Replay(ctx context.Context, from intake.Position, fn func(intake.Record, intake.Position) error) error {
	if l.closed.Load() {
		return &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	if err := l.faults.takeRead(&l.faults.replay); err != nil {
		return err
	}
	var skipped int
	defer func() {
		if skipped > 0 {
			l.log.Warn("memory intake replay skipped unknown records", "skipped", skipped, "from", from)
		}
	}()
	return l.scan(ctx, from+1, func(body []byte, pos intake.Position) error {
		d, err := decodeBody(body)
		if err != nil {
			skipped++
			l.skipped.Add(1)
			return nil
		}
		if v, k := d.headers[intake.HeaderVersion], d.headers[intake.HeaderKind]; v != intake.RecordVersion || k != intake.KindHook {
			skipped++
			l.skipped.Add(1)
			return nil
		}
		if d.headers[intake.HeaderNode] != l.node {
			return nil
		}
		rec, err := d.record()
		if err != nil {
			skipped++
			l.skipped.Add(1)
			l.log.Warn("memory intake replay: unreadable record", "position", pos, "err", err)
			return nil
		}
		return fn(rec, pos)
	})
}

// Skipped returns how many records this Log's replays skipped as unknown
// (version, kind or frame format) or unreadable, over its lifetime.
func (l *Log) Skipped() int64 { return l.skipped.Load() }

// Ready reports the SetReady flag (true at Open), false once closed.
func (l *Log) Ready() bool { return l.ready.Load() && !l.closed.Load() }

// Verify checks that the directory is writable (create, write, fsync and
// remove a probe file). There is no topology to check: this log is not
// replicated, which Describe states.
func (l *Log) Verify(ctx context.Context) error {
	if l.closed.Load() {
		return &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	f, err := os.CreateTemp(l.dir, ".verify-*")
	if err != nil {
		return fmt.Errorf("intake.memory.path %q is not writable: %w", l.dir, err)
	}
	name := f.Name()
	_, err = f.Write([]byte("ankusa\n"))
	err = errors.Join(err, f.Sync(), f.Close(), os.Remove(name))
	if err != nil {
		return fmt.Errorf("intake.memory.path %q is not writable: %w", l.dir, err)
	}
	return nil
}

// Describe is the log's part of the startup durability sentence.
func (l *Log) Describe() string {
	return fmt.Sprintf("memory intake log at %s (TEST ONLY: not replicated, lost with this disk)", l.dir)
}

// Earliest returns the first position still held: 0 for a log never
// truncated (also when it is empty), else one past the Truncate point.
// Like a broker's log start offset, it equals the next position when
// everything was truncated.
func (l *Log) Earliest(ctx context.Context) (intake.Position, error) {
	if l.closed.Load() {
		return -1, &intake.Error{Class: intake.Unavailable, Err: ErrClosed}
	}
	if err := l.faults.takeRead(&l.faults.earliest); err != nil {
		return -1, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start, nil
}

// Last returns the position of the last record in this node's file, or -1
// when it holds none (the log head, for "a clean stop leaves the offset at
// the head" checks).
func (l *Log) Last() intake.Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	return intake.Position(len(l.offsets) - 1)
}

// Truncate simulates retention: the records at positions up to upto
// (inclusive) are no longer held, Earliest becomes upto+1 and Replay and
// Records start there. Positions never change. The bytes stay in the file;
// the start is kept, fsynced, in <dir>/<node>.start. upto past the last
// record is an error; a point at or before the current start is a no-op.
func (l *Log) Truncate(upto intake.Position) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ErrClosed
	}
	if last := intake.Position(len(l.offsets) - 1); upto > last {
		return fmt.Errorf("memory intake: truncate up to %d: the last position is %d", upto, last)
	}
	start := upto + 1
	if start <= l.start {
		return nil
	}
	if err := writeFileSynced(l.startPath, []byte(strconv.FormatInt(int64(start), 10)+"\n")); err != nil {
		return fmt.Errorf("memory intake: truncate: %w", err)
	}
	l.start = start
	return nil
}

// Published returns how many records this Log has appended since Open,
// counting those whose ack was lost.
func (l *Log) Published() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.published
}

// Records reads back every record held in this node's file, from Earliest
// to the end, unfiltered (unknown versions and kinds and other nodes'
// records included): Records()[i] is at position Earliest+i, and a frame
// that does not decode reads as a zero Record. It works after Close. For
// assertions: it panics if the file cannot be read.
func (l *Log) Records() []intake.Record {
	var out []intake.Record
	err := l.scan(context.Background(), 0, func(body []byte, _ intake.Position) error {
		var r intake.Record
		if d, err := decodeBody(body); err == nil {
			r, _ = d.record()
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("memory intake: Records: %v", err))
	}
	return out
}

// Close closes the file and releases calls blocked by Hang. Later calls
// fail with ErrClosed; a second Close returns nil.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.f == nil {
		l.mu.Unlock()
		return nil
	}
	l.closed.Store(true)
	err := l.f.Close()
	l.f = nil
	l.mu.Unlock()
	l.faults.unhang()
	return err
}
