package crash

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/testutil"
)

const (
	deliveryRounds      = 2
	deliveryWorkers     = 8   // posters; the receiver, not ingest, is the bottleneck here
	deliveryMinAcks     = 500 // acks in a round before the kill may happen
	deliveryKillJitter  = 300 // the kill happens after 500..799 acks
	deliveryConcurrency = 16  // dispatch.concurrency
	receiverMinHold     = 50 * time.Millisecond
	receiverMaxHold     = 200 * time.Millisecond
	drainTimeout        = 60 * time.Second
	settleTimeout       = 30 * time.Second
)

// deliveryConfig is the delivery drill's config: the node has both roles
// (the default), and both sources deliver to one HTTP sink, the test's slow
// receiver. Retries are fast so that nothing waits on a backoff.
func deliveryConfig(dataDir, sinkURL string, httpPort, adminPort int) string {
	sink := fmt.Sprintf(`[{id: worker, type: http, http: {url: %q, timeout_ms: 2000}}]`, sinkURL)
	return fmt.Sprintf(`node:
  instance: delivery-drill
  data_dir: %q
http:
  ip: 127.0.0.1
  port: %d
admin:
  ip: 127.0.0.1
  port: %d
log:
  level: info
dispatch:
  concurrency: %d
  attempt_timeout_ms: 5000
  poll_ms: 100
retry:
  base_ms: 20
  max_ms: 500
  max_attempts: 1000
sources:
  demo:
    verify: {type: none}
    sinks: %s
  deduped:
    verify: {type: none}
    dedupe: {header: X-Event-Id}
    sinks: %s
`, dataDir, httpPort, adminPort, deliveryConcurrency, sink, sink)
}

// startNodeWith is startNode with a config of the caller's: cfg gets the
// ports picked for this attempt. The retry on a taken port, the log file,
// the readiness wait and the cleanup are startNode's.
//
// wrap, if given, is a command line the binary is started under (the
// binary and its arguments are appended), e.g. a shell lowering a limit.
func startNodeWith(t testing.TB, workDir, dataDir, name string, cfg func(httpPort, adminPort int) string, wrap ...string) *node {
	t.Helper()
	for attempt := 1; ; attempt++ {
		n, err := tryStartNodeWith(t, workDir, fmt.Sprintf("%s-%d", name, attempt), cfg, wrap...)
		if err == nil {
			return n
		}
		if n != nil && strings.Contains(n.log(1<<16), "address already in use") && attempt < 5 {
			t.Logf("%s: port taken, retrying with new ports", name)
			continue
		}
		if n != nil {
			t.Fatalf("%s: %v\n--- %s ---\n%s", name, err, n.logPath, n.log(32<<10))
		}
		t.Fatalf("%s: %v", name, err)
	}
}

