// Package e2e_test runs whole Ankusa instances in process (app.New over a
// temporary data dir, ports 0) against an HTTP receiver the test controls,
// and checks delivery end to end: what the receiver saw and what the
// operator API says.
package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/app/apptest"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	sourceID = "orders"
	sinkID   = "receiver"
	// waitFor bounds every wait for an event; reaching it is a failure,
	// never part of a passing run.
	waitFor = 10 * time.Second
)

// call is one request the receiver got.
type call struct {
	ID       string // x-ankusa-id
	ReplayID string // x-ankusa-replay-id
	Attempt  int    // 1 for the first request the receiver saw with this id
	At       time.Time
	Header   http.Header
	Body     []byte
}

// respondFunc answers one call; it may block (a hanging receiver) and must
// then return when r.Context() ends or stop closes.
type respondFunc func(w http.ResponseWriter, r *http.Request, c call, stop <-chan struct{})

// receiver is the operator's HTTP endpoint that the instance's http sink
// posts to. Every request is recorded, and announced to next, before the
// answer is written.
type receiver struct {
	srv     *httptest.Server
	respond respondFunc
	stop    chan struct{}

	mu      sync.Mutex
	byID    map[string][]call
	taken   map[string]int // calls per id already returned by next
	changed chan struct{}  // closed (and replaced) on every new call
}

func newReceiver(t *testing.T, respond respondFunc) *receiver {
	t.Helper()
	rc := &receiver{
		respond: respond,
		stop:    make(chan struct{}),
		byID:    map[string][]call{},
		taken:   map[string]int{},
		changed: make(chan struct{}),
	}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	t.Cleanup(func() { close(rc.stop) }) // before srv.Close: unblock hanging handlers
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, _ := io.ReadAll(r.Body)
	c := call{
		ID: r.Header.Get("X-Ankusa-Id"), ReplayID: r.Header.Get("X-Ankusa-Replay-Id"),
		At: at, Header: r.Header.Clone(), Body: body,
	}
	rc.mu.Lock()
	c.Attempt = len(rc.byID[c.ID]) + 1
	rc.byID[c.ID] = append(rc.byID[c.ID], c)
	close(rc.changed)
	rc.changed = make(chan struct{})
	rc.mu.Unlock()
	rc.respond(w, r, c, rc.stop)
}

// attempts is every call seen so far for id.
func (rc *receiver) attempts(id string) []call {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]call(nil), rc.byID[id]...)
}

// next returns the next call for id not yet returned, waiting for it.
// Each id has its own cursor: calls for other ids are kept for them.
func (rc *receiver) next(t *testing.T, id string) call {
	t.Helper()
	timeout := time.After(waitFor)
	for {
		rc.mu.Lock()
		n := rc.taken[id]
		if n < len(rc.byID[id]) {
			c := rc.byID[id][n]
			rc.taken[id] = n + 1
			rc.mu.Unlock()
			return c
		}
		changed := rc.changed
		rc.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the receiver got no request #%d for hook %s within %s", n+1, id, waitFor)
			return call{}
		}
	}
}

// status answers every call with code (and the given headers).
func status(code int, header ...string) respondFunc {
	return func(w http.ResponseWriter, _ *http.Request, _ call, _ <-chan struct{}) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
	}
}

// byAttempt answers the n-th call of each id with fs[n-1], and every later
// call with the last one.
func byAttempt(fs ...respondFunc) respondFunc {
	return func(w http.ResponseWriter, r *http.Request, c call, stop <-chan struct{}) {
		fs[min(c.Attempt, len(fs))-1](w, r, c, stop)
	}
}

// instance is one running Ankusa with its operator API.
type instance struct {
	*app.Instance
	t     *testing.T
	admin string // http://host:port of the operator API
}

// loopbackConfig is config.Default() as instance over dataDir, with both
// listeners on loopback port 0.
func loopbackConfig(instance, dataDir string) *config.Config {
	cfg := config.Default()
	cfg.Node.Instance, cfg.Node.DataDir = instance, dataDir
	cfg.HTTP.IP, cfg.HTTP.Port = "127.0.0.1", 0
	cfg.Admin.IP, cfg.Admin.Port = "127.0.0.1", 0
	return cfg
}

// baseConfig is loopbackConfig whose only source "orders" has one http
// sink "receiver" posting to sinkURL, polled every 100 ms.
func baseConfig(instance, dataDir, sinkURL string) *config.Config {
	cfg := loopbackConfig(instance, dataDir)
	cfg.Dispatch.PollMs = 100
	cfg.Dispatch.AttemptTimeoutMs = 5_000
	cfg.Sources = map[string]config.SourceConfig{
		sourceID: {
			Verify: config.VerifyConfig{Type: "none"},
			Sinks: []config.SinkConfig{{
				ID: sinkID, Type: "http",
				HTTP: &config.HTTPSink{URL: sinkURL, TimeoutMs: 5_000},
			}},
		},
	}
	return cfg
}

