package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sources"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/verify"
)

// apiSourcesOptions translates the config into the API sources' options
// (source_store.type: persistent).
func apiSourcesOptions(cfg *config.Config, st *store.Store, reg *edge.Registry, disp *dispatch.Dispatcher, log *slog.Logger) sources.Options {
	return sources.Options{
		Store: st, Registry: reg, Dispatch: disp,
		Schema: SourceSchema(cfg, func(k config.SinkConfig) (sink.Sink, error) {
			return newSink(k, cfg.HTTP.MaxBodyBytes, log)
		}),
		Static:  func(id string) bool { _, ok := cfg.Sources[id]; return ok },
		Routing: cfg.HTTP.Routing, Prefix: cfg.HTTP.Prefix,
		Logger: log,
	}
}

// SourceSchema is sources.Schema over the config's source blocks
// (config.SourceConfig): the rules of cfg, and buildSink for the sinks.
// Tests of the API sources build their Manager with it.
func SourceSchema(cfg *config.Config, buildSink func(config.SinkConfig) (sink.Sink, error)) sources.Schema {
	return sourceSchema{cfg: cfg, buildSink: buildSink}
}

type sourceSchema struct {
	cfg       *config.Config
	buildSink func(config.SinkConfig) (sink.Sink, error)
}

// redacted is how config.Redacted shows a secret; a write that sends it
// back means "keep the stored value" where that is possible.
const redacted = "[REDACTED]"

func decodeBlock(block json.RawMessage) (config.SourceConfig, error) {
	var sc config.SourceConfig
	if err := json.Unmarshal(block, &sc); err != nil {
		return sc, fmt.Errorf("source block: %w", err)
	}
	return sc, nil
}

func encodeBlock(sc config.SourceConfig) (json.RawMessage, error) {
	raw, err := json.Marshal(sc)
	if err != nil {
		return nil, fmt.Errorf("encode source block: %w", err)
	}
	return raw, nil
}

func (s sourceSchema) Bind(id, tenant string, block json.RawMessage) (json.RawMessage, error) {
	sc, err := decodeBlock(block)
	if err != nil {
		return nil, err
	}
	if sc.Tenant != "" && sc.Tenant != tenant {
		return nil, config.Errors{{Key: "sources." + id + ".tenant",
			Rule: fmt.Sprintf("must be empty or %q (an API source belongs to the tenant of its URL), got %q", tenant, sc.Tenant)}}
	}
	sc.Tenant = tenant
	return encodeBlock(sc.WithDefaults())
}