func tryStartNodeWith(t testing.TB, workDir, name string, cfg func(httpPort, adminPort int) string, wrap ...string) (*node, error) {
	httpPort, adminPort := freePort(t), freePort(t)
	for adminPort == httpPort {
		adminPort = freePort(t)
	}
	cfgPath := filepath.Join(workDir, name+".yml")
	if err := os.WriteFile(cfgPath, []byte(cfg(httpPort, adminPort)), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(workDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor

	argv := append(append([]string(nil), wrap...), binPath, "serve", "--config", cfgPath)
	cmd := exec.Command(argv[0], argv[1:]...)
	testutil.DiesWithTest(cmd)
	cmd.Dir = workDir
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &node{
		t: t, cmd: cmd, done: make(chan struct{}), logPath: logPath,
		ingestURL: "http://127.0.0.1:" + strconv.Itoa(httpPort),
		adminURL:  "http://127.0.0.1:" + strconv.Itoa(adminPort),
	}
	go func() {
		n.waitErr = cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		if !n.exited() {
			_ = cmd.Process.Kill()
			<-n.done
		}
		if t.Failed() {
			t.Logf("--- %s (tail) ---\n%s", logPath, n.log(16<<10))
		}
	})
	if err := n.waitReady(20 * time.Second); err != nil {
		return n, err
	}
	return n, nil
}

// receipt is one request the receiver got for an id.
type receipt struct {
	round      int // the drill round the receiver was in
	start, end time.Time
	sha        string // hex sha256 of the body received
	source     string // X-Ankusa-Source
	idemKey    string // X-Ankusa-Idempotency-Key
	dedupeKey  string // X-Ankusa-Dedupe-Key
}

// receiver is the slow HTTP endpoint the http sink delivers to. It records
// every request by X-Ankusa-Id and holds each one 50–200 ms before it
// answers 200, so that many deliveries are in flight at any moment.
type receiver struct {
	round atomic.Int64 // set by the drill; stamped on each receipt

	inflight    atomic.Int64 // requests inside the handler now
	maxInflight atomic.Int64

	mu       sync.Mutex
	byID     map[string][]*receipt
	requests int
	cut      int      // bodies that could not be read whole (sender killed mid-request)
	bad      []string // requests that break the sink's contract
}

func newReceiver() *receiver {
	return &receiver{byID: map[string][]*receipt{}}
}

func (rv *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := rv.inflight.Add(1)
	defer rv.inflight.Add(-1)
	for {
		m := rv.maxInflight.Load()
		if n <= m || rv.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	start := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		rv.mu.Lock()
		rv.cut++
		rv.mu.Unlock()
		http.Error(w, "body cut", http.StatusInternalServerError)
		return
	}
	id := r.Header.Get("X-Ankusa-Id")
	if r.Method != http.MethodPost || r.URL.Path != "/hook" {
		rv.problem("unexpected %s %s (id %q)", r.Method, r.URL.Path, id)
		http.Error(w, "bad request line", http.StatusInternalServerError)
		return
	}
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		rv.problem("X-Ankusa-Id %q is not a canonical uuid", id)
		http.Error(w, "bad id", http.StatusInternalServerError)
		return
	}
	sum := sha256.Sum256(body)
	rc := &receipt{
		round: int(rv.round.Load()), start: start, sha: hex.EncodeToString(sum[:]),
		source: r.Header.Get("X-Ankusa-Source"), idemKey: r.Header.Get("X-Ankusa-Idempotency-Key"),
		dedupeKey: r.Header.Get("X-Ankusa-Dedupe-Key"),
	}
	rv.mu.Lock()
	rv.requests++
	rv.byID[id] = append(rv.byID[id], rc)
	rv.mu.Unlock()

	// The slow receiver is the behaviour under test, not a synchronisation.
	time.Sleep(receiverMinHold + rand.N(receiverMaxHold-receiverMinHold+1))

	rv.mu.Lock()
	rc.end = time.Now()
	rv.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (rv *receiver) problem(format string, args ...any) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	rv.bad = append(rv.bad, fmt.Sprintf(format, args...))
}

// counts returns how many requests each id got so far.
func (rv *receiver) counts() map[string]int {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	out := make(map[string]int, len(rv.byID))
	for id, rs := range rv.byID {
		out[id] = len(rs)
	}
	return out
}

// receipts returns a copy of every id's receipts.
func (rv *receiver) receipts() map[string][]receipt {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	out := make(map[string][]receipt, len(rv.byID))
	for id, rs := range rv.byID {
		cp := make([]receipt, len(rs))
		for i, r := range rs {
			cp[i] = *r
		}
		out[id] = cp
	}
	return out
}

