// Package loadgen is the fleet drill's provider and consumer: Run posts
// hooks the way a webhook provider does (a dedupe id per event, retries of
// every 5xx / 409 / connection error, honouring Retry-After, across the
// load balancer's URLs), and records every acked id with its body's sha256;
// Consumer is an HTTP sink target that writes every delivery to Postgres;
// Verify compares the two.
package loadgen

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDedupeHeader carries the event id of every posted hook; sources
// under test dedupe on it (`dedupe: {header: X-Loadgen-Id}`).
const DefaultDedupeHeader = "X-Loadgen-Id"

// Ack is one line of the acked file: a 201 the provider was given.
type Ack struct {
	ID        string    `json:"id"`  // the hook id Ankusa answered
	Key       string    `json:"key"` // the event id (dedupe key) posted
	SHA256    string    `json:"sha256"`
	Duplicate bool      `json:"duplicate,omitempty"`
	URL       string    `json:"url"`
	At        time.Time `json:"at"`
}

// Response is one attempt's outcome, for callers that check a window (the
// drill's "zero 201 while the log is down").
type Response struct {
	Start, End time.Time
	URL        string
	Status     int    // 0: no HTTP answer (connection error)
	Error      string // the JSON "error" of a refusal, or the transport error
	Attempt    int    // 0 for the hook's first attempt
	Duplicate  bool   // a 201 naming an earlier hook
}

// Options configure Run. Exactly one of Rate and Concurrency drives the load.
type Options struct {
	URLs []string
	// Rate is hooks started per second (fixed rate, open loop); each hook
	// runs in its own goroutine, bounded by MaxInflight.
	Rate float64
	// Concurrency is the number of closed-loop workers (used when Rate is 0).
	Concurrency int
	// Count stops after this many hooks are started (0: until ctx ends or
	// Duration passes).
	Count    int
	Duration time.Duration
	// Stop, when closed, ends the starting of new hooks; hooks in flight
	// keep retrying until acked or ctx ends (a provider does).
	Stop <-chan struct{}
	// BodyBytes pads each body to about this size [256].
	BodyBytes int
	// DedupeHeader names the header carrying the event id [X-Loadgen-Id].
	DedupeHeader string
	// MaxAttempts bounds the retries of one hook [0: until acked or ctx ends,
	// as a provider with a long retry schedule].
	MaxAttempts int
	// MaxBackoff caps a Retry-After or the default backoff [2s].
	MaxBackoff time.Duration
	// MaxInflight bounds fixed-rate goroutines [1024].
	MaxInflight int
	// Timeout is one attempt's HTTP timeout [10s].
	Timeout time.Duration
	// Out receives one JSON Ack per line. Required.
	Out io.Writer
	// OnResponse, when set, sees every attempt (it must not block long).
	OnResponse func(Response)
	// Client; nil builds one.
	Client *http.Client
	// RunID prefixes the event ids; empty mints a random one.
	RunID string
}

// Stats summarise a run.
type Stats struct {
	Started, Acked, Duplicates, GaveUp int64
	Attempts                           int64
	ByStatus                           map[int]int64
}

func (s Stats) String() string {
	return fmt.Sprintf("started=%d acked=%d duplicates=%d gave_up=%d attempts=%d statuses=%v",
		s.Started, s.Acked, s.Duplicates, s.GaveUp, s.Attempts, s.ByStatus)
}

type runner struct {
	o        Options
	mu       sync.Mutex // guards out and byStatus
	byStatus map[int]int64
	enc      *json.Encoder
	started  atomic.Int64
	acked    atomic.Int64
	dups     atomic.Int64
	gaveUp   atomic.Int64
	attempts atomic.Int64
	next     atomic.Uint64
}

// Run drives load until Count hooks have finished, Duration passed or ctx
// ends. Hooks in flight when it stops are abandoned only when ctx ends; a
// Count or Duration stop lets them finish (a provider keeps retrying).
func Run(ctx context.Context, o Options) (Stats, error) {
	if len(o.URLs) == 0 {
		return Stats{}, errors.New("loadgen: no --url")
	}
	if o.Out == nil {
		return Stats{}, errors.New("loadgen: no output")
	}
	if o.Rate <= 0 && o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.BodyBytes <= 0 {
		o.BodyBytes = 256
	}
	if o.DedupeHeader == "" {
		o.DedupeHeader = DefaultDedupeHeader
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 2 * time.Second
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 1024
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{
			Timeout:   o.Timeout,
			Transport: &http.Transport{MaxIdleConnsPerHost: 256},
		}
	}
	if o.RunID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.RunID = hex.EncodeToString(b[:])
	}
	r := &runner{o: o, byStatus: map[int]int64{}, enc: json.NewEncoder(o.Out)}
	// stopStart ends the starting of new hooks; ctx ends everything.
	startCtx := ctx
	if o.Duration > 0 {
		var cancel context.CancelFunc
		startCtx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	if o.Stop != nil {
		var cancel context.CancelFunc
		startCtx, cancel = context.WithCancel(startCtx)
		defer cancel()
		go func() {
			select {
			case <-o.Stop:
				cancel()
			case <-startCtx.Done():
			}
		}()
	}
	var wg sync.WaitGroup
	if o.Rate > 0 {
		r.fixedRate(ctx, startCtx, &wg)
	} else {
		for i := 0; i < o.Concurrency; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r.take(startCtx) {
					r.hook(ctx)
				}
			}()
		}
	}
	wg.Wait()
	return r.stats(), ctx.Err()
}

