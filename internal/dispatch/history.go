package dispatch

// History: delivered hooks kept for Options.Retention, their attempt log,
// the sweep that removes them, the listing behind GET /v1/hooks and resend.
//
// Invariants:
//
//  1. A hook whose every delivery is delivered is either removed at once
//     (Retention 0) or has exactly one retained row g + delivered_at + seq,
//     whose value is its body size; retained is the sum of those values.
//     delivered_at is the newest NextAtMs of its delivery rows (record
//     stamps a delivered or dead row's NextAtMs with when that happened),
//     so the row can be found again from the hook alone.
//  2. The sweep removes a retained hook once delivered_at + Retention has
//     passed, and, while retained > RetentionMaxBytes, the oldest retained
//     hooks first whatever their age (the budget wins over the duration).
//  3. A resend turns the chosen deliveries back into due rows (removing the
//     retained row, or the dead row, that they leave) in one batch on the
//     loop goroutine, like every other dispatch write.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/store"
)

// sweepBatch bounds the hooks one sweep pass removes, so a pass never
// holds the loop (and ingest's dispatch wake-ups) for long.
const sweepBatch = 512

// logAttempt adds the attempt log row of a finished attempt to b.
func (d *Dispatcher) logAttempt(b *store.Batch, c claimed, dl *store.Delivery, result string, r result, nowMs int64) {
	a := store.Attempt{AtMs: nowMs, Result: result, LatencyMs: r.dur.Milliseconds(), ReplayID: dl.ReplayID}
	if r.err != nil {
		a.Error = truncate(r.err.Error(), maxErrorLen)
	}
	b.PutAttempt(c.seq, c.num, dl.Attempts, &a)
}

// keep writes the retained row of a fully delivered hook (invariant 1).
func (d *Dispatcher) keep(b *store.Batch, seq uint64, deliveredAtMs int64, size int) {
	b.PutRetained(store.RetainedRow{AtMs: deliveredAtMs, Seq: seq, Size: int64(size)})
}

// loadRetained sums the retained rows at start (invariant 1).
func (d *Dispatcher) loadRetained() error {
	var n, bytes int64
	err := d.st.ScanRetained(func(r store.RetainedRow) bool {
		n++
		bytes += r.Size
		return true
	})
	if err != nil {
		return fmt.Errorf("read retained hooks: %w", err)
	}
	d.retainedHooks.Store(n)
	d.retainedBytes.Store(bytes)
	return nil
}

// victim is a retained hook the sweep removes.
type victim = store.RetainedRow

// pick lists up to sweepBatch retained hooks that invariant 2 says must go,
// oldest first, stopping once their bodies reach maxBytes (0: no bound; at
// least one is always taken). It only reads, so the archive goroutine
// calls it off the loop. more reports whether others are due now.
func (d *Dispatcher) pick(maxBytes int64) (vs []victim, more bool, err error) {
	nowMs := d.o.Now().UnixMilli()
	cutoff := nowMs - d.o.Retention.Milliseconds()
	over := d.retainedBytes.Load() - d.o.RetentionMaxBytes
	var total int64
	err = d.st.ScanRetained(func(r store.RetainedRow) bool {
		if r.AtMs > cutoff && over <= 0 {
			return false // oldest first: nothing after this is due either
		}
		if len(vs) == sweepBatch || (maxBytes > 0 && len(vs) > 0 && total >= maxBytes) {
			more = true
			return false
		}
		over -= r.Size
		total += r.Size
		vs = append(vs, r)
		return true
	})
	return vs, more, err
}

// sweep removes up to sweepBatch retained hooks that invariant 2 says must
// go. It reports whether more are due now. With an archive the archive
// goroutine sweeps instead (archive.go).
func (d *Dispatcher) sweep() (more bool) {
	vs, more, err := d.pick(0)
	if err != nil {
		d.log.Warn("history sweep: scan failed", "err", err)
		return false
	}
	if len(vs) == 0 {
		return false
	}
	if err := d.remove(vs, false); err != nil {
		d.log.Warn("history sweep failed; retried at the next pass", "err", err)
		return false
	}
	return more
}

