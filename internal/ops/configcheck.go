package ops

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/ankusa/ankusa/internal/config"
)

// CheckConfig loads the configuration exactly as `ankusa serve` would
// (config.Load: the same path resolution, ${VAR} interpolation, defaults,
// ANKUSA_* overrides and validation) and, when it is valid, writes the
// effective configuration to w as indented JSON with every secret redacted
// (config.Config.Redacted, the allowlist GET /v1/config uses).
//
// Error contract: a refused configuration is returned as the error of
// config.Load (it names the file and every violated key and rule, never a
// secret's value) and nothing is written to w; the caller exits with
// config.ExitConfig. An error writing to w is returned wrapped, with the
// configuration valid.
//
// Why JSON: it is what GET /v1/config answers, so the output of a Helm hook
// or CI step can be compared with a running node's, and it pipes into jq.
func CheckConfig(path string, getenv func(string) (string, bool), w io.Writer) (*config.Config, error) {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return nil, err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg.Redacted()); err != nil {
		return cfg, fmt.Errorf("write effective config: %w", err)
	}
	return cfg, nil
}
