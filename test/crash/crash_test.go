package crash

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
)

const (
	drillRounds    = 5
	drillWorkers   = 32
	drillMinAcks   = 500 // acks in a round before the kill
	drillKeyPool   = 120 // fresh dedupe keys per round
	minBody        = 100
	maxBody        = 4000
	checkWorkers   = 16
	ackWaitTimeout = 30 * time.Second
)

// ack is one 201 the drill received: the hook is promised to survive.
type ack struct {
	round int
	id    string // canonical uuid
	sha   string // hex sha256 of the body sent; "" for a duplicate
	size  int
	src   string // "demo" or "deduped"
	key   string // X-Event-Id, deduped only
	dup   bool   // 201 with "duplicate": true; id names the original
}

// ledger is every ack of the drill, across rounds.
type ledger struct {
	mu   sync.Mutex
	acks []ack
}

func (l *ledger) add(a ack) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acks = append(l.acks, a)
	return len(l.acks)
}

func (l *ledger) snapshot() []ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ack(nil), l.acks...)
}

// loadStats counts what one round's load saw besides acks.
type loadStats struct {
	acks, dups    atomic.Int64
	refused       atomic.Int64 // 503
	otherStatus   atomic.Int64
	cutByKill     atomic.Int64 // requests in flight at the kill that failed
	errBeforeKill atomic.Int64 // transport errors while the process was up
	killed        atomic.Bool  // set just before SIGKILL is sent
	badAnswer     atomic.Int64 // 201 with a body that is not an ack
}