// missingOf returns the ids of want the receiver has not seen yet.
func (rv *receiver) missingOf(want []string) []string {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	var out []string
	for _, id := range want {
		if len(rv.byID[id]) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// deliveryKill is what the drill saw at one kill.
type deliveryKill struct {
	at               time.Time
	acks             int64
	receiverInflight int64 // requests inside the receiver when SIGKILL was sent
}

// TestCrash_DeliveryAfterKillNine is the delivery drill: a node with both
// roles delivers to a slow HTTP receiver in the test process; kill -9 it
// under ingest load while deliveries are in flight, restart it on the same
// data dir and check that every hook ever answered 201 reaches the receiver
// at least once, with the body that was sent. Deliveries cut by the kill
// are delivered again (at-least-once): the drill counts them.
func TestCrash_DeliveryAfterKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("long drill: kill -9 with deliveries in flight, restart, verify every ack is delivered")
	}
	start := time.Now()
	work := t.TempDir()
	dataDir := filepath.Join(work, "data")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, data dir %s", seed, dataDir)
	rng := rand.New(rand.NewPCG(seed, 1))

	rv := newReceiver()
	srv := httptest.NewServer(rv)
	defer srv.Close()
	sinkURL := srv.URL + "/hook"
	cfg := func(httpPort, adminPort int) string {
		return deliveryConfig(dataDir, sinkURL, httpPort, adminPort)
	}

	rv.round.Store(1)
	n := startNodeWith(t, work, dataDir, "dround0", cfg)
	var led ledger
	var unanswered int64 // ingest requests that got no answer: their hooks may exist unacked
	prevDupes := map[string]bool{}
	var kills []time.Time // kill time of each round so far
	for round := 1; round <= deliveryRounds; round++ {
		rv.round.Store(int64(round))
		roundStart := time.Now()
		killAt := deliveryMinAcks + rng.IntN(deliveryKillJitter)
		killed := n
		st, kill := driveUntilDeliveringThenKill(t, n, rv, &led, round, killAt, seed)
		kills = append(kills, kill.at)
		unanswered += st.cutByKill.Load() + st.errBeforeKill.Load()
		loadDur := time.Since(roundStart)

		// Restart on the same data dir; every acked id must reach the receiver.
		restartStart := time.Now()
		n = startNodeWith(t, work, dataDir, fmt.Sprintf("dround%d", round), cfg)
		readyDur := time.Since(restartStart)
		returned := returnedInflightRows(n)

		acks := led.snapshot()
		wantIDs := ackedIDs(acks)
		remaining := wantIDs
		lastReport := time.Now()
		testutil.Eventually(t, drainTimeout, fmt.Sprintf("round %d: every acked id (%d) received", round, len(wantIDs)), func() bool {
			if time.Since(lastReport) > 10*time.Second {
				t.Logf("round %d: still waiting for %d of %d acked ids", round, len(remaining), len(wantIDs))
				lastReport = time.Now()
			}
			if n.exited() {
				t.Fatalf("round %d: node exited while draining: %v", round, n.waitErr)
			}
			remaining = rv.missingOf(remaining)
			return len(remaining) == 0
		})
		receivedDur := time.Since(restartStart)
		q := waitSettled(t, n, round)
		drainDur := time.Since(restartStart)

		res := checkDeliveries(t, rv, acks, round, kill.at, prevDupes)
		for id := range res.dupeIDs {
			prevDupes[id] = true
		}
		if len(res.extra) > 0 {
			// A hook can reach the receiver without a 201 only if its ingest
			// request got no answer: committed, then the kill cut the reply.
			var notes []string
			for _, id := range firstN(res.extra, 5) {
				notes = append(notes, id+" ("+mintedVsKills(id, kills)+")")
			}
			t.Logf("round %d: %d ids delivered that the drill never saw acked (ingest requests without an answer so far: %d): %s",
				round, len(res.extra), unanswered, strings.Join(notes, ", "))
			if int64(len(res.extra)) > unanswered {
				t.Errorf("round %d: %d delivered ids were never acked, more than the %d ingest requests left without an answer",
					round, len(res.extra), unanswered)
			}
		}
		t.Logf("round %d: kill after %d acks (target %d) with %d requests inside the receiver; acked this round %d ids (%d duplicate acks), "+
			"ingest requests cut by the kill %d, 503 %d; node returned %d inflight rows to due at start; "+
			"acked ids so far %d: delivered %d, missing %d, bad body %d; redelivered this round %d ids (%d extra requests: "+
			"%d were in the receiver at the kill, %d had been answered before the kill, %d other); unacked-but-delivered so far %d; "+
			"queue after drain: pending %v inflight %v dead %v, wal hooks %d deliveries %d; "+
			"load %s, ready %s, all received %s, drained %s",
			round, kill.acks, killAt, kill.receiverInflight, res.roundAcked, st.dups.Load(),
			st.cutByKill.Load(), st.refused.Load(), returned,
			len(wantIDs), res.delivered, res.missing, res.badBody, len(res.dupeIDs), res.extraRequests,
			res.redeliveredInflight, res.redeliveredAnswered, res.redeliveredOther, len(res.extra),
			q.pending, q.inflight, q.dead, q.hooks, q.deliveries,
			loadDur.Round(time.Millisecond), readyDur.Round(time.Millisecond),
			receivedDur.Round(time.Millisecond), drainDur.Round(time.Millisecond))
		logNodeProblems(t, killed, fmt.Sprintf("round %d, killed node", round))
		logNodeProblems(t, n, fmt.Sprintf("round %d, restarted node", round))
		if res.missing != 0 {
			t.Fatalf("round %d: %d acked hooks never delivered after kill -9", round, res.missing)
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	rv.mu.Lock()
	requests, cut, bad := rv.requests, rv.cut, append([]string(nil), rv.bad...)
	rv.mu.Unlock()
	for i, b := range bad {
		if i == 10 {
			t.Errorf("… and %d more bad requests", len(bad)-10)
			break
		}
		t.Errorf("receiver: %s", b)
	}

	// A clean stop: SIGTERM drains and exits 0.
	if err := n.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if !n.wait(30 * time.Second) {
		t.Fatalf("no exit 30s after SIGTERM")
	}
	if code := n.exitCode(); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d (%v), want 0", code, n.waitErr)
	}
	logNodeProblems(t, n, "final node, after SIGTERM")
	t.Logf("delivery drill: %d rounds, %d acks, %d requests received (%d cut mid-body), receiver max in flight %d, %s",
		deliveryRounds, len(led.snapshot()), requests, cut, rv.maxInflight.Load(), time.Since(start).Round(time.Millisecond))
}

// driveUntilDeliveringThenKill runs deliveryWorkers posters against n until
// killAt acks of this round are recorded and the receiver has requests in
// flight, then kills n with SIGKILL while both are busy, stops the posters
// and waits for the process to exit.
func driveUntilDeliveringThenKill(t *testing.T, n *node, rv *receiver, led *ledger, round, killAt int, seed uint64) (*loadStats, deliveryKill) {
	t.Helper()
	p := startPosters(n, led, deliveryWorkers, round, killAt, seed)
	defer p.stop()
	p.waitReached(t, n, round)
	// Enough acks: wait for a moment when deliveries are in flight.
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("round %d: a delivery in flight at the receiver", round), func() bool {
		return rv.inflight.Load() > 0 || n.exited()
	})
	if n.exited() {
		t.Fatalf("round %d: process exited during load: %v", round, n.waitErr)
	}
	kill := deliveryKill{receiverInflight: rv.inflight.Load()}
	kill.at, kill.acks = killNine(t, n, p, fmt.Sprintf("round %d", round))
	return p.st, kill
}

