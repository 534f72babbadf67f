package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ackRecorder is a drill's record of acks: ledger or timedLedger.
type ackRecorder interface{ add(a ack) int }

// posters is a drill's load: workers posting random hooks (postOne) to a
// node, each ack recorded and counted in st.acks.
type posters struct {
	st      *loadStats
	reached chan struct{} // closed once st.acks reaches the target, if any
	cancel  context.CancelFunc
	tr      *http.Transport
	wg      sync.WaitGroup
}

// startPosters starts workers posters against n for round. With target > 0,
// reached is closed once target acks are counted. The caller defers stop,
// so the posters stop however the drill returns (t.Fatal included).
func startPosters(n *node, led ackRecorder, workers, round, target int, seed uint64) *posters {
	p := &posters{st: &loadStats{}, reached: make(chan struct{})}
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	p.tr = &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true}
	client := &http.Client{Transport: p.tr, Timeout: 20 * time.Second}
	var once sync.Once
	for w := range workers {
		p.wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(round*1000+w+1)))
			for ctx.Err() == nil {
				a, ok := postOne(ctx, client, n.ingestURL, rng, round, p.st)
				if !ok {
					continue
				}
				led.add(a)
				if acks := p.st.acks.Add(1); target > 0 && acks >= int64(target) {
					once.Do(func() { close(p.reached) })
				}
			}
		})
	}
	return p
}

// stop stops the posters and waits for them; it may be called again.
func (p *posters) stop() {
	p.cancel()
	p.wg.Wait()
	p.tr.CloseIdleConnections()
}

// waitReached waits until the posters reached their target, failing the
// test if n exits first or ackWaitTimeout passes.
func (p *posters) waitReached(t *testing.T, n *node, round int) {
	t.Helper()
	st := p.st
	select {
	case <-p.reached:
	case <-n.done:
		t.Fatalf("round %d: process exited during load after %d acks: %v", round, st.acks.Load(), n.waitErr)
	case <-time.After(ackWaitTimeout):
		t.Fatalf("round %d: only %d acks in %s (503 %d, other %d, transport errors %d)", round, st.acks.Load(), ackWaitTimeout,
			st.refused.Load(), st.otherStatus.Load(), st.errBeforeKill.Load())
	}
}

// killNine kills n with SIGKILL while the posters are still posting, waits
// for the process to exit, then stops the posters: requests in flight at
// the kill fail (they were never acked), and any 201 whose bytes left the
// process before the kill is still read and kept. It checks that n died of
// SIGKILL and that every 201 carried a valid ack body, and returns when the
// signal was sent and how many acks were counted right after it. what
// prefixes the messages.
func killNine(t *testing.T, n *node, p *posters, what string) (at time.Time, acks int64) {
	t.Helper()
	st := p.st
	st.killed.Store(true)
	at = time.Now()
	if err := n.signal(syscall.SIGKILL); err != nil {
		t.Fatalf("%s: SIGKILL: %v", what, err)
	}
	acks = st.acks.Load()
	if !n.wait(10 * time.Second) {
		t.Fatalf("%s: process still running 10s after SIGKILL", what)
	}
	p.stop()
	if sig := n.cmd.ProcessState.Sys().(syscall.WaitStatus); !sig.Signaled() || sig.Signal() != syscall.SIGKILL {
		t.Errorf("%s: process ended with %v, want killed by SIGKILL", what, n.cmd.ProcessState)
	}
	if e := st.errBeforeKill.Load(); e != 0 {
		t.Logf("%s: %d transport errors while the process was up", what, e)
	}
	if b := st.badAnswer.Load(); b != 0 {
		t.Errorf("%s: %d answers were 201 without a valid ack body", what, b)
	}
	return at, acks
}

// wipeDataDir is the host loss: dataDir is gone.
func wipeDataDir(t *testing.T, mode, dataDir string) {
	t.Helper()
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatalf("%s: rm -rf %s: %v", mode, dataDir, err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("%s: data dir still there after rm -rf: %v", mode, err)
	}
}

// drainAll waits up to hostLossDrainTimeout for every id of want to reach
// rv, failing the test if n exits first, and returns the ids still missing.
func drainAll(t *testing.T, n *node, rv *receiver, mode string, want []string) []string {
	t.Helper()
	remaining := want
	lastReport := time.Now()
	deadline := time.Now().Add(hostLossDrainTimeout)
	for {
		if n.exited() {
			t.Fatalf("%s: replacement exited while draining: %v", mode, n.waitErr)
		}
		remaining = rv.missingOf(remaining)
		if len(remaining) == 0 || time.Now().After(deadline) {
			return remaining
		}
		if time.Since(lastReport) > 10*time.Second {
			t.Logf("%s: still waiting for %d of %d acked ids", mode, len(remaining), len(want))
			lastReport = time.Now()
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline: the receiver has no "all arrived" event
	}
}

// stopReplacement stops a host-loss drill's replacement cleanly: SIGTERM
// drains and exits 0.
func stopReplacement(t *testing.T, n *node, mode string) {
	t.Helper()
	if err := n.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", mode, err)
	}
	if !n.wait(30 * time.Second) {
		t.Fatalf("%s: replacement still running 30s after SIGTERM", mode)
	}
	if code := n.exitCode(); code != 0 {
		t.Errorf("%s: replacement exit status after SIGTERM = %d (%v), want 0", mode, code, n.waitErr)
	}
}

// hostLossYAML is the host-loss drills' config around a WAL (and intake)
// block of the caller's: both roles, one HTTP sink (the test's receiver)
// behind both sources of postOne, backups every second to backupDir.
// httpExtra is more of the http: section, indented.
func hostLossYAML(instance, dataDir, httpExtra, walBlock, backupDir, sinkURL string, httpPort, adminPort int) string {
	sink := fmt.Sprintf(`[{id: worker, type: http, http: {url: %q, timeout_ms: 2000}}]`, sinkURL)
	return fmt.Sprintf(`node:
  instance: %s
  data_dir: %q
http:
  ip: 127.0.0.1
  port: %d
%sadmin:
  ip: 127.0.0.1
  port: %d
log:
  level: info
%sbackup:
  enabled: true
  interval_ms: 1000
  max_age_ms: 60000
  keep: 3
  primary: %q
  signing_key: %q
dispatch:
  concurrency: %d
  attempt_timeout_ms: 5000
  poll_ms: 100
  breaker_cooldown_ms: 500
retry:
  base_ms: 100
  max_ms: 1000
  max_attempts: 1000
sources:
  demo:
    verify: {type: none}
    sinks: %s
  deduped:
    verify: {type: none}
    dedupe: {header: X-Event-Id}
    sinks: %s
`, instance, dataDir, httpPort, httpExtra, adminPort, walBlock, "file://"+backupDir, hostLossSigningKey, hostLossConcurrency, sink, sink)
}
