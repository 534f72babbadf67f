package admin

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ankusa/ankusa/internal/queue"
	"github.com/ankusa/ankusa/internal/store"
)

const (
	// probeTTL is how long one probe write answers /ready. However many
	// load balancers poll, the store sees at most one probe fsync per TTL.
	probeTTL = time.Second
	// failureWindow is how long after a failed write or fsync the node
	// stays unready even once the fence has lifted, so that a balancer
	// polling every few seconds sees the failure rather than missing it.
	failureWindow = 10 * time.Second
)

// Readiness answers GET /ready: can this node ack a hook now?
//
// Ready means all four of (and, under dedupe.scope: fleet, a claim store
// that answers a ping):
//  1. the queue is not fenced (after a failed fsync nothing is acked until
//     the unsynced groups are removed);
//  2. the store has not failed a write or fsync in the last failureWindow;
//  3. the store's current DB generation has recorded no fatal error. This
//     covers the moment between a failed fsync and the writer entering the
//     fence, when the caller already has its 503 but the queue does not
//     yet say fenced, and when a cached probe result is still fresh;
//  4. a synced probe write (store.KeyProbe) succeeds. Reading is not enough:
//     a disk that went read-only or full still serves reads, and only a
//     write that waits for its fsync exercises the path an ack needs.
//
// Checks 1–3 are cheap reads done on every call, in that order; only the
// probe is cached.
//
// The probe is shared: its result is cached for probeTTL, and callers that
// arrive while one is in flight wait for it instead of starting another.
// A failed probe is cached too, so a failing disk is not hammered.
//
// Rejected: probing on a timer in the background. It writes even when
// nobody asks and needs a goroutine with a lifecycle; probing on demand
// costs at most one fsync per second and answers with a fresh result.
type Readiness struct {
	st         *store.Store
	q          *queue.Queue
	now        func() time.Time
	instance   string
	log        *slog.Logger
	probeWrite func(now time.Time) error                // a seam for tests; default writeProbe
	recovering func() bool                              // nil: never
	fleet      interface{ Ping(context.Context) error } // nil: node scope

	// mu guards every field below it.
	mu       sync.Mutex
	probed   bool       // a probe result is cached
	probedAt time.Time  // clock reading when the cached probe started
	probeErr error      // the cached result
	inflight *probeCall // the probe in progress, if any
	ready    bool       // last answer, to log transitions only
}

// probeCall is one probe write that every concurrent caller shares.
type probeCall struct {
	done chan struct{}
	err  error // set before done is closed
}

// NewReadiness builds the readiness check over d.Store and d.Queue.
func NewReadiness(d Deps) *Readiness {
	d.fill()
	r := &Readiness{
		st: d.Store, q: d.Queue, now: d.Now,
		instance:   d.Config.Node.Instance,
		log:        d.Logger.With("component", "readiness"),
		ready:      true,
		recovering: d.Recovering,
		fleet:      d.Fleet,
	}
	r.probeWrite = r.writeProbe
	return r
}

