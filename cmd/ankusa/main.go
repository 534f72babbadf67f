// Command ankusa is the one binary: serve (the default), bench, version.
// The operator logic lives in library packages; this file only parses
// flags, loads config and wires signals.
package main

import (
	"fmt"
	"os"
	"runtime"
)

// Build information, stamped at link time by `make build` (the Dockerfile
// runs the same target): -ldflags "-X main.version=v1.2.3 -X main.commit=…".
// They are the only package-level variables of the binary, written by the
// linker and never at run time.
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args)
	case "bench":
		return bench(args)
	case "recover":
		return recoverCmd(args)
	case "backup":
		return backupCmd(args)
	case "loadgen":
		return loadgenCmd(args)
	case "config":
		return configCmd(args)
	case "version":
		fmt.Printf("ankusa %s (commit %s, %s)\n", version, commit, runtime.Version())
		return 0
	case "help":
		usage()
		return 0
	default:
		fmt.Fprintf(os.Stderr, "ankusa: unknown command %q\n", cmd)
		usage()
		return 64 // EX_USAGE
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: ankusa [command] [flags]

commands:
  serve     run the receiver (default); --config FILE (or $ANKUSA_CONFIG, then ./ankusa.yml, then the built-in demo)
  recover   replay the intake log into a stopped node's store (wal.type: dual):
            --config F [--node ID] [--from OFFSET|earliest|backup] [--dry-run] [--allow-gap]
  backup    now|list|verify --config F: back up a stopped node, list or verify the backups
  bench     closed-loop load: a null handler, then -mode disk,dual (-confirm-ms); bench e2e: ingest then delivery
  loadgen   drive load: [--rate N | --concurrency N] --url U… --out acked.jsonl;
            loadgen consume --listen ADDR --postgres URL (an HTTP sink target writing deliveries to Postgres);
            loadgen verify --acked acked.jsonl --postgres URL (missing, extra_deliveries, duplicate_hooks, sha_mismatches)
  config    check --config F: validate F as serve would, print the effective config (secrets redacted); exit 0 valid, 78 invalid
  version   print the version, the commit and the Go version
`)
}
