package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/intake"
	jsintake "github.com/ankusa/ankusa/internal/intake/jetstream"
	kafkaintake "github.com/ankusa/ankusa/internal/intake/kafka"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// openIntake builds the configured adapter. Wired here, in one place.
func openIntake(cfg *config.Config, log *slog.Logger) (intake.Intake, error) {
	switch cfg.Intake.Type {
	case "memory":
		return memory.Open(memoryIntakeOptions(cfg, log))
	case "kafka":
		return kafkaintake.Open(kafkaIntakeOptions(cfg, log))
	case "jetstream":
		return jsintake.Open(jetstreamIntakeOptions(cfg, log))
	}
	return nil, fmt.Errorf("intake.type %q is not available", cfg.Intake.Type)
}

func backupMaxAge(cfg *config.Config) time.Duration {
	if !cfg.Backup.Enabled {
		return 0
	}
	return time.Duration(cfg.Backup.MaxAgeMs) * time.Millisecond
}

func verifyTopic(cfg *config.Config) bool {
	return cfg.Intake.VerifyTopic == nil || *cfg.Intake.VerifyTopic
}

// stampPartition gives a partitioned adapter its partition: the stamped one,
// or a fresh assignment that is stamped (synced) before first use.
func stampPartition(ctx context.Context, st *store.Store, in intake.Intake, node string) error {
	return setPartition(ctx, st, in, node, true)
}

// usePartition gives the adapter its partition without writing: the
// stamped one, or the one a first boot would stamp (--dry-run).
func usePartition(ctx context.Context, st *store.Store, in intake.Intake, node string) error {
	return setPartition(ctx, st, in, node, false)
}

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

