package apptest

import (
	"testing"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/sources"
	"github.com/ankusa/ankusa/internal/sources/sourcestest"
)

// SourcesEnv is sourcestest.New with the binary's source rules: the app's
// schema over the default config with source_store.type persistent and
// o.Routing as http.routing (o's Schema, Prefix and MaxBodyBytes are the
// config's).
func SourcesEnv(t testing.TB, o sourcestest.Options) *sourcestest.Env {
	t.Helper()
	cfg := config.Default()
	cfg.Node.Instance = "sources-test"
	cfg.Sources = nil
	cfg.SourceStore.Type = config.SourceStorePersistent
	if o.Routing != "" {
		cfg.HTTP.Routing = o.Routing
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	o.Routing, o.Prefix, o.MaxBodyBytes = cfg.HTTP.Routing, cfg.HTTP.Prefix, cfg.HTTP.MaxBodyBytes
	o.Schema = func(build func(string) (sink.Sink, error)) sources.Schema {
		return app.SourceSchema(cfg, func(k config.SinkConfig) (sink.Sink, error) { return build(k.ID) })
	}
	return sourcestest.New(t, o)
}
