package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/store"
)

// Boot recovery of wal.type: dual (ADR section 8), its one home: identity,
// topology, then replay this node's tail of the intake log into the store
// with a seq-keyed idempotent apply, then republish every local hook above
// the watermark. It runs before the queue starts (nothing else writes hook
// rows meanwhile; the operator API is up, so the quarantine pen's rows may
// be purged, and the boot recounts the pen after, quarantine.Pen.Recount),
// at every boot, and offline as `ankusa recover`; both
// call RecoverNode. It lives with the commit path because it is the commit
// path's other writer of hooks: the same rows (store.PutHook), the same
// next_seq rule, and the watermark and offset the dual commit keeps
// (dual_marks.go). This file holds the entry point and steps 1-2; replay.go
// the replay and republish.

// ErrIntakeTruncated: the log no longer reaches back to the store's offset.
var ErrIntakeTruncated = errors.New("intake_truncated")

// Origin says where the store came from, which decides what a gap means.
type Origin int

const (
	// OriginExisting: the store was on this disk; every hook in a gap is local.
	OriginExisting Origin = iota
	// OriginRestored: the store came from a backup; a gap is lost hooks.
	OriginRestored
	// OriginFresh: a new, empty store.
	OriginFresh
)

// Route is how replay resolves a source: its sinks and dedupe TTL today.
type Route struct {
	Sinks     []SinkRef
	DedupeTTL time.Duration
}

// RecoverOptions configure Recover.
type RecoverOptions struct {
	Intake intake.Intake
	Node   string
	Origin Origin
	// From overrides the start: nil = the store's m:intake_offset (or the
	// earliest record when it has none).
	From *intake.Position
	// AllowGap lets a restored or fresh store recover over a truncated log,
	// logging the gap.
	AllowGap bool
	// DryRun reads and counts; it writes nothing and publishes nothing.
	DryRun bool
	// Resolve returns the current route of a source; ok=false counts the
	// record unroutable.
	Resolve func(source string) (Route, bool)
	// OnApplied, when set, is told of every replayed hook with a dedupe key
	// once its chunk is durable (fleet scope adopts the claim: the hook's
	// node died before settling it). ttl is what is left of the dedupe TTL.
	OnApplied func(tenant, source, dedupeKey string, id [16]byte, ttl time.Duration)
	// Replayed, when set, collects the seqs this run wrote from the log, and
	// the republish skips every seq in it. A caller that runs Recover again
	// after a failed run (boot recovery waiting out a log outage) passes the
	// same map, so the retry does not republish what the failed run
	// replayed. Nil: a map of this run's own.
	Replayed map[uint64]bool
	// Chunk is the apply batch size (default 500).
	Chunk  int
	Logger *slog.Logger
	Now    func() time.Time
}

// Summary is what recovery did; ankusa recover prints it.
type Summary struct {
	Records, Applied, Present, Collided, Unroutable, Republished int
	From, Earliest, Last                                         intake.Position
	Gap                                                          bool
	// Refused are the seqs of the local hooks above the watermark that the
	// log refused Permanent on their own (larger than it accepts): kept
	// local and delivered, left above the watermark, and handed to the
	// queue (Queue.Carry) to be retried as stuck records — never a reason
	// not to boot. The last attempt's.
	Refused []uint64
	// Unheld counts the quarantine pen rows the replay deleted with the
	// released hooks it wrote (ack rule 7; applier.write). A caller whose
	// pen is open (the boot's) recounts it when this is not zero.
	Unheld int
}

func (s Summary) String() string {
	return fmt.Sprintf("records=%d applied=%d present=%d collided=%d unroutable=%d republished=%d refused=%d unheld=%d",
		s.Records, s.Applied, s.Present, s.Collided, s.Unroutable, s.Republished, len(s.Refused), s.Unheld)
}