// TestCrash_KillNineKeepsEveryAck is the crash drill: drive concurrent load
// into the real binary, kill -9 it mid-load once enough hooks are acked,
// restart it on the same data dir and check that every hook ever answered
// 201 is there with the body that was sent. Several rounds run on one data
// dir, so later rounds recover a store that was already crashed.
func TestCrash_KillNineKeepsEveryAck(t *testing.T) {
	if testing.Short() {
		t.Skip("long drill: kill -9 under load, restart, verify every ack")
	}
	start := time.Now()
	work := t.TempDir()
	dataDir := filepath.Join(work, "data")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, data dir %s", seed, dataDir)
	rng := rand.New(rand.NewPCG(seed, 0))

	n := startNode(t, work, dataDir, "round0")
	var led ledger
	for round := 1; round <= drillRounds; round++ {
		roundStart := time.Now()
		killAt := drillMinAcks + rng.IntN(1000)
		st := driveAndKill(t, n, &led, round, killAt, seed)
		loadDur := time.Since(roundStart)

		restartStart := time.Now()
		n = startNode(t, work, dataDir, fmt.Sprintf("round%d", round))
		restartDur := time.Since(restartStart)

		checkStart := time.Now()
		res := verifyAll(t, n, led.snapshot())
		checkDur := time.Since(checkStart)
		t.Logf("round %d: kill after %d acks; acked %d (%d duplicate), 503 %d, other status %d, failed in flight at the kill %d; "+
			"checked %d ids from %d acks so far: present %d, missing %d; next_seq %d durable_seq %d hooks %d; "+
			"load %s, restart %s, check %s",
			round, killAt, st.acks.Load(), st.dups.Load(), st.refused.Load(), st.otherStatus.Load(), st.cutByKill.Load(),
			res.ids, res.acks, res.present, res.missing, res.nextSeq, res.durableSeq, res.hooks,
			loadDur.Round(time.Millisecond), restartDur.Round(time.Millisecond), checkDur.Round(time.Millisecond))
		if res.missing != 0 {
			t.Fatalf("round %d: %d acked hooks missing after kill -9", round, res.missing)
		}
		if t.Failed() {
			t.FailNow()
		}
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
	t.Logf("drill: %d rounds, %d acks, %s", drillRounds, len(led.snapshot()), time.Since(start).Round(time.Millisecond))
}

// driveAndKill runs drillWorkers posters against n until killAt acks of
// this round are recorded, then kills n with SIGKILL while they are still
// posting, stops them and waits for the process to exit.
func driveAndKill(t *testing.T, n *node, led *ledger, round, killAt int, seed uint64) *loadStats {
	t.Helper()
	p := startPosters(n, led, drillWorkers, round, killAt, seed)
	defer p.stop()
	p.waitReached(t, n, round)
	killNine(t, n, p, fmt.Sprintf("round %d", round))
	return p.st
}

// postOne posts one random hook. About a quarter go to the deduped source
// with an X-Event-Id drawn from this round's pool or an earlier round's, so
// keys repeat within a round and across restarts.
func postOne(ctx context.Context, c *http.Client, base string, rng *rand.Rand, round int, st *loadStats) (ack, bool) {
	body := make([]byte, minBody+rng.IntN(maxBody-minBody+1))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	sum := sha256.Sum256(body)
	a := ack{round: round, sha: hex.EncodeToString(sum[:]), size: len(body), src: "demo"}
	if rng.IntN(4) == 0 {
		a.src = "deduped"
		r := round
		if round > 1 && rng.IntN(3) == 0 {
			r = 1 + rng.IntN(round-1)
		}
		a.key = fmt.Sprintf("evt-r%d-%d", r, rng.IntN(drillKeyPool))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/"+a.src, bytes.NewReader(body))
	if err != nil {
		panic(err) // a malformed URL is a bug in the drill
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if a.key != "" {
		req.Header.Set("X-Event-Id", a.key)
	}
	beforeKill := !st.killed.Load()
	fail := func() (ack, bool) {
		switch {
		case beforeKill && st.killed.Load():
			st.cutByKill.Add(1) // in flight at the kill: never acked
		case beforeKill:
			st.errBeforeKill.Add(1)
		default:
			time.Sleep(5 * time.Millisecond) // the process is gone; don't spin
		}
		return ack{}, false
	}
	resp, err := c.Do(req)
	if err != nil {
		return fail()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fail() // cut mid-answer: not an ack
	}
	switch resp.StatusCode {
	case http.StatusCreated:
	case http.StatusServiceUnavailable:
		st.refused.Add(1)
		return ack{}, false
	default:
		st.otherStatus.Add(1)
		return ack{}, false
	}
	var out struct {
		Status    string `json:"status"`
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Status != "accepted" {
		st.badAnswer.Add(1)
		return ack{}, false
	}
	id, err := uuid.Parse(out.ID)
	if err != nil {
		st.badAnswer.Add(1)
		return ack{}, false
	}
	a.id = id.String()
	if out.Duplicate {
		if a.key == "" {
			st.badAnswer.Add(1) // a source without dedupe cannot answer duplicate
			return ack{}, false
		}
		a.dup, a.sha = true, ""
		st.dups.Add(1)
	}
	return a, true
}

// hookView is the part of GET /v1/hooks/{id} the drill checks.
type hookView struct {
	ID         string  `json:"id"`
	Seq        uint64  `json:"seq"`
	Source     string  `json:"source"`
	Size       int     `json:"size"`
	SHA256     string  `json:"sha256"`
	DedupeKey  *string `json:"dedupe_key"`
	Durable    bool    `json:"durable"`
	BodyBase64 *string `json:"body_base64"`
}

type verifyResult struct {
	acks, ids, present, missing int
	nextSeq, durableSeq, hooks  uint64
}

// expectation is what one acked id must look like.
type expectation struct {
	orig *ack   // the 201 that created it, if the drill saw it
	dups []*ack // 201 duplicates that named it
	keys map[string]bool
}

// verifyAll checks every acked id through the operator API: present, the
// body the drill sent, durable, one seq per id, next_seq past them all.
// Duplicates must name a present id, and every ack of one dedupe key must
// name the same id.
func verifyAll(t *testing.T, n *node, acks []ack) verifyResult {
	t.Helper()
	res := verifyResult{acks: len(acks)}
	want := map[string]*expectation{}
	keyIDs := map[string]map[string]bool{}
	for i := range acks {
		a := &acks[i]
		e := want[a.id]
		if e == nil {
			e = &expectation{keys: map[string]bool{}}
			want[a.id] = e
		}
		if a.dup {
			e.dups = append(e.dups, a)
		} else {
			if e.orig != nil {
				t.Errorf("id %s acked as new twice (rounds %d and %d)", a.id, e.orig.round, a.round)
			}
			e.orig = a
		}
		if a.key != "" {
			e.keys[a.key] = true
			if keyIDs[a.key] == nil {
				keyIDs[a.key] = map[string]bool{}
			}
			keyIDs[a.key][a.id] = true
		}
	}
	for key, ids := range keyIDs {
		if len(ids) > 1 {
			t.Errorf("dedupe key %s was acked with %d different ids: %v", key, len(ids), sortedKeys(ids))
		}
	}
	res.ids = len(want)

	ids := sortedKeys(want)
	views := make([]*hookView, len(ids))
	errs := make([]string, len(ids))
	tr := &http.Transport{MaxIdleConnsPerHost: checkWorkers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range checkWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				views[i], errs[i] = fetchHook(client, n.adminURL, ids[i])
			}
		}()
	}
	for i := range ids {
		jobs <- i
	}
	close(jobs)
	wg.Wait()

	bySeq := map[uint64]string{}
	var maxSeq uint64
	reported := 0
	report := func(format string, args ...any) {
		if reported < 20 {
			t.Errorf(format, args...)
		}
		reported++
	}
	for i, id := range ids {
		e, v := want[id], views[i]
		if errs[i] != "" {
			report("%s", errs[i])
			continue
		}
		if v == nil {
			res.missing++
			what := "acked"
			if e.orig != nil {
				what = fmt.Sprintf("acked in round %d (%s, %d bytes)", e.orig.round, e.orig.src, e.orig.size)
			} else {
				what = fmt.Sprintf("named by %d duplicate acks, first in round %d", len(e.dups), e.dups[0].round)
			}
			report("MISSING: hook %s %s: 404 after restart", id, what)
			continue
		}
		res.present++
		if other, ok := bySeq[v.Seq]; ok {
			report("ids %s and %s both report seq %d", other, id, v.Seq)
		}
		bySeq[v.Seq] = id
		maxSeq = max(maxSeq, v.Seq)
		if v.ID != id {
			report("GET /v1/hooks/%s answered id %q", id, v.ID)
		}
		if !v.Durable {
			report("hook %s (seq %d) is not durable after restart", id, v.Seq)
		}
		if e.orig != nil {
			o := e.orig
			if v.SHA256 != o.sha {
				report("hook %s: sha256 %s, sent %s (round %d)", id, v.SHA256, o.sha, o.round)
			}
			if v.Size != o.size || v.Source != o.src {
				report("hook %s: %s/%d bytes, sent %s/%d bytes", id, v.Source, v.Size, o.src, o.size)
			}
			if o.key != "" && (v.DedupeKey == nil || *v.DedupeKey != o.key) {
				report("hook %s: dedupe_key %v, sent %q", id, v.DedupeKey, o.key)
			}
		}
		if len(e.dups) > 0 {
			if v.Source != "deduped" || v.DedupeKey == nil || !e.keys[*v.DedupeKey] {
				report("hook %s named by a duplicate ack: source %s, dedupe_key %v, want one of %v",
					id, v.Source, v.DedupeKey, sortedKeys(e.keys))
			}
		}
		if v.BodyBase64 == nil {
			report("hook %s: ?body=1 gave no body_base64", id)
		} else if body, err := base64.StdEncoding.DecodeString(*v.BodyBase64); err != nil {
			report("hook %s: body_base64: %v", id, err)
		} else if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != v.SHA256 {
			report("hook %s: the body served does not match its own sha256 field", id)
		}
	}
	if reported > 20 {
		t.Errorf("… and %d more problems", reported-20)
	}

	var wal struct {
		WAL struct {
			NextSeq    uint64 `json:"next_seq"`
			DurableSeq uint64 `json:"durable_seq"`
			Hooks      uint64 `json:"hooks"`
		} `json:"wal"`
	}
	code, raw, err := get(context.Background(), client, n.adminURL+"/v1/wal")
	if err != nil || code != http.StatusOK {
		t.Errorf("GET /v1/wal: %d %s %v", code, raw, err)
		return res
	}
	if err := json.Unmarshal(raw, &wal); err != nil {
		t.Errorf("GET /v1/wal: %v in %s", err, raw)
		return res
	}
	res.nextSeq, res.durableSeq, res.hooks = wal.WAL.NextSeq, wal.WAL.DurableSeq, wal.WAL.Hooks
	if res.nextSeq <= maxSeq {
		t.Errorf("/v1/wal next_seq %d, but an acked hook holds seq %d", res.nextSeq, maxSeq)
	}
	if res.durableSeq < maxSeq {
		t.Errorf("/v1/wal durable_seq %d after restart, below acked seq %d", res.durableSeq, maxSeq)
	}
	if res.hooks < uint64(res.present) {
		t.Errorf("/v1/wal hooks %d, fewer than the %d acked hooks found", res.hooks, res.present)
	}
	return res
}

// fetchHook returns the hook view, nil for a 404 not_found, or a problem.
func fetchHook(c *http.Client, base, id string) (*hookView, string) {
	url := base + "/v1/hooks/" + id + "?body=1"
	var code int
	var raw []byte
	var err error
	for attempt := 0; attempt < 3; attempt++ { // a 503 store_unavailable is retried
		code, raw, err = get(context.Background(), c, url)
		if err == nil && code != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	switch {
	case err != nil:
		return nil, fmt.Sprintf("GET %s: %v", url, err)
	case code == http.StatusNotFound:
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error != "not_found" {
			return nil, fmt.Sprintf("GET %s: 404 with body %s", url, bytes.TrimSpace(raw))
		}
		return nil, ""
	case code != http.StatusOK:
		return nil, fmt.Sprintf("GET %s: %d %s", url, code, bytes.TrimSpace(raw))
	}
	var v hookView
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Sprintf("GET %s: %v", url, err)
	}
	return &v, ""
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
