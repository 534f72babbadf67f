// reference.go owns the handlers Ankusa is measured against: null (the
// ceiling, issue 14's targets), and the references a run adds with
// Options.Refs: the floor the contract puts under any design (nullsha) and
// a minimal durable handler (nullsync), so that disk against them is
// Ankusa's own cost whatever the host makes of SHA-256 or an fsync next to
// its net/http.

package bench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// ModeNullSHA is the null handler that also reads the body into a
	// buffer (a pooled one, as Ankusa's edge reads it) and computes its
	// SHA-256, as Ankusa must for every hook it stores (the envelope's
	// sha256, served by GET /v1/hooks/{id} and in the queue sinks'
	// message): the floor the contract puts under any design.
	ModeNullSHA Mode = "nullsha"
	// ModeNullSync is nullsha that also answers only once the body is on
	// the disk: it appends the body to a log file beside the stores (a
	// preallocated one, as Pebble's recycled WAL is) through a group
	// commit, one fdatasync for every body that arrived while the last
	// one ran, and waits for the fsync covering it: a minimal handler that
	// acks a durable, hashed hook over net/http, one write and one fsync's
	// share. Nothing is indexed, delivered or removed. Not a floor: its
	// group commit is the textbook back-to-back one, and its cycle is so
	// short that it makes several times as many fsyncs per hook as
	// Ankusa's writer (whose slower cycle gathers larger groups). Where an
	// fsync costs the guest CPU (tens of us a call on the bench's host,
	// BenchmarkGroupFsync) that is several us a hook Ankusa does not pay, so disk/nullsync flatters
	// Ankusa; Run prices both runs' fsyncs (fsyncCalibrator) and the
	// summary adds disk against nullsync charged disk's fsyncs instead.
	ModeNullSync Mode = "nullsync"
)

// isReference says whether m is a handler that is not an Ankusa instance.
func isReference(m Mode) bool { return m == ModeNull || m == ModeNullSHA || m == ModeNullSync }

// ParseRefs reads a comma list of references ("nullsha", "nullsync").
func ParseRefs(s string) ([]Mode, error) {
	return parseModeList(s, "reference", ModeNullSHA, ModeNullSync)
}

// nullAnswer mirrors the size and shape of Ankusa's 201 body.
var nullAnswer = []byte(`{"id":"00000000-0000-7000-8000-000000000000","status":"accepted"}` + "\n")

// runReference drives the reference handler mode on a server of its own;
// ModeNullSync's log goes in a fresh dir under root, removed after.
func runReference(ctx context.Context, o *Options, root string, mode Mode, clients int, body []byte) (Result, error) {
	var lg *groupLog
	if mode == ModeNullSync {
		dir, err := os.MkdirTemp(root, fmt.Sprintf("%s-c%d-", mode, clients))
		if err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(dir)
		if lg, err = openGroupLog(filepath.Join(dir, "log"), syncData); err != nil {
			return Result{}, err
		}
		defer lg.close()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	bufs := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if mode == ModeNull {
				_, _ = io.Copy(io.Discard, r.Body)
			} else {
				b := bufs.Get().(*bytes.Buffer)
				b.Reset()
				_, _ = b.ReadFrom(r.Body)
				_ = sha256.Sum256(b.Bytes()) // assembly: never elided
				if lg != nil {
					if err := lg.append(b.Bytes()); err != nil {
						bufs.Put(b)
						http.Error(w, err.Error(), http.StatusServiceUnavailable)
						return
					}
				}
				bufs.Put(b)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(nullAnswer)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	url := "http://" + ln.Addr().String() + "/webhooks/demo"
	var probe *windowProbe
	var s0, s1 [2]uint64 // fsyncs, bodies
	if lg != nil {
		probe = &windowProbe{
			atStart: func() { s0 = lg.counts() },
			atEnd:   func() { s1 = lg.counts() },
		}
	}
	r, err := drive(ctx, o, mode, clients, url, body, probe)
	if err != nil || lg == nil {
		return r, err
	}
	r.Fsyncs, r.Hooks = s1[0]-s0[0], s1[1]-s0[1]
	if secs := r.Window.Seconds(); secs > 0 {
		r.FsyncsPerSec = float64(r.Fsyncs) / secs
	}
	if r.Fsyncs > 0 {
		r.MeanGroup = float64(r.Hooks) / float64(r.Fsyncs)
		r.GroupBytes = r.MeanGroup * float64(len(body))
	}
	return r, nil
}

// groupLogSize is the log file's preallocated size; the log wraps around
// it (the bench measures cost, it keeps nothing).
const groupLogSize = 64 << 20

// errLogClosed answers appends after close.
var errLogClosed = errors.New("bench: reference log closed")

// groupLog is ModeNullSync's group commit: appenders queue their bodies
// and wait; one goroutine writes everything queued, fdatasyncs it, answers
// those appenders and starts again with what queued meanwhile.
type groupLog struct {
	f      *os.File
	off    int64
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []logWaiter // REQUIRES: mu held
	closed bool        // REQUIRES: mu held
	done   chan struct{}
	fsyncs atomic.Uint64
	bodies atomic.Uint64
	buf    []byte // the writer's
	waits  sync.Pool
	// sync makes written bytes durable: syncData, or a test's stand-in
	// that holds the writer inside its fsync.
	sync func(*os.File) error
}

type logWaiter struct {
	b  []byte
	ch chan error
}

// openGroupLog creates the log at path; syncFn is syncData but for tests.
func openGroupLog(path string, syncFn func(*os.File) error) (*groupLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: reference log: %w", err)
	}
	// Written out once, so later writes overwrite allocated blocks and an
	// fdatasync carries no size or extent change, as a recycled WAL's.
	_, err = f.WriteAt(make([]byte, groupLogSize), 0)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench: reference log: %w", err)
	}
	l := &groupLog{f: f, done: make(chan struct{}), sync: syncFn}
	l.cond = sync.NewCond(&l.mu)
	l.waits.New = func() any { return make(chan error, 1) }
	go l.run()
	return l, nil
}

