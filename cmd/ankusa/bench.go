package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	harness "github.com/ankusa/ankusa/internal/bench"
)

// bench runs the closed-loop benchmark (null handler vs disk mode) and
// prints the figures and the targets to stdout. Exit 0 unless the run fails,
// or -gate is given and a target is missed or not measured (then 1).
func bench(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	clients := fs.String("c", "64,512", "comma-separated concurrency levels (closed-loop clients)")
	body := fs.Int("b", 1024, "request body size in bytes")
	dur := fs.Duration("d", 10*time.Second, "measured window per run")
	warmup := fs.Duration("warmup", time.Second, "warmup per run, excluded from the figures")
	dir := fs.String("dir", "", "parent of the per-run data dirs (default: a temp dir, removed after)")
	gate := fs.Bool("gate", false, "exit 1 if a target is missed or not measured")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (samples are labelled mode=null|disk, clients=N)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 64
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "ankusa bench: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return 64
	}
	levels, err := parseLevels(*clients)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa bench: -c: %v\n", err)
		return 64
	}
	if *body <= 0 || *dur <= 0 || *warmup < 0 {
		fmt.Fprintln(os.Stderr, "ankusa bench: -b and -d must be > 0, -warmup >= 0")
		return 64
	}
	w := *warmup
	if w == 0 {
		w = -1 // harness.Options: negative means no warmup, zero the default
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ankusa bench: -cpuprofile: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "ankusa bench: -cpuprofile: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rs, err := harness.Run(ctx, harness.Options{
		Clients:   levels,
		BodyBytes: *body,
		Duration:  *dur,
		Warmup:    w,
		DataDir:   *dir,
		Out:       os.Stdout,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa bench: %v\n", err)
		return 1
	}
	v := harness.PrintSummary(os.Stdout, rs)
	if *gate && !v.Pass() {
		return 1
	}
	return 0
}

func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no levels")
	}
	return out, nil
}
