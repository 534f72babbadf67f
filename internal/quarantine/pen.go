// Package quarantine is the durable pen for hooks that failed verification
// on a source with on_verify_failure: quarantine (CONTRACTS "Verification").
//
// A held hook is one row in the store's 'p' family, written with one synced
// batch before the edge answers 202. The pen never evicts: past MaxBytes a
// hold is refused (503 quarantine_full), and each source spends a token
// bucket per hold (429 quarantine_rate_limited), so a forged flood costs
// the pen's budget and never a real hook's slot. Operators list and purge
// the pen (GET/DELETE /v1/quarantine) and release it through a replay job
// of kind quarantine (Release), which re-verifies each hook with the
// source's current secrets and commits those that pass under their
// original ids.
package quarantine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/ratelimit"
	"github.com/ankusa/ankusa/internal/store"
)

// Defaults of Options, the config defaults (CONTRACTS "Verification").
const (
	DefaultMaxBytes int64   = 1 << 30
	DefaultRate     float64 = 20
	DefaultBurst            = 100
)

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ErrUnfiltered: Purge was given no criterion and not All.
var ErrUnfiltered = errors.New("quarantine: purge needs a source, an id, a time range, or all")

// RateLimitedError is Hold's answer past a source's token bucket; the edge
// answers 429 quarantine_rate_limited with Retry-After from RetryAfter.
type RateLimitedError struct {
	SourceID string
	Wait     time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("quarantine: source %q over its pen rate; retry after %s", e.SourceID, e.Wait)
}

// RetryAfter is how long until the source's bucket holds a token.
func (e *RateLimitedError) RetryAfter() time.Duration { return e.Wait }

// Options configure a Pen. Zero values take the defaults.
type Options struct {
	// MaxBytes bounds the bodies held, node-wide (quarantine.max_bytes).
	MaxBytes int64
	// Rate and Burst shape each source's token bucket (quarantine.rate,
	// quarantine.burst).
	Rate  float64
	Burst int
	// Now is the buckets' clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// OnStoreFailure, if set, is told of every synced write of the pen's
	// that fails (the queue's ReportStoreFailure): the store refuses every
	// write until it is reopened, and the pen writes outside the commit
	// path, whose failures alone would fence it. Without it, a pen whose
	// write failed while no hook was committed would wait for a reopen
	// nobody starts (its refused holds never deleted, the release stuck).
	OnStoreFailure func(error)
}

// Pen is the quarantine pen over one store. It is safe for concurrent use.
type Pen struct {
	st      *store.Store
	o       Options
	buckets *ratelimit.Buckets
	log     *slog.Logger

	// holds is held shared by every Hold, from its reservation to its
	// write's answer, and exclusively by Recount, so that a recount never
	// meets a hold whose bytes are reserved but whose row is not yet
	// written. Lock order: holds, delMu, refusedMu, mu.
	holds sync.RWMutex
	// mu guards the counters. Hold reserves its bytes under mu before it
	// writes, so concurrent holds can never together pass MaxBytes; a
	// write that fails keeps them reserved until its row is deleted
	// (refused).
	mu      sync.Mutex
	bytes   int64
	records int

	// delMu serialises every delete (Purge, Release, and a release's
	// commit, whose batch deletes the row): a deleter reads the rows it
	// removes under it, so no row's bytes are given back twice.
	delMu sync.Mutex
	// unsettled are rows whose release commit may still take them (carried
	// under dual, or not answered before the step's ctx ended): the queue
	// deletes each with its hook's rows, later; their bytes are given back
	// then (settle). REQUIRES: delMu held.
	unsettled map[store.PenRef]int64
	// refused are holds whose write failed (their caller got a 503): the
	// row may be there all the same, since a failed fsync leaves to the
	// store's reopen whatever reached its WAL. Like the queue's fence for
	// a failed group, the pen deletes them (cleanRefusedLocked) when it
	// next holds (if no other deleter runs), releases, purges or
	// recounts, so the provider's retry is the one hook held; their bytes
	// stay counted until then, and no other deleter touches their rows
	// (R1, release.go). Guarded by refusedMu, which a failed Hold takes
	// alone: a hold never waits for delMu, which a release holds across
	// its commit.
	refusedMu sync.Mutex
	refused   map[store.PenRef]int64
}

