package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ankusa/ankusa/internal/config"
)

// configCmd: `ankusa config check --config F` validates F as serve would
// and prints the effective config, secrets redacted. 0 valid, 78 invalid.
func configCmd(args []string) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(os.Stderr, "usage: ankusa config check --config FILE")
		return 64
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	path := fs.String("config", "", "config file (default $ANKUSA_CONFIG, then ./ankusa.yml, then the built-in demo)")
	if err := fs.Parse(args[1:]); err != nil {
		return 64
	}
	cfg, err := checkConfig(*path, nil, os.Stdout)
	switch {
	case err == nil:
		return 0
	case cfg != nil: // valid, but stdout could not be written
		fmt.Fprintf(os.Stderr, "ankusa: %v\n", err)
		return 1
	default:
		return configError(err)
	}
}

// checkConfig loads the configuration exactly as `ankusa serve` would
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
func checkConfig(path string, getenv func(string) (string, bool), w io.Writer) (*config.Config, error) {
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