// remove deletes every row of the victims in one batch, on the loop. With
// recheck (the victims were picked off the loop) a victim whose retained
// row is gone by now — resent since — is left alone.
func (d *Dispatcher) remove(vs []victim, recheck bool) error {
	b := d.st.NewBatch()
	defer b.Close()
	hooks, rows, bytes := 0, 0, int64(0)
	for _, v := range vs {
		if recheck {
			if _, ok, err := d.st.ReadRetained(v.AtMs, v.Seq); err != nil {
				return fmt.Errorf("read retained row of %d: %w", v.Seq, err)
			} else if !ok {
				continue
			}
		}
		b.DropRetained(v)
		hooks++
		bytes += v.Size
		hv, err := d.st.ReadHook(v.Seq)
		if err != nil {
			return fmt.Errorf("read hook %d: %w", v.Seq, err)
		}
		if hv == nil {
			continue // the retained row outlived its hook: drop the row
		}
		env, err := store.DecodeEnvelope(hv)
		if err != nil {
			d.log.Error("history sweep: corrupt hook; its retained row is dropped, the hook kept", "seq", v.Seq, "err", err)
			continue
		}
		pending, err := d.undelivered(v.Seq)
		if err != nil {
			return fmt.Errorf("read deliveries of hook %d: %w", v.Seq, err)
		}
		if pending {
			// Invariant 3 broken somewhere: never remove a hook with a
			// delivery still to make. Its retained row goes (it is stale);
			// the hook stays and is retained again once delivered.
			d.log.Error("history sweep: a retained hook has an undelivered delivery; its retained row is dropped, the hook kept", "seq", v.Seq)
			continue
		}
		hr, err := d.st.StoredRows(env)
		if err != nil {
			return fmt.Errorf("read rows of hook %d: %w", v.Seq, err)
		}
		d.hot.forget(v.Seq) // H1
		rows += b.DeleteHook(hr)
	}
	if hooks == 0 {
		return nil
	}
	// Not synced: a sweep lost in a crash is done again by the next one
	// (and, with an archive, the segment written again under its key).
	if err := d.apply(b, false); err != nil {
		return err
	}
	d.retainedHooks.Add(-int64(hooks))
	d.retainedBytes.Add(-bytes)
	d.o.OnReclaim(hooks, rows)
	return nil
}

// undelivered reports whether hook seq has a delivery row that is not
// delivered (or cannot be read as one).
func (d *Dispatcher) undelivered(seq uint64) (bool, error) {
	pending := false
	err := d.st.ScanDeliveries(seq, func(_ uint16, v []byte) bool {
		if dl, err := store.DecodeDelivery(v); err != nil || dl.State != store.StateDelivered {
			pending = true
			return false
		}
		return true
	})
	return pending, err
}

// Errors of Resend.
var (
	ErrNoHook     = errors.New("no such hook")
	ErrNoSink     = errors.New("the hook has no such sink")
	ErrPending    = errors.New("a delivery of this hook is still pending")
	ErrNotDurable = errors.New("the hook is not durable yet")
)

// ResendResult is the answer of a resend.
type ResendResult struct {
	ResendID string   `json:"resend_id"`
	Sinks    []string `json:"sinks"`
}

// Resend delivers the hook id again to sinkID (every sink when empty):
// each chosen delivery becomes due now, tagged with a new resend id as its
// replay id (x-ankusa-replay-id), and goes through the normal dispatcher
// with its retries. A delivery still due or in flight refuses the whole
// resend (ErrPending); nothing changes then.
func (d *Dispatcher) Resend(ctx context.Context, id [16]byte, sinkID string) (ResendResult, error) {
	var res ResendResult
	var rerr error
	err := d.do(ctx, func() { res, rerr = d.resend(id, sinkID) })
	if err != nil {
		return ResendResult{}, err
	}
	return res, rerr
}

