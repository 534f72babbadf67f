package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ankusa/ankusa/internal/ops"
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
	cfg, err := ops.CheckConfig(*path, nil, os.Stdout)
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