// New opens the pen over st and scans it once for its current size.
func New(st *store.Store, o Options) (*Pen, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &Pen{
		st: st, o: o,
		buckets: ratelimit.NewBuckets(o.Rate, o.Burst, o.Now),
		log:     o.Logger.With("component", "quarantine"),
	}
	records, bytes, err := p.count(nil)
	if err != nil {
		return nil, err
	}
	p.records, p.bytes = records, bytes
	return p, nil
}

// Recount scans the pen again for its size. The pen's counters follow
// every row it writes and deletes itself, and the queue's deletes of the
// rows of released hooks (the release accounts for them); a writer that
// deletes pen rows on its own must call it after. Boot recovery is the one
// (ack rule 7, internal/queue: it takes the pen row of a released hook it
// replays from the intake log), and it runs after the pen is opened, so
// the boot recounts when its summary says recovery deleted any
// (queue.Summary.Unheld). Holds, purges and releases wait for it.
func (p *Pen) Recount() error {
	p.holds.Lock()
	defer p.holds.Unlock()
	p.delMu.Lock()
	defer p.delMu.Unlock()
	if err := p.cleanRefusedLocked(); err != nil {
		return err
	}
	seen := make(map[store.PenRef]bool, len(p.unsettled))
	records, bytes, err := p.count(seen)
	if err != nil {
		return err
	}
	// An unsettled row the scan did not find is gone already: its bytes are
	// not in the new count, so settle must not give them back.
	for ref := range p.unsettled {
		if !seen[ref] {
			delete(p.unsettled, ref)
		}
	}
	p.mu.Lock()
	p.records, p.bytes = records, bytes
	p.mu.Unlock()
	return nil
}

// count scans every pen row for the counters, noting in seen, when given,
// which unsettled rows it found. REQUIRES: p.delMu held, or p not yet
// shared (New).
func (p *Pen) count(seen map[store.PenRef]bool) (records int, bytes int64, err error) {
	corrupt := 0
	err = p.st.ScanPen(nil, 0, store.PenOpen, func(r store.PenRow) bool {
		if _, err := parseRow(r.Value); err != nil {
			corrupt++
		}
		if _, ok := p.unsettled[r.PenRef]; ok && seen != nil {
			seen[r.PenRef] = true
		}
		records++
		bytes += accounted(r.Value)
		return true
	})
	if err != nil {
		return 0, 0, fmt.Errorf("quarantine: scan pen: %w", err)
	}
	if corrupt > 0 {
		p.log.Warn("pen holds rows that do not parse; purge them", "rows", corrupt)
	}
	return records, bytes, nil
}

// Stats returns how many hooks the pen holds and their accounted bytes.
func (p *Pen) Stats() (records int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.records, p.bytes
}

// MaxBytes is the pen's byte bound.
func (p *Pen) MaxBytes() int64 { return p.o.MaxBytes }

var _ edge.Quarantine = (*Pen)(nil)

