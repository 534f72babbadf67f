package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
)

// recoverCmd: ankusa recover --config F [--node ID] [--from OFFSET|earliest|backup] [--dry-run] [--allow-gap]
func recoverCmd(args []string) int {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	path := fs.String("config", "", "config file of the stopped node")
	var f app.RecoverFlags
	fs.StringVar(&f.Node, "node", "", "assert the node id (must equal intake.node_id)")
	fs.StringVar(&f.From, "from", "backup", "where to replay from: OFFSET, earliest, or backup (the store's offset)")
	fs.BoolVar(&f.DryRun, "dry-run", false, "read and count; write and publish nothing")
	fs.BoolVar(&f.AllowGap, "allow-gap", false, "recover over a log truncated past the store's offset (the gap is logged)")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	cfg, err := config.Load(*path, nil)
	if err != nil {
		return configError(err)
	}
	log := newLogger(cfg.Log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := app.Recover(ctx, cfg, f, log)
	fmt.Println(sum.String())
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa recover: %v\n", err)
		return 1
	}
	if f.DryRun {
		fmt.Println("dry run: nothing was written")
	}
	if n := len(sum.Refused); n > 0 {
		// Recovered, but those hooks are not in the log: say so. The next
		// boot carries them (recover_on_boot true or false), so a runbook
		// that starts the node after this goes on.
		fmt.Fprintf(os.Stderr, "ankusa recover: warning: the log refused %d hooks (first seq %d; larger than it takes); they stay in the store, are delivered, and the next boot carries them as stuck records (ankusa_intake_reconcile_stuck)\n",
			n, slices.Min(sum.Refused))
	}
	return 0
}