// ackedIDs is every id named by an ack, sorted.
func ackedIDs(acks []ack) []string {
	set := map[string]bool{}
	for _, a := range acks {
		set[a.id] = true
	}
	return sortedKeys(set)
}

type deliveryResult struct {
	roundAcked, delivered, missing, badBody int
	dupeIDs                                 map[string]bool // ids whose second request came this round
	extraRequests                           int             // requests beyond the first, for dupeIDs
	redeliveredInflight                     int             // an earlier request was inside the receiver at the kill
	redeliveredAnswered                     int             // every earlier request was answered before the kill
	redeliveredOther                        int
	extra                                   []string // ids received that no ack named
}

// checkDeliveries compares the receiver's record with every ack so far.
// Each acked id must have been received with the body acked; receipts of
// one id must agree on body, source and idempotency key. Ids first
// redelivered in this round are classified against the kill.
func checkDeliveries(t *testing.T, rv *receiver, acks []ack, round int, killAt time.Time, prevDupes map[string]bool) deliveryResult {
	t.Helper()
	res := deliveryResult{dupeIDs: map[string]bool{}}
	orig := map[string]*ack{}
	named := map[string]bool{}
	roundIDs := map[string]bool{}
	for i := range acks {
		a := &acks[i]
		named[a.id] = true
		if a.round == round {
			roundIDs[a.id] = true
		}
		if !a.dup {
			orig[a.id] = a
		}
	}
	res.roundAcked = len(roundIDs)
	got := rv.receipts()
	reported := 0
	report := func(format string, args ...any) {
		if reported < 20 {
			t.Errorf(format, args...)
		}
		reported++
	}
	for _, id := range sortedKeys(named) {
		rs := got[id]
		if len(rs) == 0 {
			res.missing++
			report("MISSING: acked hook %s never reached the receiver", id)
			continue
		}
		res.delivered++
		o := orig[id]
		bad := false
		for i, r := range rs {
			if o != nil && r.sha != o.sha {
				bad = true
				report("hook %s: request %d of %d carried body sha256 %s, acked %s (round %d)", id, i+1, len(rs), r.sha, o.sha, o.round)
			}
			if o != nil && r.source != o.src {
				report("hook %s: X-Ankusa-Source %q, posted to %q", id, r.source, o.src)
			}
			if o != nil && o.key != "" && (r.dedupeKey != o.key || !strings.HasSuffix(r.idemKey, ":"+o.key)) {
				report("hook %s: dedupe key %q / idempotency key %q, posted with X-Event-Id %q", id, r.dedupeKey, r.idemKey, o.key)
			}
			if o != nil && o.key == "" && r.idemKey != id {
				report("hook %s: X-Ankusa-Idempotency-Key %q, want the id", id, r.idemKey)
			}
			if i > 0 && (r.sha != rs[0].sha || r.idemKey != rs[0].idemKey || r.source != rs[0].source) {
				bad = true
				report("hook %s: redelivery %d differs from the first (sha %s/%s, idempotency key %q/%q)",
					id, i+1, r.sha, rs[0].sha, r.idemKey, rs[0].idemKey)
			}
		}
		if bad {
			res.badBody++
		}
	}
	for id, rs := range got {
		if !named[id] {
			res.extra = append(res.extra, id)
		}
		if len(rs) < 2 || prevDupes[id] {
			continue
		}
		res.dupeIDs[id] = true
		res.extraRequests += len(rs) - 1
		// Why was it sent again? Look at the requests before the last one.
		inflight, answered := false, true
		for _, r := range rs[:len(rs)-1] {
			if !r.start.After(killAt) && (r.end.IsZero() || r.end.After(killAt)) {
				inflight = true
			}
			if r.end.IsZero() || r.end.After(killAt) {
				answered = false
			}
		}
		switch {
		case inflight:
			res.redeliveredInflight++
		case answered:
			res.redeliveredAnswered++
		default:
			res.redeliveredOther++
			t.Logf("round %d: hook %s redelivered without a kill in between: %s", round, id, describeReceipts(rs, killAt))
		}
	}
	sort.Strings(res.extra)
	if reported > 20 {
		t.Errorf("… and %d more problems", reported-20)
	}
	return res
}