// Hold writes env to the pen with one synced batch: nil means it is
// durable. Past the source's bucket it returns a *RateLimitedError; past
// MaxBytes, edge.ErrQuarantineFull (nothing is evicted). The bytes counted
// are the body's (quarantine.max_bytes bounds bodies).
func (p *Pen) Hold(ctx context.Context, env *store.Envelope, reason string) error {
	if env == nil || env.ID == ([16]byte{}) {
		return errors.New("quarantine: hold needs an envelope with an id")
	}
	if ok, wait := p.buckets.Take(env.Source); !ok {
		return &RateLimitedError{SourceID: env.Source, Wait: wait}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p.holds.RLock()
	defer p.holds.RUnlock()
	if p.delMu.TryLock() {
		// A refused hold's row goes before this one is counted; if that
		// fails, so will this write, and the caller gets the error then.
		_ = p.cleanRefusedLocked()
		p.delMu.Unlock()
	}
	size := int64(len(env.Body))
	p.mu.Lock()
	if p.bytes+size > p.o.MaxBytes {
		p.mu.Unlock()
		return edge.ErrQuarantineFull
	}
	p.bytes += size
	p.records++
	p.mu.Unlock()

	err := p.write(env, reason)
	if err != nil {
		// The row may be there; its bytes stay counted until it is
		// deleted (refused). Noted before the failure is reported, so no
		// release that the fence lets run meets the row unnoted.
		p.refusedMu.Lock()
		if p.refused == nil {
			p.refused = make(map[store.PenRef]int64)
		}
		p.refused[store.HeldRef(env)] = size
		p.refusedMu.Unlock()
		p.reportFailure()
		return err
	}
	return nil
}

// cleanRefused deletes the rows of refused holds (see Pen.refused).
func (p *Pen) cleanRefused() error {
	p.delMu.Lock()
	defer p.delMu.Unlock()
	return p.cleanRefusedLocked()
}

// isRefused reports whether ref is a refused hold's row, which only
// cleanRefusedLocked deletes.
func (p *Pen) isRefused(ref store.PenRef) bool {
	p.refusedMu.Lock()
	defer p.refusedMu.Unlock()
	_, ok := p.refused[ref]
	return ok
}

// cleanRefusedLocked deletes, in one synced batch, every refused hold's
// row, whether or not its write left it, and gives their bytes back.
// REQUIRES: p.delMu held.
func (p *Pen) cleanRefusedLocked() error {
	p.refusedMu.Lock()
	defer p.refusedMu.Unlock()
	if len(p.refused) == 0 {
		return nil
	}
	b := p.st.NewBatch()
	if b.Err() != nil {
		return store.ErrClosed
	}
	defer b.Close()
	n := 0
	var freed int64
	for ref, size := range p.refused {
		_ = b.DeletePen(ref) // a dead batch fails the apply
		n++
		freed += size
	}
	if err := p.apply(b); err != nil {
		return fmt.Errorf("quarantine: delete refused holds: %w", err)
	}
	clear(p.refused)
	p.forget(n, freed)
	return nil
}

func (p *Pen) write(env *store.Envelope, reason string) error {
	b := p.st.NewBatch()
	if b.Err() != nil {
		return store.ErrClosed
	}
	defer b.Close()
	if err := b.PutPen(store.HeldRef(env), encodeRow(env, reason)); err != nil {
		return fmt.Errorf("quarantine: hold: %w", err)
	}
	if err := p.st.ApplySync(b); err != nil { // Hold reports it, once noted
		return fmt.Errorf("quarantine: hold: %w", err)
	}
	return nil
}

// apply applies b synced, and reports a failure (Options.OnStoreFailure).
func (p *Pen) apply(b *store.Batch) error {
	err := p.st.ApplySync(b)
	if err != nil {
		p.reportFailure()
	}
	return err
}

// reportFailure tells Options.OnStoreFailure of the store's failure, if
// the store has failed: a batch of a generation the store has since
// reopened, or a closed store, is refused without that, and must not
// fence a healthy store.
func (p *Pen) reportFailure() {
	if p.o.OnStoreFailure == nil {
		return
	}
	if f := p.st.Failed(); f != nil && !errors.Is(f, store.ErrClosed) {
		p.o.OnStoreFailure(f)
	}
}

// Held describes one held hook, without its body.
type Held struct {
	ID          string    `json:"id"`
	SourceID    string    `json:"source_id"`
	TenantID    string    `json:"tenant_id"`
	ReceivedAt  time.Time `json:"received_at"`
	Size        int64     `json:"size"`
	ContentType string    `json:"content_type"`
	Reason      string    `json:"reason"`
}

// Filter narrows List. Since and Until bound received_at, both inclusive,
// at millisecond precision; zero means open.
type Filter struct {
	SourceID     string
	Since, Until time.Time
	// Limit caps the entries returned: default 100, at most 1000.
	Limit int
}

// rangeOf is store.ScanPen's range of received_at in [since, until] (a
// zero time leaves that end open).
func rangeOf(since, until time.Time) (sinceMs, untilMs int64) {
	sinceMs, untilMs = 0, store.PenOpen
	if !since.IsZero() {
		sinceMs = since.UnixMilli()
	}
	if !until.IsZero() {
		untilMs = until.UnixMilli()
	}
	return sinceMs, untilMs
}

// List returns how many held hooks match f and the newest Limit of them,
// newest first.
func (p *Pen) List(f Filter) (total int, entries []Held, err error) {
	if f.Limit <= 0 {
		f.Limit = DefaultListLimit
	}
	f.Limit = min(f.Limit, MaxListLimit)
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return 0, nil, nil
	}
	sinceMs, untilMs := rangeOf(f.Since, f.Until)
	// The scan runs oldest first; ring keeps the newest Limit matches.
	ring := make([]Held, f.Limit)
	err = p.st.ScanPen(nil, sinceMs, untilMs, func(row store.PenRow) bool {
		id := row.ID
		r, perr := parseRow(row.Value)
		if perr != nil {
			if f.SourceID == "" {
				ring[total%f.Limit] = Held{ID: uuid.UUID(id).String(), Reason: "corrupt_row"}
				total++
			}
			return true
		}
		if f.SourceID != "" && string(r.source) != f.SourceID {
			return true
		}
		ring[total%f.Limit] = Held{
			ID: uuid.UUID(id).String(), SourceID: string(r.source), TenantID: string(r.tenant),
			ReceivedAt: time.Unix(0, r.receivedAtNs).UTC(), Size: r.size,
			ContentType: string(r.contentType), Reason: string(r.reason),
		}
		total++
		return true
	})
	if err != nil {
		return 0, nil, fmt.Errorf("quarantine: list: %w", err)
	}
	n := min(total, f.Limit)
	entries = make([]Held, 0, n)
	for i := range n {
		entries = append(entries, ring[(total-1-i)%f.Limit])
	}
	return total, entries, nil
}

