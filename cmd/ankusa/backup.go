package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/config"
)

// backupCmd: ankusa backup now|list|verify --config F
func backupCmd(args []string) int {
	if len(args) == 0 || (args[0] != "now" && args[0] != "list" && args[0] != "verify") {
		fmt.Fprintln(os.Stderr, "usage: ankusa backup now|list|verify --config FILE")
		return 64
	}
	sub := args[0]
	fs := flag.NewFlagSet("backup "+sub, flag.ContinueOnError)
	path := fs.String("config", "", "config file")
	if err := fs.Parse(args[1:]); err != nil {
		return 64
	}
	cfg, err := config.Load(*path, nil)
	if err != nil {
		return configError(err)
	}
	if !cfg.Backup.Enabled {
		fmt.Fprintln(os.Stderr, "ankusa backup: backup.enabled is false in this config")
		return 78
	}
	log := newLogger(cfg.Log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := app.BackupCommand(ctx, cfg, sub, log)
	if out != nil {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa backup %s: %v\n", sub, err)
		return 1
	}
	return 0
}