func (d *Dispatcher) resend(id [16]byte, sinkID string) (ResendResult, error) {
	seq, ok, err := d.st.LookupHookID(id)
	if err != nil {
		return ResendResult{}, err
	}
	if !ok {
		return ResendResult{}, ErrNoHook
	}
	if seq > d.o.Durable() {
		return ResendResult{}, ErrNotDurable
	}
	hv, err := d.st.ReadHook(seq)
	if err != nil {
		return ResendResult{}, err
	}
	if hv == nil {
		return ResendResult{}, ErrNoHook
	}
	env, err := store.DecodeEnvelope(hv)
	if err != nil {
		return ResendResult{}, err
	}
	type row struct {
		num uint16
		dl  *store.Delivery
	}
	var all, chosen []row
	var decodeErr error
	err = d.st.ScanDeliveries(seq, func(num uint16, v []byte) bool {
		dl, err := store.DecodeDelivery(v)
		if err != nil {
			decodeErr = err
			return false
		}
		all = append(all, row{num, dl})
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return ResendResult{}, err
	}
	retainedAt, retained := int64(0), len(all) > 0
	for _, r := range all {
		if r.dl.State != store.StateDelivered {
			retained = false
		}
		retainedAt = max(retainedAt, r.dl.NextAtMs)
		if sinkID == "" || r.dl.SinkID == sinkID {
			chosen = append(chosen, r)
		}
	}
	if len(chosen) == 0 {
		return ResendResult{}, ErrNoSink
	}
	for _, r := range chosen {
		if r.dl.State == store.StateDue || r.dl.State == store.StateInflight {
			return ResendResult{}, ErrPending
		}
	}
	nowMs := d.o.Now().UnixMilli()
	res := ResendResult{ResendID: "resend-" + uuid.Must(uuid.NewV7()).String()}
	b := d.st.NewBatch()
	defer b.Close()
	var dropped store.RetainedRow
	wasRetained := false
	if retained {
		// The hook leaves the retained set until it is delivered again —
		// also with retention now off: a row an earlier run kept would
		// otherwise let the sweep remove the hook under its resent delivery.
		rr, ok, err := d.st.ReadRetained(retainedAt, seq)
		if err != nil {
			return ResendResult{}, err
		}
		if ok {
			dropped, wasRetained = rr, true
			b.DropRetained(rr)
		}
	}
	dead := 0
	for _, r := range chosen {
		if r.dl.State == store.StateDead {
			dr, ok, err := d.st.FindDead(seq, r.num, r.dl.NextAtMs)
			if err != nil {
				return ResendResult{}, err
			}
			if ok {
				b.DropDead(dr)
				dead++
			}
		}
		dl := *r.dl
		d.hot.forget(seq) // H1
		b.Resend(seq, r.num, &dl, nowMs, res.ResendID)
		res.Sinks = append(res.Sinks, dl.SinkID)
	}
	// Synced: the operator was told the resend is queued.
	if err := d.apply(b, true); err != nil {
		return ResendResult{}, err
	}
	if wasRetained {
		d.retainedHooks.Add(-1)
		d.retainedBytes.Add(-dropped.Size)
	}
	d.deadGauge.Add(-int64(dead))
	d.noteDue(nowMs)
	d.log.Info("resend queued", "id", uuid.UUID(env.ID).String(), "resend_id", res.ResendID, "sinks", res.Sinks)
	d.Wake()
	return res, nil
}

// HookFilter narrows GET /v1/hooks. Empty fields match everything.
type HookFilter struct {
	Source, Tenant, DedupeKey string
	State                     string // pending | delivered | dead
	Since, Until              time.Time
	Limit                     int
	// Before is the cursor: only hooks with a lower seq (0 = from the newest).
	Before uint64
}

// HookSummary is one row of GET /v1/hooks.
type HookSummary struct {
	ID          string           `json:"id"`
	Seq         uint64           `json:"seq"`
	Tenant      string           `json:"tenant"`
	Source      string           `json:"source"`
	ReceivedAt  string           `json:"received_at"`
	Size        int              `json:"size"`
	ContentType string           `json:"content_type"`
	DedupeKey   *string          `json:"dedupe_key"`
	State       string           `json:"state"`
	Deliveries  []DeliverySketch `json:"deliveries"`
}

// DeliverySketch is one delivery of a HookSummary.
type DeliverySketch struct {
	Sink      string `json:"sink"`
	State     string `json:"state"`
	Attempts  uint32 `json:"attempts"`
	LastError string `json:"last_error"`
}

// maxExamine bounds the hooks one listing page reads, whatever the filter
// matches: a page that hits it ends early with a cursor to go on from.
const maxExamine = 1000

// sinceSlack: seq order is commit order, received_at is set when the
// request began, and a hook waits at most batcher.deadline_ms (≤ 120 s) to
// commit. A scan newest first may stop once it meets a hook received this
// long before since: nothing older in seq order can be newer than since.
const sinceSlack = 2 * time.Minute

// Hooks lists hooks newest first (by seq). Hooks of one source or tenant
// are found through their index; dedupe_key with both source and tenant
// is one lookup; other filters are checked on each hook read. Next is the
// cursor of the next page, 0 when the listing is done.
func (d *Dispatcher) Hooks(f HookFilter) (out []HookSummary, next uint64, err error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	durable := d.o.Durable()
	var seqs func(fn func(seq uint64) bool) error
	switch {
	case f.DedupeKey != "" && f.Source != "" && f.Tenant != "":
		seqs = func(fn func(uint64) bool) error {
			e, err := d.st.ReadDedupe(f.Tenant, f.Source, f.DedupeKey)
			if err != nil || e == nil {
				return err
			}
			if f.Before == 0 || e.Seq < f.Before {
				fn(e.Seq)
			}
			return nil
		}
	case f.Source != "" || f.Tenant != "":
		seqs = func(fn func(uint64) bool) error {
			return d.st.ScanIndexReverse(f.Source, f.Tenant, f.Before, fn)
		}
	default:
		seqs = func(fn func(uint64) bool) error {
			return d.st.ScanHookSeqsReverse(f.Before, fn)
		}
	}
	examined := 0
	var inner error
	err = seqs(func(seq uint64) bool {
		if seq > durable {
			return true // not acked yet: not history
		}
		if examined == maxExamine {
			next = seq + 1 // resume at this seq (Before is exclusive)
			return false
		}
		examined++
		h, stop, err := d.summary(seq, f)
		if err != nil {
			inner = err
			return false
		}
		if stop {
			next = 0
			return false
		}
		if h == nil {
			return true
		}
		if len(out) == f.Limit {
			next = seq + 1
			return false
		}
		out = append(out, *h)
		return true
	})
	if err == nil {
		err = inner
	}
	return out, next, err
}

// summary reads one hook and applies the filters: nil when it does not
// match; stop when no older hook can match (past since).
func (d *Dispatcher) summary(seq uint64, f HookFilter) (h *HookSummary, stop bool, err error) {
	hv, err := d.st.ReadHook(seq)
	if err != nil || hv == nil {
		return nil, false, err
	}
	env, err := store.DecodeEnvelope(hv)
	if err != nil {
		return nil, false, fmt.Errorf("hook %d: %w", seq, err)
	}
	rcv := time.Unix(0, env.ReceivedAt)
	switch {
	case !f.Since.IsZero() && rcv.Before(f.Since.Add(-sinceSlack)):
		return nil, true, nil
	case !f.Since.IsZero() && rcv.Before(f.Since),
		!f.Until.IsZero() && rcv.After(f.Until),
		f.Source != "" && env.Source != f.Source,
		f.Tenant != "" && env.Tenant != f.Tenant,
		f.DedupeKey != "" && env.DedupeKey != f.DedupeKey:
		return nil, false, nil
	}
	s := &HookSummary{
		ID: uuid.UUID(env.ID).String(), Seq: seq, Tenant: env.Tenant, Source: env.Source,
		ReceivedAt: rcv.UTC().Format(time.RFC3339Nano), Size: len(env.Body), ContentType: env.ContentType,
		Deliveries: []DeliverySketch{},
	}
	if env.DedupeKey != "" {
		s.DedupeKey = &env.DedupeKey
	}
	pending, dead := false, false
	var decodeErr error
	err = d.st.ScanDeliveries(seq, func(num uint16, v []byte) bool {
		dl, err := store.DecodeDelivery(v)
		if err != nil {
			decodeErr = err
			return false
		}
		switch dl.State {
		case store.StateDue, store.StateInflight:
			pending = true
		case store.StateDead:
			dead = true
		}
		s.Deliveries = append(s.Deliveries, DeliverySketch{Sink: dl.SinkID, State: d.ViewState(seq, num, dl), Attempts: dl.Attempts, LastError: dl.LastError})
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return nil, false, fmt.Errorf("deliveries of %d: %w", seq, err)
	}
	if len(s.Deliveries) == 0 {
		return nil, false, nil // reclaimed between the reads
	}
	switch {
	case pending:
		s.State = "pending"
	case dead:
		s.State = "dead"
	default:
		s.State = "delivered"
	}
	if f.State != "" && f.State != s.State {
		return nil, false, nil
	}
	return s, false, nil
}

// AttemptView is one attempt of a hook's log.
type AttemptView struct {
	At        string `json:"at"`
	Sink      string `json:"sink"`
	N         uint32 `json:"n"`
	Result    string `json:"result"`
	LatencyMs int64  `json:"latency_ms"`
	Error     string `json:"error,omitempty"`
	ReplayID  string `json:"replay_id,omitempty"`
}

// Attempts reads the attempt log of the hook at seq, oldest first; sinks
// maps the sink numbers to their ids.
func Attempts(st *store.Store, seq uint64, sinks map[uint16]string) ([]AttemptView, error) {
	type row struct {
		at  int64
		num uint16
		n   uint32
		a   *store.Attempt
	}
	var rs []row
	var decodeErr error
	err := st.ScanAttempts(seq, func(num uint16, n uint32, v []byte) bool {
		a, err := store.DecodeAttempt(v)
		if err != nil {
			decodeErr = err
			return false
		}
		rs = append(rs, row{a.AtMs, num, n, a})
		return true
	})
	if err == nil {
		err = decodeErr
	}
	slices.SortStableFunc(rs, func(x, y row) int {
		if c := cmp.Compare(x.at, y.at); c != 0 {
			return c
		}
		return cmp.Compare(x.n, y.n)
	})
	out := make([]AttemptView, 0, len(rs))
	for _, r := range rs {
		out = append(out, AttemptView{
			At: time.UnixMilli(r.at).UTC().Format(time.RFC3339Nano), Sink: sinks[r.num], N: r.n,
			Result: r.a.Result, LatencyMs: r.a.LatencyMs, Error: r.a.Error, ReplayID: r.a.ReplayID,
		})
	}
	return out, err
}