// Check reports whether the node is ready and the body /ready answers
// with: status, instance, store ("ok" | "failing"), intake (always "up" in
// disk mode), dedupe under dedupe.scope: fleet ("ok" | "down") and, when
// unready, reason ("fenced" | "recent_failure" | "dedupe_down" |
// "store_failed" | "probe_failed"). ctx bounds only the wait for a probe another caller
// started; a probe write itself is never abandoned half way.
func (r *Readiness) Check(ctx context.Context) (bool, map[string]any) {
	reason := ""
	now := r.now()
	if r.q.Stats().Fenced {
		reason = "fenced"
	} else if lf := r.q.LastFailure(); !lf.IsZero() && now.Sub(lf) < failureWindow {
		// A negative difference (clock stepped back) also counts as recent.
		reason = "recent_failure"
	} else if err := r.st.Failed(); err != nil {
		// A failure the commit path has not met yet (the probe's own fsync):
		// fence now rather than on the next hook, which would get the 503.
		r.q.ReportStoreFailure(err)
		reason = "store_failed"
	} else if err := r.probe(ctx, now); err != nil {
		reason = "probe_failed"
	}

	storeState, intakeState := "ok", "up"
	if reason != "" {
		storeState = "failing"
	}
	// Under dual the log is "down" only while the adapter says it is not
	// answering; an open gate with a log that answers stays "up", so a
	// drained node can still receive the one batch that probes the gate.
	if r.recovering != nil && r.recovering() {
		intakeState = "recovering"
		if reason == "" {
			reason = "recovering"
		}
	} else if ds, dual := r.q.Dual(); dual && !ds.Ready {
		intakeState = "down"
		if reason == "" {
			reason = "intake_down"
		}
	}
	dedupeState := ""
	if r.fleet != nil {
		// Ping is bounded by fleet.redis.timeout_ms; a claim store that
		// does not answer means every dedupe-keyed hook would get 503.
		dedupeState = "ok"
		if err := r.fleet.Ping(ctx); err != nil {
			dedupeState = "down"
			if reason == "" {
				reason = "dedupe_down"
			}
		}
	}
	ok := reason == ""
	detail := map[string]any{"instance": r.instance, "intake": intakeState, "store": storeState}
	if dedupeState != "" {
		detail["dedupe"] = dedupeState
	}
	if ok {
		detail["status"] = "ready"
	} else {
		detail["status"], detail["reason"] = "unready", reason
	}
	r.noteTransition(ok, reason)
	return ok, detail
}

// probe returns the cached probe result, waits for the probe in flight, or
// runs a new one.
func (r *Readiness) probe(ctx context.Context, now time.Time) error {
	r.mu.Lock()
	if r.probed {
		if age := now.Sub(r.probedAt); age >= 0 && age < probeTTL {
			err := r.probeErr
			r.mu.Unlock()
			return err
		}
	}
	if c := r.inflight; c != nil {
		r.mu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := &probeCall{done: make(chan struct{})}
	r.inflight = c
	r.mu.Unlock()

	c.err = r.probeWrite(now)

	r.mu.Lock()
	r.inflight = nil
	r.probed, r.probedAt, r.probeErr = true, now, c.err
	r.mu.Unlock()
	close(c.done)
	if c.err != nil {
		r.log.Warn("readiness probe write failed", "err", c.err)
	}
	return c.err
}

// writeProbe stamps store.KeyProbe with now in a synced write. The key sits
// outside every family the queue and dispatch read, so a probe never
// touches a hook; its fsync also syncs whatever the writer applied before
// it, which is harmless: durable_seq moves only on the syncer's fsyncs.
func (r *Readiness) writeProbe(now time.Time) error {
	b := r.st.NewBatch()
	if b.Err() != nil {
		return store.ErrClosed
	}
	defer b.Close()
	if err := b.SetProbe(now); err != nil {
		return err
	}
	return r.st.ApplySync(b)
}

// noteTransition logs when readiness changes, not on every poll.
func (r *Readiness) noteTransition(ok bool, reason string) {
	r.mu.Lock()
	changed := r.ready != ok
	r.ready = ok
	r.mu.Unlock()
	switch {
	case changed && ok:
		r.log.Info("node ready again")
	case changed:
		r.log.Warn("node unready", "reason", reason)
	}
}

// HealthHandler serves only GET /health and GET /ready, for the ingest
// listener; New serves the same two routes on the operator port.
func HealthHandler(d Deps, r *Readiness) http.Handler {
	d.fill()
	mux := http.NewServeMux()
	routeHealth(mux, d, r)
	return jsonErrors(mux)
}

func routeHealth(mux *http.ServeMux, d Deps, rd *Readiness) {
	roles := d.Config.Node.Roles
	if roles == nil {
		roles = []string{}
	}
	health := map[string]any{
		"status":   "ok",
		"instance": d.Config.Node.Instance,
		"version":  d.Version,
		"commit":   d.Commit,
		"roles":    roles,
	}
	// Liveness: the process answers. It says nothing about the store, so
	// a supervisor does not restart a node that is only fenced.
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, health)
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, req *http.Request) {
		ok, detail := rd.Check(req.Context())
		if !ok {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, detail)
			return
		}
		writeJSON(w, http.StatusOK, detail)
	})
}