// stampNode records the node id on a store that has none and refuses a
// store stamped with another: restoring node a's store as node b would
// interleave two seq spaces in one log.
func stampNode(st *store.Store, node string) error {
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

func dualOptions(cfg *config.Config, in intake.Intake, inc string, obs queue.DualObserver) *queue.DualOptions {
	ic := cfg.Intake
	return &queue.DualOptions{
		Intake:            in,
		Node:              ic.NodeID,
		Incarnation:       inc,
		PublishTimeout:    time.Duration(ic.PublishTimeoutMs) * time.Millisecond,
		ReconcileDeadline: time.Duration(ic.ReconcileDeadlineMs) * time.Millisecond,
		BreakerFailures:   ic.BreakerFailures,
		Probe:             time.Duration(ic.ProbeMs) * time.Millisecond,
		OffsetFlush:       time.Duration(ic.OffsetFlushMs) * time.Millisecond,
		PendingMaxRecords: ic.Pending.MaxRecords,
		PendingMaxBytes:   ic.Pending.MaxBytes,
		MaxRecordBytes:    ic.MaxRecordBytes,
		Observer:          obs,
	}
}

// prepareIntake waits for the log (Verify, retried every probe_ms) and
// stamps this node's partition: under dual every boot needs both, whether
// or not it recovers.
func (in *Instance) prepareIntake(ctx context.Context) error {
	probe := time.Duration(in.cfg.Intake.ProbeMs) * time.Millisecond
	for {
		err := in.intake.Verify(ctx)
		if err == nil {
			break
		}
		in.log.Warn("intake log not verified; waiting", "err", err, "retry_in", probe)
		select {
		case <-ctx.Done():
			return fmt.Errorf("intake: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(probe):
		}
	}
	if err := stampPartition(ctx, in.store, in.intake, in.cfg.Intake.NodeID); err != nil {
		return err
	}
	// An adapter learns it is ready in the background (Kafka: a metadata
	// answer for the stamped partition). A hook that arrived before that
	// would open the gate for a whole probe_ms, so give Ready a moment
	// before serving; a log that stays unready is the gate's business.
	deadline := time.Now().Add(probe)
	for !in.intake.Ready() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// recoverOnBoot runs ADR section 8 before the node serves: replay this
// node's tail into the store, republish local hooks above the watermark.
//
// A log outage (a classified Unavailable or Throttled error: JetStream's
// "temporarily unavailable" just after its servers come back) does not end
// the boot: the node stays unready (/ready intake "recovering") and runs
// Recover again every intake.probe_ms (longer if the log asked for it),
// until it succeeds or ctx ends. Every other error fails the boot as it is:
// intake_truncated, not_found, permanent, and a store failure, which is
// never retried as if it were the log's (see bootRetryWait).
//
// Running Recover again after a failed attempt is safe (queue.Recover, I2):
// it starts from the store's m:intake_offset, which only a durable chunk
// advances, and a record applied before that is skipped by its hook id.
// REQUIRES: prepareIntake succeeded.
func (in *Instance) recoverOnBoot(ctx context.Context) (queue.Summary, error) {
	origin := queue.OriginExisting
	switch {
	case in.restored:
		origin = queue.OriginRestored
	case in.store.Created():
		origin = queue.OriginFresh
	}
	probe := time.Duration(in.cfg.Intake.ProbeMs) * time.Millisecond
	opts := queue.RecoverOptions{
		Intake:  in.intake,
		Node:    in.cfg.Intake.NodeID,
		Origin:  origin,
		Resolve: in.route,
		Logger:  in.log,
		// Shared by every attempt: a retry does not republish the hooks an
		// earlier attempt replayed (they are in the log).
		Replayed: map[uint64]bool{},
		OnApplied: func(tenant, source, key string, id [16]byte, ttl time.Duration) {
			if in.fleet == nil {
				return
			}
			// A claim left pending by the dead node: commit it under the
			// replayed hook, so a retry is a 201 duplicate, not a second hook.
			if err := in.fleet.Adopt(ctx, tenant, source, key, id, ttl); err != nil {
				in.log.Warn("replay: fleet claim not adopted; it expires after fleet.pending_ttl_ms", "source", source, "err", err)
			}
		},
	}
	start := time.Now()
	var total queue.Summary
	var err error
	for attempt := 1; ; attempt++ {
		var sum queue.Summary
		sum, err = queue.Recover(ctx, in.store, opts)
		total = addSummary(total, sum)
		wait, retry := bootRetryWait(err, probe)
		if !retry {
			break
		}
		// The instance's logger passes one line of this shape per
		// logRepeatInterval (ratelog), with the count it suppressed.
		in.log.Warn("boot recovery waits for the intake log", "err", err, "attempt", attempt, "retry_in", wait)
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(wait):
			continue
		}
		break
	}
	skipped := int(in.intake.Skipped())
	in.metrics.IntakeReplay(total.Applied, total.Present, total.Collided, total.Unroutable, skipped, time.Since(start))
	if err != nil {
		return total, fmt.Errorf("boot recovery: %w", err)
	}
	if in.restored {
		if err := clearRestoreMarker(in.storeDir); err != nil {
			return total, err
		}
		in.restored = false
	}
	return total, nil
}

// bootRetryWait says whether boot recovery's err is a log outage worth
// waiting out, and how long to wait: probe, or the log's retry-after when
// it asked for longer. Only a classified Unavailable or Throttled error is
// (intake.IsTransient; intake.ClassOf would call any unclassified error
// Unavailable). A store failure never is, even should an adapter wrap the
// error of Replay's callback in a class: it does not heal by waiting, and
// a boot retrying it forever would hide it.
func bootRetryWait(err error, probe time.Duration) (time.Duration, bool) {
	if err == nil || errors.Is(err, store.ErrFailed) || errors.Is(err, store.ErrClosed) {
		return 0, false
	}
	transient, after := intake.IsTransient(err)
	if !transient {
		return 0, false
	}
	return max(probe, after), true
}

// addSummary adds b's counts to a; the positions are b's (the last attempt).
func addSummary(a, b queue.Summary) queue.Summary {
	b.Records += a.Records
	b.Applied += a.Applied
	b.Present += a.Present
	b.Collided += a.Collided
	b.Unroutable += a.Unroutable
	b.Republished += a.Republished
	return b
}

// route resolves a source for replay from the current config.
func (in *Instance) route(source string) (queue.Route, bool) {
	sc, ok := in.cfg.Sources[source]
	if !ok {
		return queue.Route{}, false
	}
	r := queue.Route{}
	for _, k := range sc.Sinks {
		r.Sinks = append(r.Sinks, queue.SinkRef{Num: in.nums[store.SinkRef{Source: source, Sink: k.ID}], ID: k.ID})
	}
	if sc.Dedupe != nil {
		r.DedupeTTL = time.Duration(sc.Dedupe.TTLSeconds) * time.Second
	}
	return r, true
}
