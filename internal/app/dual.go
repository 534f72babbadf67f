package app

import (
	"context"
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

// bootIntake runs boot recovery (queue.RecoverNode) before the node
// serves: identity and topology at every dual boot, and the replay of ADR
// section 8 when replay (intake.recover_on_boot). A log outage does not end
// the boot: the node stays unready (/ready intake "recovering") and waits,
// retrying every intake.probe_ms, until the log answers or ctx ends; every
// other error fails the boot as it is (intake_truncated, not_found,
// permanent, and a store failure, which is never retried as if it were the
// log's) — except the log's refusal of single records at the republish
// (intake.ErrRecordRefused), which leaves those hooks to carry.
//
// It returns the hooks the republish left to carry (queue.Summary.Refused),
// which the boot hands to the queue (Queue.Carry) once it is reloaded.
//
// The quarantine pen is open by then (New) and counted its rows; the
// replay deletes the pen row of every released hook it writes (ack rule
// 7), so the pen is recounted when it did.
func (in *Instance) bootIntake(ctx context.Context, replay bool) ([]uint64, error) {
	origin := queue.OriginExisting
	switch {
	case in.restored:
		origin = queue.OriginRestored
	case in.store.Created():
		origin = queue.OriginFresh
	}
	sum, err := queue.RecoverNode(ctx, in.store, queue.NodeOptions{
		RecoverOptions: queue.RecoverOptions{
			Intake:  in.intake,
			Node:    in.cfg.Intake.NodeID,
			Origin:  origin,
			Resolve: sourceRoutes(in.cfg, in.nums),
			Logger:  in.log,
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
		},
		Replay: replay,
		Probe:  time.Duration(in.cfg.Intake.ProbeMs) * time.Millisecond,
		Recovered: func() error {
			if err := clearRestoreMarker(in.storeDir); err != nil {
				return err
			}
			in.restored = false
			return nil
		},
		OnReplay: func(total queue.Summary, took time.Duration) {
			skipped := int(in.intake.Skipped())
			in.metrics.IntakeReplay(total.Applied, total.Present, total.Collided, total.Unroutable, skipped, took)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("boot recovery: %w", err)
	}
	if sum.Unheld > 0 {
		if err := in.pen.Recount(); err != nil {
			return nil, fmt.Errorf("boot recovery: %w", err)
		}
	}
	return sum.Refused, nil
}

// sourceRoutes resolves a source for replay from cfg: its sinks (numbered
// by nums, the store's sink numbers) and its dedupe TTL. The boot and
// ankusa recover both use it.
func sourceRoutes(cfg *config.Config, nums map[store.SinkRef]uint16) func(source string) (queue.Route, bool) {
	return func(source string) (queue.Route, bool) {
		sc, ok := cfg.Sources[source]
		if !ok {
			return queue.Route{}, false
		}
		r := queue.Route{}
		for _, k := range sc.Sinks {
			r.Sinks = append(r.Sinks, queue.SinkRef{Num: nums[store.SinkRef{Source: source, Sink: k.ID}], ID: k.ID})
		}
		if sc.Dedupe != nil {
			r.DedupeTTL = time.Duration(sc.Dedupe.TTLSeconds) * time.Second
		}
		return r, true
	}
}