// Check refuses a "[REDACTED]" value (a view sent back with a secret that
// cannot be kept) and applies the config rules, after keepSecrets on an
// update.
func (s sourceSchema) Check(id string, block, prev json.RawMessage) (json.RawMessage, error) {
	sc, err := decodeBlock(block)
	if err != nil {
		return nil, err
	}
	var moved map[string]bool
	if prev != nil {
		p, err := decodeBlock(prev)
		if err != nil {
			return nil, err
		}
		moved = keepSecrets(&sc, p)
	}
	var errs config.Errors
	for _, k := range redactedKeys(sc) {
		rule := `"[REDACTED]" is how a secret is shown, not a value: send the real value (an update may leave a secret out to keep it)`
		if sink, _, _ := strings.Cut(k, "."); moved[sink] {
			rule = `"[REDACTED]" cannot be kept: the sink's destination changed, and a stored secret never follows a new destination; send the secret again`
		}
		errs = append(errs, &config.Error{Key: "sources." + id + "." + k, Rule: rule})
	}
	if err := s.cfg.ValidateSource(id, sc); err != nil {
		var ce config.Errors
		if !errors.As(err, &ce) {
			return nil, err
		}
		errs = append(errs, ce...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return encodeBlock(sc)
}

func (s sourceSchema) Validate(id string, block json.RawMessage) error {
	sc, err := decodeBlock(block)
	if err != nil {
		return err
	}
	return s.cfg.ValidateSource(id, sc)
}

func (s sourceSchema) Redacted(block json.RawMessage) map[string]any {
	sc, err := decodeBlock(block)
	if err != nil {
		return nil
	}
	return sc.Redacted()
}

func (s sourceSchema) SinkIDs(block json.RawMessage) ([]string, error) {
	sc, err := decodeBlock(block)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(sc.Sinks))
	for _, k := range sc.Sinks {
		ids = append(ids, k.ID)
	}
	return ids, nil
}

// Build builds the edge source the way static sources are built, and a
// constructor per sink.
func (s sourceSchema) Build(id string, block json.RawMessage, nums map[store.SinkRef]uint16) (*edge.Source, []sources.SinkBuilder, error) {
	sc, err := decodeBlock(block)
	if err != nil {
		return nil, nil, err
	}
	src, err := EdgeSource(id, sc, nums)
	if err != nil {
		return nil, nil, err
	}
	builders := make([]sources.SinkBuilder, 0, len(sc.Sinks))
	for _, k := range sc.Sinks {
		builders = append(builders, sources.SinkBuilder{ID: k.ID, Build: func() (sink.Sink, error) { return s.buildSink(k) }})
	}
	return src, builders, nil
}

// keepSecrets fills the secrets next leaves out (or sends back redacted)
// from prev; see sources.Manager.Update. A sink whose destination changed keeps nothing:
// its secrets were given for the old host and must never reach the new
// one. Those sinks are returned ("sinks[i]"), so that a "[REDACTED]" left
// in one is refused with the reason.
func keepSecrets(next *config.SourceConfig, prev config.SourceConfig) (moved map[string]bool) {
	moved = map[string]bool{}
	if v := &next.Verify; v.Type != verify.TypeNone && allRedacted(v.Secret) {
		v.Secret = slices.Clone(prev.Verify.Secret)
	}
	before := map[string]config.SinkConfig{}
	for _, k := range prev.Sinks {
		before[k.ID] = k
	}
	for i := range next.Sinks {
		k := &next.Sinks[i]
		p, ok := before[k.ID]
		if !ok || p.Type != k.Type {
			continue
		}
		if destination(*k) != destination(p) {
			moved["sinks["+strconv.Itoa(i)+"]"] = true
			continue
		}
		if k.HTTP != nil && p.HTTP != nil {
			keep(&k.HTTP.Secret, p.HTTP.Secret)
			for name, val := range k.HTTP.Headers {
				if pv, ok := p.HTTP.Headers[name]; ok && val == redacted {
					k.HTTP.Headers[name] = pv
				}
			}
		}
		if k.Kafka != nil && p.Kafka != nil && k.Kafka.SASL != nil && p.Kafka.SASL != nil {
			keep(&k.Kafka.SASL.Password, p.Kafka.SASL.Password)
		}
		if k.NATS != nil && p.NATS != nil {
			if k.NATS.User != "" {
				keep(&k.NATS.Password, p.NATS.Password)
			} else {
				keep(&k.NATS.Token, p.NATS.Token)
			}
		}
	}
	return moved
}

// destination is where a sink sends (and so where its secrets go): the
// HTTP URL, the Kafka brokers, the NATS or RabbitMQ URL. Any change counts,
// even a path: the operator re-sends the secret rather than Ankusa
// guessing which changes still reach the same recipient.
func destination(k config.SinkConfig) string {
	switch {
	case k.HTTP != nil:
		return k.HTTP.URL
	case k.Kafka != nil:
		return strings.Join(k.Kafka.Brokers, ",")
	case k.NATS != nil:
		return k.NATS.URL
	case k.RabbitMQ != nil:
		return k.RabbitMQ.URL
	}
	return ""
}

func keep(dst *string, stored string) {
	if *dst == "" || *dst == redacted {
		*dst = stored
	}
}

func allRedacted(list []string) bool {
	for _, s := range list {
		if s != redacted {
			return false
		}
	}
	return true
}

// redactedKeys lists the keys of sc (dotted, relative to the block) whose
// value holds "[REDACTED]".
func redactedKeys(sc config.SourceConfig) []string {
	raw, err := json.Marshal(sc)
	if err != nil || !strings.Contains(string(raw), redacted) {
		return nil
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil
	}
	var keys []string
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(e, p)
			}
		case []any:
			for i, e := range x {
				walk(e, path+"["+strconv.Itoa(i)+"]")
			}
		case string:
			if strings.Contains(x, redacted) {
				keys = append(keys, path)
			}
		}
	}
	walk(tree, "")
	sort.Strings(keys)
	return keys
}