func describeReceipts(rs []receipt, killAt time.Time) string {
	var parts []string
	for _, r := range rs {
		end := "open"
		if !r.end.IsZero() {
			end = fmt.Sprintf("%+dms", r.end.Sub(killAt).Milliseconds())
		}
		parts = append(parts, fmt.Sprintf("[round %d %+dms..%s vs kill]", r.round, r.start.Sub(killAt).Milliseconds(), end))
	}
	return strings.Join(parts, " ")
}

func firstN(ids []string, n int) []string {
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}

// queueView is the node's delivery backlog as /metrics and /v1/wal show it.
type queueView struct {
	pending, inflight, dead float64
	hooks, deliveries       uint64
}

// waitSettled waits until the node has nothing left to deliver: no due or
// inflight row, nothing dead, and every delivered hook reclaimed.
func waitSettled(t *testing.T, n *node, round int) queueView {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	var last queueView
	var lastErr error
	var lastScrape time.Time
	defer func() {
		if t.Failed() {
			t.Logf("round %d: last queue view %+v, err %v", round, last, lastErr)
		}
	}()
	testutil.Eventually(t, settleTimeout, fmt.Sprintf("round %d: queue drained (pending, inflight, dead, wal hooks and deliveries all 0)", round), func() bool {
		if time.Since(lastScrape) < 25*time.Millisecond { // a scrape costs scans; don't hammer
			return false
		}
		lastScrape = time.Now()
		if n.exited() {
			t.Fatalf("round %d: node exited while settling: %v", round, n.waitErr)
		}
		v, err := readQueue(client, n.adminURL)
		if err != nil {
			lastErr = err
			return false
		}
		last, lastErr = v, nil
		return v.pending == 0 && v.inflight == 0 && v.dead == 0 && v.hooks == 0 && v.deliveries == 0
	})
	return last
}