// append returns once b is written and fdatasync'd.
func (l *groupLog) append(b []byte) error {
	ch := l.waits.Get().(chan error)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.waits.Put(ch)
		return errLogClosed
	}
	l.queue = append(l.queue, logWaiter{b, ch})
	l.mu.Unlock()
	l.cond.Signal()
	err := <-ch
	l.waits.Put(ch)
	return err
}

func (l *groupLog) run() {
	defer close(l.done)
	var batch []logWaiter
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && !l.closed {
			l.cond.Wait()
		}
		if len(l.queue) == 0 {
			l.mu.Unlock()
			return
		}
		batch, l.queue = l.queue, batch[:0]
		l.mu.Unlock()
		l.buf = l.buf[:0]
		for _, w := range batch {
			l.buf = append(l.buf, w.b...)
		}
		err := l.write(l.buf)
		l.fsyncs.Add(1)
		l.bodies.Add(uint64(len(batch)))
		for _, w := range batch {
			w.ch <- err
		}
		clear(batch)
	}
}

// write puts p at the log's offset, wrapping at its end, and syncs it.
func (l *groupLog) write(p []byte) error {
	if int64(len(p)) > groupLogSize {
		p = p[:groupLogSize]
	}
	if l.off+int64(len(p)) > groupLogSize {
		l.off = 0
	}
	if _, err := l.f.WriteAt(p, l.off); err != nil {
		return err
	}
	l.off += int64(len(p))
	return l.sync(l.f)
}

// counts are the fsyncs and bodies so far.
func (l *groupLog) counts() [2]uint64 { return [2]uint64{l.fsyncs.Load(), l.bodies.Load()} }

// close answers what is queued, stops the writer and closes the file.
func (l *groupLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cond.Broadcast()
	<-l.done
	_ = l.f.Close()
}

// fsyncCalibrator measures what one fdatasync of a given size costs this
// host in process CPU, as BenchmarkGroupFsync does, so that nullsync and
// disk, which sync in groups of different sizes and rates, can be compared
// as if both paid disk's fsyncs. The cost is the host's and drifts
// (BenchmarkGroupFsync: 55-62 us a call on 2026-12-06, 26-28 on
// 2026-12-07, the same VM), so it is measured in the run, just after the
// run it prices.
type fsyncCalibrator struct {
	f      *os.File
	size   int64 // the file's, all of it allocated
	budget int   // bytes one pricing writes at most (but calibrationMinCalls)
	buf    []byte
}

