package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

// keyIntakeNode stamps the node id a store was written under (ADR section 8).
var keyIntakeNode = []byte("m:intake_node")

// openIntake builds the configured adapter. Wired here, in one place.
func openIntake(cfg *config.Config, log *slog.Logger) (intake.Intake, error) {
	switch cfg.Intake.Type {
	case "memory":
		var latency time.Duration
		if m := cfg.Intake.Memory; m != nil {
			latency = time.Duration(m.ConfirmLatencyMs) * time.Millisecond
		}
		return memory.Open(memory.Options{
			Dir:            cfg.IntakeMemoryPath(),
			Node:           cfg.Intake.NodeID,
			ConfirmLatency: latency,
			Logger:         log,
		})
	}
	return nil, fmt.Errorf("intake.type %q is not available", cfg.Intake.Type)
}

// stampNode records the node id on a store that has none and refuses a
// store stamped with another: restoring node a's store as node b would
// interleave two seq spaces in one log.
func stampNode(st *store.Store, node string) error {
	v, err := st.Get(keyIntakeNode)
	if err != nil {
		return fmt.Errorf("read m:intake_node: %w", err)
	}
	if v != nil {
		if string(v) != node {
			return fmt.Errorf("intake_node_mismatch: the store was written by intake node %q, intake.node_id is %q", v, node)
		}
		return nil
	}
	b := st.NewBatch()
	defer b.Close()
	_ = b.Set(keyIntakeNode, []byte(node), nil)
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

// recoverOnBoot runs ADR section 8 before the node serves: wait for the log
// (Verify, retried every probe_ms), replay this node's tail into the store,
// republish local hooks above the watermark.
func (in *Instance) recoverOnBoot(ctx context.Context) (queue.Summary, error) {
	probe := time.Duration(in.cfg.Intake.ProbeMs) * time.Millisecond
	for {
		err := in.intake.Verify(ctx)
		if err == nil {
			break
		}
		in.log.Warn("intake log not verified; waiting before recovery", "err", err, "retry_in", probe)
		select {
		case <-ctx.Done():
			return queue.Summary{}, fmt.Errorf("boot recovery: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(probe):
		}
	}
	origin := queue.OriginExisting
	switch {
	case in.restored:
		origin = queue.OriginRestored
	case in.store.Created():
		origin = queue.OriginFresh
	}
	sum, err := queue.Recover(ctx, in.store, queue.RecoverOptions{
		Intake:  in.intake,
		Node:    in.cfg.Intake.NodeID,
		Origin:  origin,
		Resolve: in.route,
		Logger:  in.log,
	})
	if err != nil {
		return sum, fmt.Errorf("boot recovery: %w", err)
	}
	return sum, nil
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