// take reserves the next hook, or reports that starting is over.
func (r *runner) take(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	n := r.started.Add(1)
	if r.o.Count > 0 && n > int64(r.o.Count) {
		r.started.Add(-1)
		return false
	}
	return true
}

func (r *runner) fixedRate(ctx, startCtx context.Context, wg *sync.WaitGroup) {
	interval := time.Duration(float64(time.Second) / r.o.Rate)
	t := time.NewTicker(interval)
	defer t.Stop()
	slots := make(chan struct{}, r.o.MaxInflight)
	for {
		select {
		case <-startCtx.Done():
			return
		case <-t.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			// Saturated: a fixed rate never queues unboundedly; the tick is
			// skipped and shows as a lower started count.
			continue
		}
		if !r.take(startCtx) {
			<-slots
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			r.hook(ctx)
		}()
	}
}

// hook posts one event until it is acked, MaxAttempts is spent or ctx ends.
func (r *runner) hook(ctx context.Context) {
	n := r.next.Add(1)
	key := fmt.Sprintf("%s-%d", r.o.RunID, n)
	body := makeBody(key, n, r.o.BodyBytes)
	sum := sha256.Sum256(body)
	shaHex := hex.EncodeToString(sum[:])
	for attempt := 0; r.o.MaxAttempts == 0 || attempt < r.o.MaxAttempts; attempt++ {
		// A provider retries against the same hostname; behind a load
		// balancer that reaches another node, which is what rotating the
		// URL stands for.
		url := r.o.URLs[(int(n)+attempt)%len(r.o.URLs)]
		res, id, dup, wait := r.attempt(ctx, url, key, body)
		res.Attempt, res.Duplicate = attempt, dup
		r.attempts.Add(1)
		r.mu.Lock()
		r.byStatus[res.Status]++
		r.mu.Unlock()
		if r.o.OnResponse != nil {
			r.o.OnResponse(res)
		}
		if res.Status == http.StatusCreated && id != "" {
			r.record(Ack{ID: id, Key: key, SHA256: shaHex, Duplicate: dup, URL: url, At: res.End})
			return
		}
		if !retryable(res.Status) {
			r.gaveUp.Add(1)
			return
		}
		if wait < 0 {
			wait = min(time.Duration(attempt+1)*100*time.Millisecond, r.o.MaxBackoff)
		}
		select {
		case <-ctx.Done():
			r.gaveUp.Add(1)
			return
		case <-time.After(min(wait, r.o.MaxBackoff)):
		}
	}
	r.gaveUp.Add(1)
}

// retryable is a provider's rule: no answer, 408, 409, 429 and 5xx are tried again.
func retryable(status int) bool {
	return status == 0 || status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

func (r *runner) attempt(ctx context.Context, url, key string, body []byte) (res Response, id string, dup bool, wait time.Duration) {
	res, wait = Response{Start: time.Now(), URL: url}, -1 // -1: no Retry-After, back off
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		res.End, res.Error = time.Now(), err.Error()
		return res, "", false, -1
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(r.o.DedupeHeader, key)
	resp, err := r.o.Client.Do(req)
	if err != nil {
		res.End, res.Error = time.Now(), err.Error()
		return res, "", false, -1
	}
	defer func() { _ = resp.Body.Close() }() // the answer is read whole below
	var ans struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
		Error     string `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(raw, &ans)
	res.End, res.Status, res.Error = time.Now(), resp.StatusCode, ans.Error
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(s); err == nil && secs >= 0 {
			wait = time.Duration(secs) * time.Second
		}
	}
	return res, ans.ID, ans.Duplicate, wait
}

func (r *runner) record(a Ack) {
	r.acked.Add(1)
	if a.Duplicate {
		r.dups.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(a)
}

func (r *runner) stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	by := make(map[int]int64, len(r.byStatus))
	for k, v := range r.byStatus {
		by[k] = v
	}
	return Stats{
		Started: r.started.Load(), Acked: r.acked.Load(), Duplicates: r.dups.Load(),
		GaveUp: r.gaveUp.Load(), Attempts: r.attempts.Load(), ByStatus: by,
	}
}

// makeBody is a JSON event padded to about size bytes; the pad differs per
// hook so that a mixed-up body shows as a sha mismatch.
func makeBody(key string, n uint64, size int) []byte {
	pad := make([]byte, max(0, size-64-len(key))/2)
	_, _ = rand.Read(pad)
	b, _ := json.Marshal(map[string]any{"id": key, "n": n, "pad": hex.EncodeToString(pad)})
	return b
}