// PurgeFilter selects the held hooks Purge deletes: every given criterion
// must match (source, id, received_at in [Since, Until], either end open).
// With no criterion Purge refuses (ErrUnfiltered) unless All is set.
type PurgeFilter struct {
	SourceID     string
	ID           [16]byte // zero: any
	Since, Until time.Time
	All          bool
}

func (f PurgeFilter) empty() bool {
	return f.SourceID == "" && f.ID == ([16]byte{}) && f.Since.IsZero() && f.Until.IsZero()
}

// Purge deletes the held hooks f selects, in one synced batch, and returns
// how many it deleted.
func (p *Pen) Purge(f PurgeFilter) (int, error) {
	if f.empty() && !f.All {
		return 0, ErrUnfiltered
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return 0, nil
	}
	sinceMs, untilMs := rangeOf(f.Since, f.Until)
	p.delMu.Lock()
	defer p.delMu.Unlock()
	if err := p.cleanRefusedLocked(); err != nil {
		return 0, err
	}
	b := p.st.NewBatch()
	if b.Err() != nil {
		return 0, store.ErrClosed
	}
	defer b.Close()
	n := 0
	var freed int64
	err := p.st.ScanPen(nil, sinceMs, untilMs, func(row store.PenRow) bool {
		if f.ID != ([16]byte{}) && row.ID != f.ID {
			return true
		}
		if p.isRefused(row.PenRef) {
			return true // a hold refused since the clean above: the next clean's
		}
		if _, ok := p.unsettled[row.PenRef]; ok {
			return true // released, its commit not settled: it may still land
		}
		if f.SourceID != "" {
			r, perr := parseRow(row.Value)
			if perr != nil || string(r.source) != f.SourceID {
				return true
			}
		}
		_ = b.DeletePen(row.PenRef)
		n++
		freed += accounted(row.Value)
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("quarantine: purge: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := p.apply(b); err != nil {
		return 0, fmt.Errorf("quarantine: purge: %w", err)
	}
	p.forget(n, freed)
	p.log.Info("quarantine purged", "rows", n, "bytes", freed)
	return n, nil
}

// forget takes deleted rows off the counters.
func (p *Pen) forget(n int, freed int64) {
	p.mu.Lock()
	p.records -= n
	p.bytes -= freed
	p.mu.Unlock()
}
