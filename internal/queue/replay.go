// replay.go owns boot recovery's step 3 (ADR section 8): Recover, the
// replay of this node's tail of the log with its seq-keyed idempotent
// apply, the truncation check, and the republish above the watermark.
// RecoverNode (recovery.go) runs it.

package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/store"
)

// Recover runs the replay and the republish: RecoverNode's step 3, one
// attempt (tests drive it alone).
//
// I2: running Recover again after a run that failed part way (a log
// outage mid-replay or mid-republish) is safe and loses nothing. Each
// chunk's hooks and m:intake_offset are one synced batch (applier.commit),
// so the store's offset never passes a record that is not durably applied
// (nor one set aside as a collision, I4), and the next run replays from
// there; a record applied before is skipped by its hook id (applier.flush,
// I3), never written twice; next_seq only rises; and a republished record
// is one the log may hold twice, which the same apply rule absorbs. The
// watermark (m:intake_seq) moves only after the whole republish, so a
// failed run leaves it where it was.
func Recover(ctx context.Context, st *store.Store, o RecoverOptions) (Summary, error) {
	if o.Chunk <= 0 {
		o.Chunk = 500
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger.With("component", "recovery", "node", o.Node)
	var sum Summary

	from := intake.Position(-1)
	hasOffset := false
	if n, ok, err := st.IntakeOffset(); err != nil {
		return sum, err
	} else if ok {
		from, hasOffset = intake.Position(n), true
	}
	if o.From != nil {
		from = *o.From
	}
	sum.From = from

	next, err := st.NextSeq()
	if err != nil {
		return sum, err
	}
	origin := o.Origin
	if origin == OriginExisting && !hasOffset && next == 1 {
		// A store that never held a hook and never applied a record holds
		// nothing of a gap: it is as fresh as a new one. This is also the
		// boot after a fresh store was refused, which must be refused again.
		origin = OriginFresh
	}

	earliest, err := o.Intake.Earliest(ctx)
	if err != nil {
		return sum, fmt.Errorf("earliest position: %w", err)
	}
	sum.Earliest = earliest
	// I1 (ADR section 8 step 4): a store refuses a log that no longer
	// reaches back to what it needs. A store with an offset needs offset+1
	// on; a fresh one needs this node's first record.
	if earliest > from+1 && (hasOffset || origin != OriginExisting) {
		gap, err := truncated(ctx, o.Intake, earliest, hasOffset, next)
		if err != nil {
			return sum, err
		}
		sum.Gap = gap
	}
	if sum.Gap {
		switch {
		case origin == OriginExisting:
			// Every hook in the gap is in this store already.
			log.Warn("intake log truncated past the store's offset; this store holds the gap locally", "offset", from, "earliest", earliest)
		case !o.AllowGap:
			return sum, fmt.Errorf("%w: the store needs the log from position %d, the earliest retained is %d; run ankusa recover --allow-gap to accept the loss", ErrIntakeTruncated, from+1, earliest)
		default:
			log.Error("recovering over a gap in the intake log: hooks in it are lost", "wanted", from+1, "earliest", earliest, "lost_positions", earliest-from-1)
			if !o.DryRun {
				if err := audit(st, o.Now(), "intake.recover.allow_gap", map[string]any{
					"node": o.Node, "wanted": from + 1, "earliest": earliest, "lost_positions": earliest - from - 1,
				}); err != nil {
					return sum, err
				}
			}
		}
	}

	a := &applier{st: st, o: o, sum: &sum, next: next, log: log, replayed: o.Replayed}
	err = o.Intake.Replay(ctx, from, func(r intake.Record, pos intake.Position) error {
		sum.Records++
		sum.Last = pos
		a.add(r, pos)
		if len(a.pending) >= o.Chunk {
			return a.flush()
		}
		return nil
	})
	if err == nil {
		err = a.flush()
	}
	if err == nil {
		err = a.flushCollided()
	}
	if err != nil {
		return sum, fmt.Errorf("replay: %w", err)
	}
	if err := republish(ctx, st, o, &sum, a.next, a.replayed); err != nil {
		return sum, err
	}
	log.Info("intake recovery done", "summary", sum.String(), "from", from, "earliest", earliest)
	return sum, nil
}

// errFirstFound stops truncated's one-record replay.
var errFirstFound = errors.New("first retained record found")

// truncated decides whether the positions below earliest that the store
// needs held records of this node that are gone. Positions alone cannot
// say: on a log shared by several nodes (a JetStream stream, a Kafka
// partition two node ids hash to) other nodes' records sit between this
// node's, and an idle node's last record ages out with no loss at all. The
// node's seqs can: they rise with every hook, so when the first record of
// this node still held carries a seq the store already reached (below
// next, the store's next seq), nothing the store lacks was dropped before
// it. A seq above next means records the store never held were dropped.
//
// When the log holds no record of this node at or after earliest, a
// restored store (hasOffset) is refused: the positions it needs are gone
// and nothing shows whose they were. A fresh store is not: its log for
// this node is empty. (The JetStream adapter answers an Earliest of -1 for
// a node with no record held, so this case is the partitioned logs'.)
//
// Not caught on a shared log: a dropped record that a republish had
// ordered behind the first held one (a carried record confirmed late). The
// reordering spans at most the publishes in flight and the reconciler's
// retries. A log only this node writes is judged by its positions.
func truncated(ctx context.Context, in intake.Intake, earliest intake.Position, hasOffset bool, next uint64) (bool, error) {
	if _, shared := in.(intake.Positioner); !shared {
		// A log only this node writes (the memory log: one file per node)
		// has no other node's records between its positions: every
		// position the store needs that is gone held one of its records,
		// so the positions do say. This also catches what the seq test
		// below cannot, a dropped record a republish ordered behind the
		// first one held (seen by the simulator's rule C).
		return true, nil
	}
	var first *intake.Record
	err := in.Replay(ctx, earliest-1, func(r intake.Record, _ intake.Position) error {
		first = &r
		return errFirstFound
	})
	if err != nil && !errors.Is(err, errFirstFound) {
		return false, fmt.Errorf("read the first retained record: %w", err)
	}
	if first == nil {
		return hasOffset, nil
	}
	return first.Seq > next, nil
}

type replayed struct {
	r   intake.Record
	pos intake.Position
}

// applier applies replayed records in chunks, one synced batch each, with
// the offset advanced in the same batch.
type applier struct {
	st       *store.Store
	o        RecoverOptions
	sum      *Summary
	next     uint64
	pending  []replayed
	collided []replayed
	// aside holds the hook ids of collided (I3).
	aside map[[16]byte]bool
	// last is the position of the last record added; hold the one before
	// the first record of collided (I4).
	last, hold intake.Position
	// replayed holds the seqs this replay wrote: they are in the log, so
	// the republish skips them.
	replayed map[uint64]bool
	// claims are this chunk's replayed dedupe keys, told to OnApplied once
	// the chunk is durable.
	claims []appliedClaim
	log    *slog.Logger
}

type appliedClaim struct {
	tenant, source, key string
	id                  [16]byte
	expires             time.Time
}

func (a *applier) add(r intake.Record, pos intake.Position) {
	a.pending = append(a.pending, replayed{r, pos})
	a.last = pos
}

// flush applies the chunk. The rule, keyed by seq and hook id:
//   - no hook at the seq: write it with its original seq and raise next_seq;
//   - the same hook id at the seq: skip (every duplicate or reordered record);
//   - another hook id: a collision — never overwrite; write under a fresh seq.
//
// I3: one hook id, one hook row. A record is present, and skipped, when
// its hook id is stored (an earlier run or chunk wrote it, at its seq or
// re-sequenced), written by this chunk, or set aside by this replay as a
// collision; flushCollided applies the same rule again before it writes.
// Both matter: the log may hold a colliding record twice (a retried
// publish, a republish), and may hold its id under the fresh seq an
// earlier recovery gave it, applied by this replay after the record was
// set aside. Two rows for one id are two deliveries, and the id index
// names only one.
func (a *applier) flush() error {
	if len(a.pending) == 0 {
		return nil
	}
	b := a.st.NewBatch()
	defer b.Close()
	inChunk := map[uint64][16]byte{}
	ids := map[[16]byte]bool{}
	for _, p := range a.pending {
		env, err := store.DecodeEnvelope(p.r.Value)
		if err != nil {
			a.log.Warn("replay: undecodable hook record skipped", "seq", p.r.Seq, "err", err)
			continue
		}
		// Present by id first (I3).
		if ids[env.ID] || a.aside[env.ID] {
			a.sum.Present++
			continue
		}
		if has, err := a.st.HookIDStored(env.ID); err != nil {
			return err
		} else if has {
			a.sum.Present++
			continue
		}
		seq := p.r.Seq
		existing, seen := inChunk[seq]
		if !seen {
			v, err := a.st.ReadHook(seq)
			if err != nil {
				return err
			}
			if v != nil {
				if e, err := store.DecodeEnvelope(v); err == nil {
					existing, seen = e.ID, true
				}
			}
		}
		if seen {
			// A collision: never overwrite. It is written after the whole
			// replay, under a seq above every replayed one, so it cannot
			// collide again with a record still to come.
			a.sum.Collided++
			a.log.Error("replay: seq collision, the record gets a fresh seq (two live nodes shared a node id?)",
				"seq", seq, "stored_id", fmt.Sprintf("%x", existing), "log_id", fmt.Sprintf("%x", env.ID))
			if len(a.collided) == 0 {
				a.hold = p.pos - 1
			}
			a.collided = append(a.collided, p)
			if a.aside == nil {
				a.aside = map[[16]byte]bool{}
			}
			a.aside[env.ID] = true
			continue
		}
		if err := a.write(b, env, seq); err != nil {
			return err
		}
		inChunk[seq] = env.ID
		ids[env.ID] = true
	}
	return a.commit(b)
}

// flushCollided writes the collided records under fresh seqs, each unless
// its hook id was stored meanwhile (I3).
func (a *applier) flushCollided() error {
	if len(a.collided) == 0 {
		return nil
	}
	b := a.st.NewBatch()
	defer b.Close()
	for _, p := range a.collided {
		env, err := store.DecodeEnvelope(p.r.Value)
		if err != nil {
			continue
		}
		if has, err := a.st.HookIDStored(env.ID); err != nil {
			return err
		} else if has {
			a.sum.Present++
			continue
		}
		if err := a.write(b, env, a.next); err != nil {
			return err
		}
	}
	a.collided = nil
	return a.commit(b)
}

// write adds one hook under seq to b, and the delete of the pen row it
// was released from, if the store still holds one (ack rule 7).
//
// A record names no pen row, but a released hook keeps the id and receive
// time it was held under, so its envelope names the row
// (store.HeldRef). The row is there when the release's local half was lost
// after the log confirmed it: a carried commit and then a crash (the fence
// had put the row back), or a store restored from a backup taken before
// the release. Left there, the release's next step would commit the hook
// again once this one was delivered and reclaimed (the id row it looks for
// is then gone): one id, two deliveries. A point read first, then a delete
// only of a row that exists: almost no replayed hook was ever held, and a
// blind delete would leave a tombstone per replayed hook for every pen
// scan to step over until a compaction. The read costs one Get per
// replayed hook, at boot only, beside the id and seq reads flush makes for
// it already.
func (a *applier) write(b *store.Batch, env *store.Envelope, seq uint64) error {
	ref := store.HeldRef(env)
	held, err := a.st.ReadPen(ref)
	if err != nil {
		return fmt.Errorf("read the pen row of hook %x: %w", env.ID, err)
	}
	if held != nil {
		_ = b.DeletePen(ref) // a dead batch fails the chunk's apply
		a.sum.Unheld++
	}
	route, ok := a.o.Resolve(env.Source)
	if !ok {
		a.sum.Unroutable++
		a.log.Warn("replay: unknown source; the hook is stored without deliveries", "source", env.Source, "seq", seq)
	}
	env.Seq = seq
	h := &store.NewHook{Env: env, Sinks: route.Sinks, DueAtMs: a.o.Now().UnixMilli()}
	if env.DedupeKey != "" && route.DedupeTTL > 0 {
		exp := time.Unix(0, env.ReceivedAt).Add(route.DedupeTTL).UnixMilli()
		h.Dedupe, h.DedupeExpiresAtMs = exp > a.o.Now().UnixMilli(), exp
	}
	_, _ = b.PutHook(h) // a dead batch fails the chunk's apply
	if env.DedupeKey != "" && route.DedupeTTL > 0 && a.o.OnApplied != nil {
		a.claims = append(a.claims, appliedClaim{env.Tenant, env.Source, env.DedupeKey, env.ID,
			time.Unix(0, env.ReceivedAt).Add(route.DedupeTTL)})
	}
	a.next = max(a.next, seq+1)
	a.sum.Applied++
	if a.replayed == nil {
		a.replayed = map[uint64]bool{}
	}
	a.replayed[seq] = true
	return nil
}

// commit applies one chunk's batch with the offset advanced in it, to the
// last record added.
//
// I4: the offset never passes a record set aside as a collision. Until
// flushCollided writes them it stays just below the first (hold, which is
// -1 when that record is at position 0: the replay then starts from the
// log's beginning, as with no offset; only the truncation check reads the
// stored -1 as an offset, which makes it stricter), so a run that fails before then (I2) reads them
// again: they are in no row yet, and an offset past them would lose them.
// flushCollided's commit moves it to the last record replayed, not back
// to the last collided one.
func (a *applier) commit(b *store.Batch) error {
	a.pending = a.pending[:0]
	if a.o.DryRun {
		return nil
	}
	off := a.last
	if len(a.collided) > 0 {
		off = min(off, a.hold)
	}
	_ = b.SetNextSeq(a.next)
	_ = b.SetIntakeOffset(int64(off))
	if err := a.st.ApplySync(b); err != nil {
		a.claims = a.claims[:0]
		return fmt.Errorf("apply replayed chunk: %w", err)
	}
	now := a.o.Now()
	for _, c := range a.claims {
		a.o.OnApplied(c.tenant, c.source, c.key, c.id, c.expires.Sub(now))
	}
	a.claims = a.claims[:0]
	return nil
}

// republish publishes every local hook above the watermark: a crash can
// leave local hooks the log never confirmed. Duplicates are absorbed by the
// apply rule.
func republish(ctx context.Context, st *store.Store, o RecoverOptions, sum *Summary, next uint64, replayed map[uint64]bool) error {
	// Republished records carry the store's incarnation, like the commit
	// path's (docs/storage.md).
	inc, err := st.Incarnation()
	if err != nil {
		return err
	}
	wm, _, err := st.IntakeSeq()
	if err != nil {
		return err
	}
	// Page through the hooks above the watermark, 256 at a time, publishing
	// each page outside the scan (a publish must not hold the store's read
	// lock, and a first dual boot may republish a whole store).
	from := wm + 1
	for {
		var page []intake.Record
		var last uint64
		err := st.ScanHooksFrom(from, func(seq uint64, v []byte) bool {
			last = seq
			if env, err := store.DecodeEnvelope(v); err == nil && !replayed[env.Seq] {
				// A hook this replay just wrote is in the log already.
				page = append(page, storedRecord(o.Node, inc, env, append([]byte(nil), v...)))
			}
			return len(page) < 256
		})
		if err != nil {
			return err
		}
		if len(page) > 0 && !o.DryRun {
			refused, err := publishIsolating(ctx, page, func(ctx context.Context, _ int, recs []intake.Record) error {
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				_, err := o.Intake.PublishBatch(pctx, recs)
				return err
			})
			if err != nil {
				return fmt.Errorf("republish %d hooks above the watermark: %w", len(page), err)
			}
			for _, i := range refused {
				sum.Refused = append(sum.Refused, page[i].Seq)
			}
			sum.Republished += len(page) - len(refused)
		} else {
			sum.Republished += len(page)
		}
		// A page short of 256 means the scan ran out of hooks.
		if len(page) < 256 || last == math.MaxUint64 {
			break
		}
		from = last + 1
	}
	if o.DryRun {
		return nil
	}
	// R1: the watermark stays below the first record the log refused: it
	// is not confirmed, so the next boot republishes it (and, redundantly,
	// what follows it) again, and until then the queue carries it (Carry).
	// A watermark past it would let a crash before the writer's next mark
	// flush forget it, and its stored dedupe row would answer a retry
	// "201 duplicate" of a hook the log does not hold (ack rule 2).
	wm = next - 1
	if len(sum.Refused) > 0 {
		first := slices.Min(sum.Refused)
		wm = first - 1
		o.Logger.Warn("republish: the log refused some hooks permanently; they stay local, are delivered, and are retried as stuck records (ankusa_intake_reconcile_stuck)",
			"refused", len(sum.Refused), "first_seq", first)
	}
	b := st.NewBatch()
	defer b.Close()
	_ = b.SetIntakeSeq(wm)
	return st.ApplySync(b)
}

// publishIsolating publishes recs with pub and, when the log refuses a
// batch for one of its records (Permanent wrapping intake.ErrRecordRefused),
// splits it in halves until each refused record stands alone (ADR section
// 7: one record the log can never take — larger than its limit — must not
// hold back the others batched with it; the intake contract fails the
// whole batch for it). It returns the indexes of the records refused on
// their own, in order; pub is given each window's offset in recs. Any
// other error — an outage, a throttle, NotFound, a Permanent refusal of
// the log itself (authorization): the whole log, not one record — is
// returned as it is, unsplit, and nothing may be assumed confirmed. A
// record confirmed before a split may be published twice; readers dedupe.
func publishIsolating(ctx context.Context, recs []intake.Record, pub func(ctx context.Context, lo int, sub []intake.Record) error) ([]int, error) {
	return splitRefused(ctx, recs, pub(ctx, 0, recs), pub)
}

// recordRefused reports whether err is the log's refusal of one record of
// the batch (and not of the log itself): what publishIsolating splits on.
func recordRefused(err error) bool {
	if err == nil {
		// Before ClassOf: its errors.As target escapes, an allocation per
		// call, and the commit path's publishers ask after every publish
		// (issue 14: about one allocation per hook at C=64).
		return false
	}
	c, _ := intake.ClassOf(err)
	return c == intake.Permanent && errors.Is(err, intake.ErrRecordRefused)
}

// splitRefused is publishIsolating after its first publish, of all of
// recs, ended with err: a caller that already made that publish (the
// commit path's publishers, on their no-refusal fast path) goes on from
// its outcome instead of publishing the batch again.
func splitRefused(ctx context.Context, recs []intake.Record, err error, pub func(ctx context.Context, lo int, sub []intake.Record) error) ([]int, error) {
	var refused []int
	var settle func(lo, hi int, err error) error
	settle = func(lo, hi int, err error) error {
		switch {
		case err == nil:
			return nil
		case !recordRefused(err):
			return err
		case hi-lo == 1:
			refused = append(refused, lo)
			return nil
		}
		mid := lo + (hi-lo)/2
		if err := settle(lo, mid, pub(ctx, lo, recs[lo:mid])); err != nil {
			return err
		}
		return settle(mid, hi, pub(ctx, mid, recs[mid:hi]))
	}
	if err := settle(0, len(recs), err); err != nil {
		return nil, err
	}
	return refused, nil
}

// storedRecord is the log record of a stored hook: env decoded from its
// row's value v, published as this node's (node, its store's incarnation).
// The commit path builds its records from the request instead (writer.go).
func storedRecord(node, incarnation string, env *store.Envelope, v []byte) intake.Record {
	return intake.Record{
		Version: intake.RecordVersion, Kind: intake.KindHook, Node: node, Seq: env.Seq, ID: env.ID,
		Incarnation: incarnation, Tenant: env.Tenant, Source: env.Source, Value: v,
	}
}

// audit writes one operator-action row (a synced write) into the store's
// audit trail (GET /v1/audit): an accepted gap is a decision someone must
// be able to find later.
func audit(st *store.Store, at time.Time, action string, detail map[string]any) error {
	return st.AppendAudit(&store.AuditEntry{At: at, Actor: "ankusa recover", Action: action, Detail: detail})
}
