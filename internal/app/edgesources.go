package app

import (
	"fmt"
	"time"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dedupe"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/verify"
)

// EdgeSources builds the edge's view of the configured sources; nums are
// the store's stable sink numbers (store.SinkNumbers).
func EdgeSources(srcs map[string]config.SourceConfig, nums map[store.SinkRef]uint16) (map[string]*edge.Source, error) {
	out := make(map[string]*edge.Source, len(srcs))
	for id, sc := range srcs {
		s, err := EdgeSource(id, sc, nums)
		if err != nil {
			return nil, err
		}
		out[id] = s
	}
	return out, nil
}

// EdgeSource builds the edge's view of source id from its config block:
// the one conversion, for the static sources and for the API-managed ones
// (sources.Options.BuildSource).
func EdgeSource(id string, sc config.SourceConfig, nums map[store.SinkRef]uint16) (*edge.Source, error) {
	hs := edge.HandshakeOptions{Provider: sc.HandshakeProvider(), VerifyToken: sc.Verify.VerifyToken}
	if len(sc.Verify.Secret) > 0 {
		hs.ZoomSecret = sc.Verify.Secret[0] // the newest
	}
	s := &edge.Source{ID: id, Tenant: sc.Tenant, Dedupe: dedupe.New(dedupeOptions(sc.Dedupe)),
		OnFailure: onFailure(sc.VerifyFailurePolicy()), Handshake: edge.NewHandshake(hs)}
	if len(sc.Tenants) > 0 {
		s.Tenants = make(map[string]bool, len(sc.Tenants))
		for _, t := range sc.Tenants {
			s.Tenants[t] = true
		}
	}
	if sc.Verify.Type != "" && sc.Verify.Type != "none" {
		v, err := verify.New(sc.Verify.Spec())
		if err != nil {
			// Config validation ran the same check; this is a safety net.
			return nil, fmt.Errorf("sources.%s.verify: %w", id, err)
		}
		s.Verifier = v
	}
	for _, sk := range sc.Sinks {
		s.Sinks = append(s.Sinks, queue.SinkRef{Num: nums[store.SinkRef{Source: id, Sink: sk.ID}], ID: sk.ID})
	}
	return s, nil
}

// onFailure maps sources.<id>.on_verify_failure to the edge's policy.
func onFailure(policy string) string {
	switch policy {
	case config.OnVerifyFailureQuarantine:
		return edge.OnFailureQuarantine
	case config.OnVerifyFailureAcceptFlag:
		return edge.OnFailureAcceptFlag
	}
	return edge.OnFailureReject
}

// dedupeOptions translates a source's dedupe block into the extractor's
// own Options (dedupe does not import config); nil stays nil, no dedupe.
func dedupeOptions(c *config.SourceDedupe) *dedupe.Options {
	if c == nil {
		return nil
	}
	return &dedupe.Options{Preset: c.Preset, Header: c.Header, JSON: c.JSON,
		TTL: time.Duration(c.TTLSeconds) * time.Second}
}
