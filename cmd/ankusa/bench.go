package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	harness "github.com/ankusa/ankusa/internal/bench"
	"github.com/ankusa/ankusa/internal/config"
)

// bench runs the closed-loop benchmark (null handler vs disk and/or dual
// mode) and prints the figures and the targets to stdout. Exit 0 unless the
// run fails, dual mode was measured at C=64 and missed its latency bound, or
// -gate is given and a target is missed or not measured (then 1).
// `bench e2e` runs the end-to-end delivery benchmark instead.
func bench(args []string) int {
	if len(args) > 0 && args[0] == "e2e" {
		return benchE2E(args[1:])
	}
	if len(args) > 0 && args[0] == "client" {
		// Hidden: the out-of-process load generator the bench starts.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return harness.ClientMain(ctx, args[1:], os.Stdout, os.Stderr)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ankusa bench [flags]      closed loop: null handler, then each -mode, per -c level")
		fmt.Fprintln(fs.Output(), "       ankusa bench e2e [flags]  end-to-end delivery to an in-process HTTP receiver (ankusa bench e2e -h)")
		fs.PrintDefaults()
	}
	clients := fs.String("c", "64,512", "comma-separated concurrency levels (closed-loop clients)")
	body := fs.Int("b", 1024, "request body size in bytes")
	dur := fs.Duration("d", 10*time.Second, "measured window per run")
	warmup := fs.Duration("warmup", time.Second, "warmup per run, excluded from the figures")
	primeFlag := fs.Duration("prime", 2*time.Minute, "about the longest each instance's store is primed before its warmup, outside every figure, until warm (its memtables grown to full size: the steady state); 0 for none")
	dir := fs.String("dir", "", "parent of the per-run data dirs (default: a temp dir, removed after)")
	gate := fs.Bool("gate", false, "exit 1 if a target is missed or not measured")
	memprofile := fs.String("memprofile", "", "write an allocation profile of the whole run to this file at the end (go tool pprof -sample_index=alloc_objects; not split by mode: null's allocations are net/http's)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (samples are labelled mode=null|nullsha|nullsync|disk|dual, clients=N, and mode=calibrate for the fsync pricing after nullsync and disk runs; priming and warmup are in it, under their run's labels; with -client process the load generator is not in it)")
	modeFlag := fs.String("mode", "disk", "instance modes measured after the null handler at every level: disk, dual, or a comma list (disk,dual)")
	refFlag := fs.String("ref", "", "references measured after null at every level, with disk's ratios against each (informational: issue 14's targets stay against null): nullsha (null plus the body's SHA-256, which every stored hook's envelope carries: the contract's floor), nullsync (nullsha answering only once the body is fdatasync'd in a group-committed log beside the stores: a minimal durable handler; its fsyncs and disk's are priced after each run and the summary adds disk against it charged disk's fsyncs), or a comma list")
	confirmMs := fs.Int("confirm-ms", 5, "dual mode: the memory intake's confirm latency in ms (intake.memory.confirm_latency_ms)")
	intakeDir := intakeDirFlag(fs)
	retentionFlag := fs.String("retention", "", "comma-separated retention.delivered values; each instance mode runs once per value (e.g. 0,2s,72h: what history costs ingest)")
	reps := fs.Int("reps", 3, "repetitions, interleaved (every level and mode, then again): each ratio is printed as a range")
	clientFlag := fs.String("client", harness.ClientProcess, "where the load generator runs: process (a child process, so the server's CPU and allocations are its own) or inproc (this process, the harness before issue 14)")
	rolesFlag := fs.String("roles", "both", "node.roles of the disk instance: both (ingest,dispatch) or ingest (no dispatcher); dual always runs both")
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
	if *body <= 0 || *dur <= 0 || *warmup < 0 || *primeFlag < 0 || *confirmMs < 0 || *reps <= 0 {
		fmt.Fprintln(os.Stderr, "ankusa bench: -b, -d and -reps must be > 0, -warmup, -prime and -confirm-ms >= 0")
		return 64
	}
	if *clientFlag != harness.ClientProcess && *clientFlag != harness.ClientInProcess {
		fmt.Fprintf(os.Stderr, "ankusa bench: -client %q: want %s or %s\n", *clientFlag, harness.ClientProcess, harness.ClientInProcess)
		return 64
	}
	modes, err := harness.ParseModes(*modeFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa bench: -mode: %v\n", err)
		return 64
	}
	roles, err := harness.ParseRoles(*rolesFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa bench: -roles: %v\n", err)
		return 64
	}
	refs, err := harness.ParseRefs(*refFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa bench: -ref: %v\n", err)
		return 64
	}
	if slices.Contains(modes, harness.ModeDual) && !slices.Contains(roles, "dispatch") {
		fmt.Fprintln(os.Stderr, "ankusa bench: -roles ingest applies to disk only (wal.type dual requires ingest and dispatch); measure dual in a separate run")
		return 64
	}
	var retentions []string
	if *retentionFlag != "" {
		retentions = strings.Split(*retentionFlag, ",")
		for _, r := range retentions {
			c := config.Default()
			c.Retention.Delivered = config.Duration(r)
			if err := c.Validate(); err != nil {
				fmt.Fprintf(os.Stderr, "ankusa bench: -retention %q: %v\n", r, err)
				return 64
			}
		}
	}
	w := *warmup
	if w == 0 {
		w = -1 // harness.Options: negative means no warmup, zero the default
	}
	primeFor := *primeFlag
	if primeFor == 0 {
		primeFor = -1 // likewise
	}

	stopProfiles, ok := startProfiles("ankusa bench", *cpuprofile, *memprofile)
	if !ok {
		return 1
	}
	defer stopProfiles()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rs, err := harness.Run(ctx, harness.Options{
		Clients:   levels,
		BodyBytes: *body,
		Duration:  *dur,
		Warmup:    w,
		Prime:     primeFor,
		DataDir:   *dir,
		Out:       os.Stdout,
		Modes:     modes,
		Refs:      refs,
		ConfirmMs: *confirmMs,
		IntakeDir: *intakeDir,
		Roles:     roles,
		Client:    *clientFlag,
		Reps:      *reps,

		Retentions: retentions,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa bench: %v\n", err)
		return 1
	}
	v := harness.PrintSummary(os.Stdout, rs)
	if v.Failed() || (*gate && !v.Pass()) {
		return 1
	}
	return 0
}

// benchE2E runs the end-to-end delivery benchmark. Exit 1 when an acked
// hook was not delivered (missing > 0) or the run failed.
func benchE2E(args []string) int {
	fs := flag.NewFlagSet("bench e2e", flag.ContinueOnError)
	n := fs.Int("n", 20_000, "hooks to post in all")
	clients := fs.Int("c", 256, "closed-loop clients posting them")
	latency := fs.Duration("latency", 5*time.Millisecond, "how long the receiver waits before answering 200")
	body := fs.Int("b", 1024, "request body size in bytes")
	conc := fs.Int("dispatch-concurrency", config.Default().Dispatch.Concurrency, "dispatch.concurrency of the instance (default: the config's)")
	modeFlag := fs.String("mode", "disk", "wal.type of the instance: disk or dual (intake.type=memory)")
	confirmMs := fs.Int("confirm-ms", 5, "dual mode: the memory intake's confirm latency in ms")
	intakeDir := intakeDirFlag(fs)
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the deliveries after the last post is answered")
	dir := fs.String("dir", "", "parent of the run's data dir (default: the temp dir); the run's dir is removed after")
	parked := fs.Int("parked", 0, "first park this many hooks on a second source whose sink refuses every attempt (0: none)")
	settle := fs.Duration("parked-settle", 20*time.Second, "with -parked: the wait after parking them, before the measured run")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (the receiver's samples are labelled role=receiver; the load generator is a child process, not in it)")
	memprofile := fs.String("memprofile", "", "write an allocation profile of the run to this file at the end (go tool pprof -sample_index=alloc_space)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 64
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "ankusa bench e2e: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return 64
	}
	if *n <= 0 || *clients <= 0 || *body <= 0 || *conc <= 0 || *latency < 0 || *confirmMs < 0 || *timeout <= 0 || *parked < 0 || *settle < 0 {
		fmt.Fprintln(os.Stderr, "ankusa bench e2e: -n, -c, -b, -dispatch-concurrency and -timeout must be > 0, -latency, -confirm-ms, -parked and -parked-settle >= 0")
		return 64
	}
	modes, err := harness.ParseModes(*modeFlag)
	if err != nil || len(modes) != 1 {
		fmt.Fprintln(os.Stderr, "ankusa bench e2e: -mode must be disk or dual")
		return 64
	}
	l := *latency
	if l == 0 {
		l = -1 // harness.E2EOptions: negative means none, zero the default
	}
	ps := *settle
	if ps == 0 {
		ps = -1 // as -latency: negative means none, zero the default
	}
	stopProfiles, ok := startProfiles("ankusa bench e2e", *cpuprofile, *memprofile)
	if !ok {
		return 1
	}
	defer stopProfiles()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := harness.RunE2E(ctx, harness.E2EOptions{
		Hooks: *n, Clients: *clients, Latency: l, BodyBytes: *body, DispatchConcurrency: *conc,
		Mode: modes[0], ConfirmMs: *confirmMs, IntakeDir: *intakeDir, Timeout: *timeout, DataDir: *dir, Out: os.Stdout,
		Parked: *parked, ParkedSettle: ps,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "ankusa bench e2e: %v\n", err)
		return 1
	}
	harness.PrintE2E(os.Stdout, r)
	if !r.OK() {
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

// startProfiles starts a CPU profile to cpu and arranges an allocation
// profile to mem (either "" for none); stop ends the one and writes the
// other. ok is false (the error printed) when a file cannot be written.
func startProfiles(cmd, cpu, mem string) (stop func(), ok bool) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: -cpuprofile: %v\n", cmd, err)
			return stop, false
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			fmt.Fprintf(os.Stderr, "%s: -cpuprofile: %v\n", cmd, err)
			return stop, false
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); _ = f.Close() })
	}
	if mem != "" {
		f, err := os.Create(mem)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: -memprofile: %v\n", cmd, err)
			stop()
			return func() {}, false
		}
		stops = append(stops, func() {
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintf(os.Stderr, "%s: -memprofile: %v\n", cmd, err)
			}
			_ = f.Close()
		})
	}
	return stop, true
}

// intakeDirFlag is -intake-dir, shared by bench and bench e2e.
func intakeDirFlag(fs *flag.FlagSet) *string {
	return fs.String("intake-dir", harness.IntakeAuto, "dual mode: where the memory intake log goes: auto (/dev/shm when it is a tmpfs: a broker's fsync does not share this host's disk), same (beside the store, on its disk), or a parent dir for a fresh log dir per run")
}
