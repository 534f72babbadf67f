package app

import (
	"fmt"
	"log/slog"

	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sink/httpsink"
	"github.com/ankusa/ankusa/internal/sink/kafka"
	"github.com/ankusa/ankusa/internal/sink/logsink"
	natssink "github.com/ankusa/ankusa/internal/sink/nats"
	"github.com/ankusa/ankusa/internal/sink/rabbitmq"
	"github.com/ankusa/ankusa/internal/store"
)

// buildTargets constructs every configured sink, keyed by its stored
// number. This is the one place adapters are wired: no init() registry.
func buildTargets(cfg *config.Config, nums map[store.SinkRef]uint16, log *slog.Logger) (map[uint16]dispatch.Target, error) {
	out := make(map[uint16]dispatch.Target)
	for id, sc := range cfg.Sources {
		for _, k := range sc.Sinks {
			s, err := newSink(k, cfg.HTTP.MaxBodyBytes, log)
			if err != nil {
				closeTargets(out)
				return nil, fmt.Errorf("sources.%s sink %s: %w", id, k.ID, err)
			}
			out[nums[store.SinkRef{Source: id, Sink: k.ID}]] = dispatch.Target{ID: k.ID, Sink: s}
		}
	}
	return out, nil
}

// newSink builds one sink from its config block, translated to the
// adapter's Options (options.go). maxBody is http.max_body_bytes, which the
// NATS sink checks against the server's max_payload.
func newSink(k config.SinkConfig, maxBody int64, log *slog.Logger) (sink.Sink, error) {
	switch k.Type {
	case "log":
		return logsink.New(log), nil
	case "http":
		if k.HTTP == nil {
			return nil, errNoBlock(k.Type)
		}
		o, err := httpSinkOptions(k.HTTP)
		if err != nil {
			return nil, err
		}
		return httpsink.New(o)
	case "kafka":
		if k.Kafka == nil {
			return nil, errNoBlock(k.Type)
		}
		return kafka.New(kafkaSinkOptions(k.Kafka, log))
	case "nats":
		if k.NATS == nil {
			return nil, errNoBlock(k.Type)
		}
		return natssink.New(natsSinkOptions(k.NATS, maxBody, log))
	case "rabbitmq":
		if k.RabbitMQ == nil {
			return nil, errNoBlock(k.Type)
		}
		return rabbitmq.New(rabbitMQSinkOptions(k.RabbitMQ, log))
	}
	return nil, fmt.Errorf("unknown sink type %q", k.Type)
}

// errNoBlock: config's Validate refuses a sink without its block; this
// keeps a config built in code from panicking instead.
func errNoBlock(typ string) error { return fmt.Errorf("%s sink: no %s block", typ, typ) }

func closeTargets(ts map[uint16]dispatch.Target) {
	for _, t := range ts {
		_ = t.Sink.Close()
	}
}

// sinkNumbers gives every (source, sink) of the config file its stable
// number in the store (store.SinkNumbers): the serving instance and
// `ankusa recover` key delivery rows by the same numbers.
func sinkNumbers(st *store.Store, cfg *config.Config) (map[store.SinkRef]uint16, error) {
	var refs []store.SinkRef
	for id, sc := range cfg.Sources {
		for _, sk := range sc.Sinks {
			refs = append(refs, store.SinkRef{Source: id, Sink: sk.ID})
		}
	}
	return st.SinkNumbers(refs)
}
