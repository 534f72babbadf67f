// Package quickworker is the quickstart's downstream service: the HTTP
// endpoint an Ankusa http sink posts to. It is a library so that the
// quickstart test (examples/quickstart) runs the very handler that
// `go run ./examples/quickstart/worker` serves.
//
// What it shows is how a consumer of an at-least-once sender behaves: it
// processes each hook once, keyed on x-ankusa-idempotency-key, and answers
// a redelivery of a key it already processed with 200 ("duplicate,
// ignored") so that Ankusa stops retrying it. The set of processed keys is
// kept in memory only: a real consumer keeps it next to the effect of the
// processing (same transaction), for at least as long as Ankusa may still
// redeliver.
package quickworker

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Mode decides how the worker answers a hook.
type Mode string

const (
	// ModeOK processes every new hook and answers 200.
	ModeOK Mode = "ok"
	// ModeFail answers 503 to every hook without processing it, as a
	// service that is down would: Ankusa retries until max_attempts, then
	// dead-letters the delivery.
	ModeFail Mode = "fail"
	// ModeFlaky processes every new hook but answers 503 the first time,
	// as if the 200 had been lost on its way back. Ankusa retries, and the
	// retry is logged as "duplicate, ignored" and answered 200: the
	// redelivery at-least-once implies, made visible.
	ModeFlaky Mode = "flaky"
)

// ParseMode reads ok, fail or flaky.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.TrimSpace(strings.ToLower(s))); m {
	case ModeOK, ModeFail, ModeFlaky:
		return m, nil
	}
	return "", fmt.Errorf("unknown mode %q (want ok, fail or flaky)", s)
}

// Outcome of one request, as logged and recorded.
const (
	OutcomeProcessed = "processed"
	OutcomeDuplicate = "duplicate, ignored"
	OutcomeFailed    = "failed (mode fail)"
	OutcomeLostAck   = "processed, answer lost (mode flaky)"
)

// Call is one request the worker received.
type Call struct {
	At             time.Time
	ID             string // x-ankusa-id: the hook id, the same on every attempt and replay
	IdempotencyKey string // x-ankusa-idempotency-key: what the worker dedupes on
	ReplayID       string // x-ankusa-replay-id: the replay job id, "" outside a replay
	Source         string // x-ankusa-source
	Tenant         string // x-ankusa-tenant
	DedupeKey      string // x-ankusa-dedupe-key: the provider's event id, when the source dedupes
	Size           int64  // body bytes
	Status         int    // what the worker answered
	Outcome        string // one of the Outcome constants
}

// Worker is the handler: POST /hooks receives hooks; GET /mode shows the
// mode and PUT /mode (body: ok, fail or flaky) changes it without a
// restart, so the processed keys are kept.
type Worker struct {
	log *slog.Logger
	mux *http.ServeMux

	mu        sync.Mutex
	mode      Mode            // REQUIRES: mu held
	processed map[string]bool // REQUIRES: mu held; idempotency keys processed
	calls     []Call          // REQUIRES: mu held
}

// New returns a worker in mode m, logging to log (nil: slog.Default()).
func New(m Mode, log *slog.Logger) *Worker {
	if log == nil {
		log = slog.Default()
	}
	w := &Worker{log: log, mode: m, processed: map[string]bool{}, mux: http.NewServeMux()}
	w.mux.HandleFunc("POST /hooks", w.hook)
	w.mux.HandleFunc("GET /mode", w.getMode)
	w.mux.HandleFunc("PUT /mode", w.putMode)
	return w
}

// ServeHTTP implements http.Handler.
func (w *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.mux.ServeHTTP(rw, r) }

// SetMode changes how later hooks are answered.
func (w *Worker) SetMode(m Mode) {
	w.mu.Lock()
	w.mode = m
	w.mu.Unlock()
	w.log.Info("mode changed", "mode", string(m))
}

// Mode is the current mode.
func (w *Worker) Mode() Mode {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mode
}

// Calls returns every request received so far, oldest first.
func (w *Worker) Calls() []Call {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Call(nil), w.calls...)
}

func (w *Worker) hook(rw http.ResponseWriter, r *http.Request) {
	// Only the size is logged: a hook's body is the provider's data.
	size, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		w.log.Warn("reading the body failed", "err", err)
		http.Error(rw, "body read failed", http.StatusBadRequest)
		return
	}
	c := Call{
		At:             time.Now(),
		ID:             r.Header.Get("X-Ankusa-Id"),
		IdempotencyKey: r.Header.Get("X-Ankusa-Idempotency-Key"),
		ReplayID:       r.Header.Get("X-Ankusa-Replay-Id"),
		Source:         r.Header.Get("X-Ankusa-Source"),
		Tenant:         r.Header.Get("X-Ankusa-Tenant"),
		DedupeKey:      r.Header.Get("X-Ankusa-Dedupe-Key"),
		Size:           size,
	}
	key := c.IdempotencyKey
	if key == "" {
		key = c.ID // not from Ankusa; still dedupe on something stable
	}

	w.mu.Lock()
	switch {
	case w.mode == ModeFail:
		// Checked first: a service that is down answers nothing useful,
		// not even "already done".
		c.Status, c.Outcome = http.StatusServiceUnavailable, OutcomeFailed
	case w.processed[key]:
		c.Status, c.Outcome = http.StatusOK, OutcomeDuplicate
	case w.mode == ModeFlaky:
		w.processed[key] = true
		c.Status, c.Outcome = http.StatusServiceUnavailable, OutcomeLostAck
	default:
		w.processed[key] = true
		c.Status, c.Outcome = http.StatusOK, OutcomeProcessed
	}
	w.calls = append(w.calls, c)
	w.mu.Unlock()

	replay := c.ReplayID
	if replay == "" {
		replay = "-"
	}
	w.log.Info(c.Outcome,
		"x-ankusa-id", c.ID,
		"x-ankusa-idempotency-key", c.IdempotencyKey,
		"x-ankusa-replay-id", replay,
		"size", c.Size,
		"status", c.Status)
	rw.WriteHeader(c.Status)
}

func (w *Worker) getMode(rw http.ResponseWriter, _ *http.Request) {
	_, _ = fmt.Fprintln(rw, w.Mode()) // a failed write is a caller gone: nothing to do
}

func (w *Worker) putMode(rw http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	m, err := ParseMode(string(b))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.SetMode(m)
	_, _ = fmt.Fprintln(rw, m) // the mode is set; a failed write is a caller gone
}
