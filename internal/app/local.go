package app

import (
	"fmt"
	"path/filepath"

	"github.com/ankusa/ankusa/internal/config"
)

// LocalSpec is a loopback instance as `ankusa bench` runs it, in plain
// values so the harness needs no config: config.Default() (the demo source
// with its log sink) on 127.0.0.1, free ports, data under Dir.
type LocalSpec struct {
	Dir   string
	Roles []string // node.roles
	// Dual is wal.type=dual with the memory intake log in Dir/intake
	// (outside the store, as the validation requires) confirming
	// ConfirmMs after its own fsync, and the backups dual requires.
	Dual      bool
	ConfirmMs int
	// IntakeDir, when set, is the memory intake log's directory instead of
	// Dir/intake (the bench puts it on a tmpfs: a broker's fsync does not
	// share this host's disk).
	IntakeDir string
	// Retention is retention.delivered; "" keeps the default.
	Retention string
	// HTTPSink, when set, replaces the sources with one source (verify
	// none) delivering to one http sink at HTTPSink.URL.
	HTTPSink *LocalHTTPSink
	// MoreHTTPSinks are more sources (verify none), each delivering to its
	// one http sink, beside HTTPSink's (only with HTTPSink) (bench e2e's parked backlog: a
	// source whose sink refuses every attempt).
	MoreHTTPSinks []LocalHTTPSink
	// DispatchConcurrency is dispatch.concurrency (max_inflight raised to
	// it if lower); 0 keeps the default.
	DispatchConcurrency int
}

// LocalHTTPSink is LocalSpec's one source with one http sink.
type LocalHTTPSink struct {
	Source, Sink, URL string
	TimeoutMs         int
}

// NewLocal validates the configuration spec describes and builds it (New).
func NewLocal(spec LocalSpec, o Options) (*Instance, error) {
	cfg := config.Default()
	cfg.Node.DataDir = spec.Dir
	cfg.Node.Instance = "bench"
	cfg.Node.Roles = append([]string(nil), spec.Roles...)
	cfg.HTTP.IP = "127.0.0.1"
	cfg.HTTP.Port = 0
	cfg.Admin.IP = "127.0.0.1"
	cfg.Admin.Port = 0
	if spec.Dual {
		cfg.WAL.Type = "dual"
		cfg.Intake.Type = "memory"
		cfg.Intake.NodeID = "bench"
		path := spec.IntakeDir
		if path == "" {
			path = filepath.Join(spec.Dir, "intake")
		}
		cfg.Intake.Memory = &config.IntakeMemory{Path: path, ConfirmLatencyMs: spec.ConfirmMs}
		// Dual requires backups; none runs inside a measured window (the
		// interval is an hour), only the final one at stop.
		cfg.Backup = config.BackupConfig{
			Enabled: true, IntervalMs: 3_600_000, MaxAgeMs: 7_200_000, Keep: 1,
			Primary: "file://" + filepath.Join(spec.Dir, "backups"), SigningKey: "bench-signing-key-0123",
		}
	}
	if spec.Retention != "" {
		cfg.Retention.Delivered = config.Duration(spec.Retention)
	}
	if s := spec.HTTPSink; s != nil {
		cfg.Sources = map[string]config.SourceConfig{}
		for _, s := range append([]LocalHTTPSink{*s}, spec.MoreHTTPSinks...) {
			cfg.Sources[s.Source] = config.SourceConfig{
				Verify: config.VerifyConfig{Type: "none"},
				Sinks: []config.SinkConfig{{ID: s.Sink, Type: "http", HTTP: &config.HTTPSink{
					URL: s.URL, TimeoutMs: s.TimeoutMs,
				}}},
			}
		}
	}
	if c := spec.DispatchConcurrency; c > 0 {
		cfg.Dispatch.Concurrency = c
		cfg.Dispatch.MaxInflight = max(cfg.Dispatch.MaxInflight, c)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return New(cfg, o)
}

// CatchURL is the URL a provider posts source's hooks to (http.prefix on
// the bound ingest address; tenant_path routing is not covered).
func (in *Instance) CatchURL(source string) string {
	return "http://" + in.IngestAddr() + in.cfg.HTTP.Prefix + "/" + source
}