// startInstance runs an instance whose source "orders" has one http sink
// "receiver" posting to rc. tweak adjusts the config before start.
func startInstance(t *testing.T, rc *receiver, tweak func(*config.Config)) *instance {
	t.Helper()
	cfg := baseConfig("e2e", t.TempDir(), rc.srv.URL+"/hooks")
	// Small retry delays: only a Retry-After can explain a long wait.
	cfg.Retry.BaseMs, cfg.Retry.MaxMs = 10, 40
	if tweak != nil {
		tweak(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config is invalid: %v", err)
	}
	in := apptest.Start(t, cfg, app.Options{})
	return &instance{Instance: in, t: t, admin: "http://" + in.AdminAddr()}
}

// post sends a hook and returns its id from the 201.
func (in *instance) post(body, contentType string) string {
	t := in.t
	t.Helper()
	url := "http://" + in.IngestAddr() + "/webhooks/" + sourceID
	resp, err := http.Post(url, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		ID     string `json:"id"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s = %d %s, want 201", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.ID == "" {
		t.Fatalf("POST %s: answer %s: %v", url, raw, err)
	}
	return out.ID
}

// api calls the operator API; in (if not nil) is sent as JSON, out (if not
// nil) decoded from a JSON answer. It returns the status.
func (in *instance) api(method, path string, body, out any) int {
	t := in.t
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("encode %T: %v", body, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, in.admin+path, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s = %d: decode %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// hookView is the part of GET /v1/hooks/{id} the tests read.
type hookView struct {
	ID         string `json:"id"`
	Source     string `json:"source"`
	Deliveries []struct {
		Sink      string  `json:"sink"`
		State     string  `json:"state"`
		Attempts  int     `json:"attempts"`
		NextAt    *string `json:"next_at"`
		LastError string  `json:"last_error"`
	} `json:"deliveries"`
}

// hook reads GET /v1/hooks/{id}; ok is false on 404 (reclaimed).
func (in *instance) hook(id string) (v hookView, ok bool) {
	in.t.Helper()
	switch code := in.api(http.MethodGet, "/v1/hooks/"+id, nil, &v); code {
	case http.StatusOK:
		if len(v.Deliveries) == 0 {
			// Known bug (reported): the view reads the hook and then its
			// delivery rows without a snapshot, so a reclaim landing in
			// between shows the hook with no deliveries. It is being
			// reclaimed: treat it as gone.
			return v, false
		}
		if len(v.Deliveries) != 1 {
			in.t.Fatalf("hook %s has %d deliveries, want 1 (one sink): %+v", id, len(v.Deliveries), v)
		}
		return v, true
	case http.StatusNotFound:
		return v, false
	default:
		in.t.Fatalf("GET /v1/hooks/%s = %d", id, code)
		return v, false
	}
}

// waitReclaimed waits until every delivery of id succeeded and the hook
// was removed.
func (in *instance) waitReclaimed(id string) {
	in.t.Helper()
	testutil.Eventually(in.t, waitFor, "hook "+id+" to be reclaimed (GET /v1/hooks → 404)", func() bool {
		_, ok := in.hook(id)
		return !ok
	})
}

type dlqView struct {
	Total   int `json:"total"`
	Entries []struct {
		ID             string `json:"id"`
		SourceID       string `json:"source_id"`
		TenantID       string `json:"tenant_id"`
		Sink           string `json:"sink"`
		Seq            uint64 `json:"seq"`
		DeadLetteredAt string `json:"dead_lettered_at"`
		Size           int    `json:"size"`
		ContentType    string `json:"content_type"`
		Reason         string `json:"reason"`
	} `json:"entries"`
}

func (in *instance) dlq() dlqView {
	in.t.Helper()
	var v dlqView
	if code := in.api(http.MethodGet, "/v1/dlq", nil, &v); code != http.StatusOK {
		in.t.Fatalf("GET /v1/dlq = %d", code)
	}
	return v
}

type jobView struct {
	ID      string  `json:"id"`
	Kind    string  `json:"kind"`
	Rate    float64 `json:"rate"`
	State   string  `json:"state"`
	Moved   int     `json:"moved"`
	Skipped int     `json:"skipped"`
}

// metrics scrapes GET /metrics and returns every sample by its series
// text as Prometheus writes it, e.g. `x_total{a="b",c="d"}`.
func (in *instance) metrics() map[string]float64 {
	t := in.t
	t.Helper()
	resp, err := http.Get(in.admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return out
}
