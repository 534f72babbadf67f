package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ankusa/ankusa/internal/loadgen"
)

// urlList is a repeatable --url flag (also comma-separated).
type urlList []string

func (u *urlList) String() string { return strings.Join(*u, ",") }
func (u *urlList) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*u = append(*u, p)
		}
	}
	return nil
}

// loadgenCmd: ankusa loadgen [--rate N | --concurrency N] --url U… --out F,
// ankusa loadgen consume, ankusa loadgen verify.
func loadgenCmd(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "consume":
			return loadgenConsume(args[1:])
		case "verify":
			return loadgenVerify(args[1:])
		}
	}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var urls urlList
	fs.Var(&urls, "url", "ingest URL (repeatable); retries rotate through them as a load balancer would")
	rate := fs.Float64("rate", 0, "hooks started per second (fixed rate)")
	conc := fs.Int("concurrency", 0, "closed-loop workers (when --rate is 0) [8]")
	count := fs.Int("count", 0, "stop after this many hooks (0: until --duration or a signal)")
	dur := fs.Duration("duration", 0, "stop starting hooks after this long")
	out := fs.String("out", "acked.jsonl", "acked ids, one JSON line each")
	body := fs.Int("body-bytes", 256, "approximate body size")
	header := fs.String("dedupe-header", loadgen.DefaultDedupeHeader, "header carrying each event's id")
	attempts := fs.Int("max-attempts", 0, "attempts per hook (0: until acked)")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	if len(urls) == 0 {
		fmt.Fprintln(os.Stderr, "ankusa loadgen: --url is required")
		return 64
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ankusa loadgen:", err)
		return 1
	}
	defer f.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := loadgen.Run(ctx, loadgen.Options{
		URLs: urls, Rate: *rate, Concurrency: *conc, Count: *count, Duration: *dur,
		BodyBytes: *body, DedupeHeader: *header, MaxAttempts: *attempts, Out: f,
	})
	fmt.Println(st)
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "ankusa loadgen:", err)
		return 1
	}
	if err := f.Sync(); err != nil {
		fmt.Fprintln(os.Stderr, "ankusa loadgen:", err)
		return 1
	}
	return 0
}

func loadgenConsume(args []string) int {
	fs := flag.NewFlagSet("loadgen consume", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9900", "address of the sink target")
	pg := fs.String("postgres", "", "Postgres URL, e.g. postgres://postgres@127.0.0.1:5432/test")
	table := fs.String("table", loadgen.DefaultTable, "deliveries table")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	if *pg == "" {
		fmt.Fprintln(os.Stderr, "ankusa loadgen consume: --postgres is required")
		return 64
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := loadgen.NewConsumer(ctx, loadgen.ConsumerOptions{Postgres: *pg, Table: *table, Logger: slog.Default()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ankusa loadgen consume:", err)
		return 1
	}
	defer c.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ankusa loadgen consume:", err)
		return 1
	}
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Println("loadgen consume listening on", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "ankusa loadgen consume:", err)
		return 1
	}
	return 0
}

func loadgenVerify(args []string) int {
	fs := flag.NewFlagSet("loadgen verify", flag.ContinueOnError)
	acked := fs.String("acked", "acked.jsonl", "the acked file loadgen wrote")
	pg := fs.String("postgres", "", "Postgres URL")
	table := fs.String("table", loadgen.DefaultTable, "deliveries table")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	if *pg == "" {
		fmt.Fprintln(os.Stderr, "ankusa loadgen verify: --postgres is required")
		return 64
	}
	f, err := os.Open(*acked)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ankusa loadgen verify:", err)
		return 1
	}
	defer f.Close()
	rep, err := loadgen.Verify(context.Background(), f, *pg, *table)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ankusa loadgen verify:", err)
		return 1
	}
	fmt.Println(rep)
	if !rep.OK() {
		if len(rep.MissingIDs) > 0 {
			fmt.Fprintln(os.Stderr, "missing (first 20):", strings.Join(rep.MissingIDs, " "))
		}
		return 1
	}
	return 0
}
