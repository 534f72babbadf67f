// Command worker is the quickstart's downstream service: it receives the
// hooks Ankusa delivers to POST /hooks, logs Ankusa's headers, and dedupes
// on x-ankusa-idempotency-key so that redeliveries show up as
// "duplicate, ignored".
//
//	go run ./worker                 # answer 200 (from examples/quickstart)
//	go run ./worker -mode fail      # answer 503 to everything: fills the DLQ
//	go run ./worker -mode flaky     # process, but answer 503 the first time
//	curl -X PUT localhost:8080/mode -d ok   # switch mode while running
//
// The handler lives in package quickworker, which the quickstart test runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ankusa/ankusa/examples/quickstart/quickworker"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	mode := flag.String("mode", "ok", "how to answer hooks: ok | fail | flaky")
	fail := flag.Bool("fail", false, "shorthand for -mode fail")
	flag.Parse()
	if *fail {
		*mode = string(quickworker.ModeFail)
	}
	m, err := quickworker.ParseMode(*mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv := &http.Server{
		Addr:              *addr,
		Handler:           quickworker.New(m, log),
		ReadHeaderTimeout: 10 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("worker listening", "addr", *addr, "mode", string(m), "hooks", "POST /hooks")
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("listen", "err", err)
		os.Exit(1)
	}
}