const (
	// calibrationFileSize is the calibration file's first size; writes
	// wrap around it, and a larger group grows it to fit.
	calibrationFileSize = 16 << 20
	// calibrationBytes bounds what one pricing writes: 300 calls of a
	// small group (20-80 ms on this host), fewer of a large one, never
	// fewer than calibrationMinCalls.
	calibrationBytes    = 128 << 20
	calibrationMaxCalls = 300
	calibrationMinCalls = 8
)

// newFsyncCalibrator creates its file at path, size bytes written out and
// synced once so that later fdatasyncs carry no size or extent change, as
// a recycled WAL's; one pricing writes about budget bytes
// (calibrationBytes but for tests).
func newFsyncCalibrator(path string, size int64, budget int) (*fsyncCalibrator, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: fsync calibration: %w", err)
	}
	c := &fsyncCalibrator{f: f, budget: budget}
	if err := c.grow(size); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return c, nil
}

// grow writes the file out to size bytes (of c.fill's pattern) and syncs.
func (c *fsyncCalibrator) grow(size int64) error {
	for c.size < size {
		n := min(size-c.size, 1<<20)
		if _, err := c.f.WriteAt(c.fill(int(n)), c.size); err != nil {
			return fmt.Errorf("bench: fsync calibration: %w", err)
		}
		c.size += n
	}
	if err := c.f.Sync(); err != nil {
		return fmt.Errorf("bench: fsync calibration: %w", err)
	}
	return nil
}

// fill is n bytes of random data, so that a compressing filesystem or a
// disk that skips zeros writes what a WAL of hooks would.
func (c *fsyncCalibrator) fill(n int) []byte {
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
		_, _ = crand.Read(c.buf) // never fails (crypto/rand, Go 1.24+)
	}
	return c.buf[:n]
}

// cpuPerSync writes groupBytes and fdatasyncs it, calls times, and returns
// the process CPU per call (the write's included, as a group commit's
// is). It runs between runs, when nothing else in the process is busy, so
// the process's CPU is its own; ok is false where the process's CPU cannot
// be read.
func (c *fsyncCalibrator) cpuPerSync(ctx context.Context, groupBytes int) (cpu time.Duration, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	groupBytes = max(1, groupBytes)
	if err := c.grow(int64(groupBytes)); err != nil {
		return 0, false, err
	}
	calls := min(calibrationMaxCalls, max(calibrationMinCalls, c.budget/groupBytes))
	p := c.fill(groupBytes)
	// What the run left for the collector and the scavenger is done now,
	// not on the calibration's CPU.
	debug.FreeOSMemory()
	start, ok := processCPU()
	if !ok {
		return 0, false, nil
	}
	var off int64
	for range calls {
		if err := ctx.Err(); err != nil {
			return 0, false, err
		}
		if off+int64(len(p)) > c.size {
			off = 0
		}
		if _, err := c.f.WriteAt(p, off); err != nil {
			return 0, false, fmt.Errorf("bench: fsync calibration: %w", err)
		}
		off += int64(len(p))
		if err := syncData(c.f); err != nil {
			return 0, false, fmt.Errorf("bench: fsync calibration: %w", err)
		}
	}
	end, ok := processCPU()
	if !ok {
		return 0, false, nil
	}
	return (end - start) / time.Duration(calls), true, nil
}

func (c *fsyncCalibrator) close() { _ = c.f.Close() }

// fsyncMatchedCPU is nullsync's CPU per 201 as if it had paid disk's
// fsyncs per hook instead of its own: its calibrated fsync CPU per hook
// taken out, disk's put in. ok is false unless both runs were calibrated.
func fsyncMatchedCPU(nullsync, disk *Result) (time.Duration, bool) {
	c, ok := cpuPerReq(*nullsync)
	if !ok || nullsync.FsyncCPU <= 0 || disk.FsyncCPU <= 0 || nullsync.Hooks == 0 || disk.Hooks == 0 {
		return 0, false
	}
	own := float64(nullsync.FsyncCPU) * float64(nullsync.Fsyncs) / float64(nullsync.Hooks)
	disks := float64(disk.FsyncCPU) * float64(disk.Fsyncs) / float64(disk.Hooks)
	m := float64(c) - own + disks
	if m <= 0 {
		return 0, false
	}
	return time.Duration(m), true
}