// NodeOptions configure RecoverNode: the replay's own options plus what
// differs between its two callers.
type NodeOptions struct {
	RecoverOptions
	// Replay runs the replay and republish (steps 3-5). False: identity
	// and topology only — a boot with intake.recover_on_boot: false still
	// needs both before it serves.
	Replay bool
	// Probe is the boot's patience (intake.probe_ms). When > 0 a log that
	// fails Verify, and a log outage met by the replay (recoveryRetryWait),
	// are waited out, retried every Probe until ctx ends, and the adapter
	// is given up to Probe to become Ready before the node serves. Zero:
	// one attempt of each (ankusa recover, run by an operator who sees the
	// error).
	Probe time.Duration
	// Recovered, when set, is called once a replay that wrote (not DryRun)
	// succeeded on a restored store (OriginRestored): the app removes the
	// restore marker, so the next boot is an ordinary restart.
	Recovered func() error
	// OnReplay, when set, is told what the replay did once it ended (every
	// attempt, with or without an error) and how long it took: the boot's
	// metrics.
	OnReplay func(total Summary, took time.Duration)
}

// RecoverNode is boot recovery of wal.type: dual (ADR section 8), written
// once for its two callers: the node's boot (internal/app, before it
// serves, with Probe set) and `ankusa recover` (offline, on a stopped
// node's store, one attempt). In order:
//
//  1. identity: the store is stamped with o.Node, or refused when it was
//     stamped with another (StampNode; skipped by a dry run);
//  2. topology: the log is verified and a partitioned adapter is given its
//     stamped partition, stamped now on the first dual boot (a dry run uses
//     the one a first boot would stamp, writing nothing);
//  3. replay and republish (Recover), when o.Replay; a log outage is waited
//     out when o.Probe > 0, every attempt sharing one Replayed set;
//  4. o.Recovered, after a replay that wrote on a restored store.
//
// The Summary adds every attempt's counts (positions: the last attempt's);
// it is valid with an error too.
func RecoverNode(ctx context.Context, st *store.Store, o NodeOptions) (Summary, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if !o.DryRun {
		if err := StampNode(st, o.Node); err != nil {
			return Summary{}, err
		}
	}
	if err := verifyIntake(ctx, o.Intake, o.Probe, o.Logger); err != nil {
		return Summary{}, err
	}
	if err := setPartition(ctx, st, o.Intake, o.Node, !o.DryRun); err != nil {
		return Summary{}, err
	}
	if o.Probe > 0 {
		// An adapter learns it is ready in the background (Kafka: a
		// metadata answer for the stamped partition). A hook that arrived
		// before that would open the gate for a whole probe_ms, so give
		// Ready a moment before serving; a log that stays unready is the
		// gate's business.
		deadline := time.Now().Add(o.Probe)
		for !o.Intake.Ready() && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return Summary{}, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if !o.Replay {
		return Summary{}, nil
	}
	if o.Replayed == nil {
		// Shared by every attempt: a retry does not republish the hooks an
		// earlier attempt replayed (they are in the log).
		o.Replayed = map[uint64]bool{}
	}
	start := time.Now()
	var total Summary
	var err error
	for attempt := 1; ; attempt++ {
		var sum Summary
		sum, err = Recover(ctx, st, o.RecoverOptions)
		total = addSummary(total, sum)
		wait, retry := recoveryRetryWait(err, o.Probe)
		if !retry {
			break
		}
		// The app's logger passes one line of this shape per
		// logRepeatInterval (ratelog), with the count it suppressed.
		o.Logger.Warn("boot recovery waits for the intake log", "err", err, "attempt", attempt, "retry_in", wait)
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(wait):
			continue
		}
		break
	}
	if o.OnReplay != nil {
		o.OnReplay(total, time.Since(start))
	}
	if err != nil {
		return total, err
	}
	if !o.DryRun && o.Origin == OriginRestored && o.Recovered != nil {
		if err := o.Recovered(); err != nil {
			return total, err
		}
	}
	return total, nil
}