func readQueue(c *http.Client, adminURL string) (queueView, error) {
	var v queueView
	code, raw, err := get(context.Background(), c, adminURL+"/metrics")
	if err != nil || code != http.StatusOK {
		return v, fmt.Errorf("GET /metrics: %d %v", code, err)
	}
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "ankusa_queue_pending":
			dst = &v.pending
		case "ankusa_queue_inflight":
			dst = &v.inflight
		case "ankusa_queue_dead":
			dst = &v.dead
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return v, fmt.Errorf("metric %s: %v", name, err)
		}
		*dst = f
		found++
	}
	if found != 3 {
		return v, fmt.Errorf("GET /metrics: found %d of the 3 ankusa_queue_{pending,inflight,dead} gauges", found)
	}
	var wal struct {
		WAL struct {
			Hooks      uint64 `json:"hooks"`
			Deliveries uint64 `json:"deliveries"`
		} `json:"wal"`
	}
	code, raw, err = get(context.Background(), c, adminURL+"/v1/wal")
	if err != nil || code != http.StatusOK {
		return v, fmt.Errorf("GET /v1/wal: %d %v", code, err)
	}
	if err := json.Unmarshal(raw, &wal); err != nil {
		return v, fmt.Errorf("GET /v1/wal: %v", err)
	}
	v.hooks, v.deliveries = wal.WAL.Hooks, wal.WAL.Deliveries
	return v, nil
}

var returnedRowsRE = regexp.MustCompile(`returned inflight deliveries to due.*rows=(\d+)`)

// returnedInflightRows reads, from the node's startup log, how many
// inflight rows dispatch returned to due; -1 if it logged none.
func returnedInflightRows(n *node) int {
	m := returnedRowsRE.FindStringSubmatch(n.log(1 << 20))
	if m == nil {
		return -1
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// logNodeProblems logs the WARN and ERROR lines of a node's log (the first
// few): a drill that passes can still show the binary complaining.
func logNodeProblems(t *testing.T, n *node, what string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(n.log(4<<20), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return
	}
	t.Logf("%s: %d WARN/ERROR log lines, first: \n%s", what, len(lines), strings.Join(firstN(lines, 5), "\n"))
}

// mintedVsKills says when a UUIDv7 id was minted relative to each kill.
func mintedVsKills(id string, kills []time.Time) string {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return "not a v7 id"
	}
	sec, nsec := u.Time().UnixTime()
	minted := time.Unix(sec, nsec)
	var parts []string
	for i, k := range kills {
		parts = append(parts, fmt.Sprintf("minted %+dms vs kill %d", minted.Sub(k).Milliseconds(), i+1))
	}
	return strings.Join(parts, ", ")
}