// verifyIntake checks the log's topology (intake.Verify); with probe > 0
// it waits for a log that fails, retrying every probe until ctx ends.
func verifyIntake(ctx context.Context, in intake.Intake, probe time.Duration, log *slog.Logger) error {
	for {
		err := in.Verify(ctx)
		if err == nil {
			return nil
		}
		if probe <= 0 {
			return fmt.Errorf("intake topology: %w", err)
		}
		log.Warn("intake log not verified; waiting", "err", err, "retry_in", probe)
		select {
		case <-ctx.Done():
			return fmt.Errorf("intake: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(probe):
		}
	}
}

// recoveryRetryWait says whether the replay's err is a log outage worth
// waiting out, and how long to wait: probe, or the log's retry-after when
// it asked for longer. Never with probe 0 (one attempt). Only a classified
// Unavailable or Throttled error is (intake.IsTransient; intake.ClassOf
// would call any unclassified error Unavailable). A store failure never
// is, even should an adapter wrap the error of Replay's callback in a
// class: it does not heal by waiting, and a boot retrying it forever would
// hide it.
//
// Running Recover again after a failed attempt is safe (I2, Recover): it
// starts from the store's m:intake_offset, which only a durable chunk
// advances, and a record applied before that is skipped by its hook id.
func recoveryRetryWait(err error, probe time.Duration) (time.Duration, bool) {
	if err == nil || probe <= 0 || errors.Is(err, store.ErrFailed) || errors.Is(err, store.ErrClosed) {
		return 0, false
	}
	transient, after := intake.IsTransient(err)
	if !transient {
		return 0, false
	}
	return max(probe, after), true
}

// addSummary adds b's counts to a; the positions are b's (the last attempt).
func addSummary(a, b Summary) Summary {
	b.Records += a.Records
	b.Applied += a.Applied
	b.Present += a.Present
	b.Collided += a.Collided
	b.Unroutable += a.Unroutable
	b.Republished += a.Republished
	b.Unheld += a.Unheld
	return b
}

// StampNode records the node id on a store that has none and refuses a
// store stamped with another (ADR section 8 step 1): restoring node a's
// store as node b would interleave two seq spaces in one log. The boot
// calls it as soon as the store is open, before the queue exists;
// RecoverNode again (a read, once stamped).
func StampNode(st *store.Store, node string) error {
	v, ok, err := st.IntakeNode()
	if err != nil {
		return err
	}
	if ok {
		if v != node {
			return fmt.Errorf("intake_node_mismatch: the store was written by intake node %q, intake.node_id is %q", v, node)
		}
		return nil
	}
	b := st.NewBatch()
	defer b.Close()
	_ = b.SetIntakeNode(node)
	if err := st.ApplySync(b); err != nil {
		return fmt.Errorf("stamp m:intake_node: %w", err)
	}
	return nil
}

// setPartition gives a partitioned adapter its partition: the stamped one,
// or a fresh assignment, stamped (synced) before first use when stamp is
// set. The partition is chosen once, at the node's first dual boot, and
// never recomputed, so growing the topic never remaps a node (ADR
// section 6).
func setPartition(ctx context.Context, st *store.Store, in intake.Intake, node string, stamp bool) error {
	pa, ok := in.(intake.PartitionAssigner)
	if !ok {
		return nil
	}
	if n, ok, err := st.IntakePartition(); err != nil {
		return err
	} else if ok {
		return pa.SetPartition(n)
	}
	p, err := pa.AssignPartition(ctx, node)
	if err != nil {
		return fmt.Errorf("assign intake partition: %w", err)
	}
	if stamp {
		b := st.NewBatch()
		defer b.Close()
		_ = b.SetIntakePartition(p)
		if err := st.ApplySync(b); err != nil {
			return fmt.Errorf("stamp m:intake_partition: %w", err)
		}
	}
	return pa.SetPartition(p)
}
