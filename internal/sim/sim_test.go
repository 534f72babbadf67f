package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/memory"
)

// The knobs of `make sim`: SEED=n replays one schedule with its trace,
// N=… runs that many schedules from START.
var (
	flagSeed    = flag.Uint64("sim.seed", 0, "replay this one seed and print its trace")
	flagN       = flag.Int("sim.n", 0, "schedules to run (default 1000, 200 with -short)")
	flagStart   = flag.Uint64("sim.start", 1, "first seed")
	flagTrace   = flag.Bool("sim.trace", false, "print the trace of every schedule")
	flagReplay  = flag.Int("sim.replaycheck", 0, "also run each of the first n schedules twice and count those whose traces differ")
	flagExclude = flag.String("sim.exclude", defaultExclude, "fault classes left out, comma-separated (\"\" for none)")
)

// defaultExclude names the fault classes the default run (make test) leaves
// out because they find a defect that is not fixed yet (docs/testing.md,
// "Simulation", keeps the history with seeds). Today none. Left out
// before, in now:
//
//   - release (quarantine holds and their release, release_test.go) until
//     boot recovery took the pen row of a hook it replays (R) and a hold
//     answered 503 left nothing held (P);
//   - poison (a body the log refuses Permanent at every publish) was left
//     out until boot recovery carried such a record instead of failing on
//     it and the reconciler isolated it (internal/queue/refused_test.go);
//   - write, writeoutage (failed WAL writes) until the dispatcher's claim
//     moved into memory and it resynced after a reopen (issue 14, lever
//     b), and recovery judged a log only this node writes by its positions
//     (rule C, seed 872).
const defaultExclude = ""

func excluded() map[string]bool {
	out := map[string]bool{}
	for _, k := range strings.Split(*flagExclude, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out[k] = true
		}
	}
	return out
}

// defaultSchedules is what `go test ./internal/sim` (and so make test) runs.
const (
	defaultSchedules = 1000
	shortSchedules   = 200
	traceTail        = 60 // trace lines printed with a failing seed
)

// outcome is what one schedule left.
type outcome struct {
	seed       uint64
	violations []violation
	injected   counts
	trace      []string
}

// runSchedule runs one seed. It must be called inside the package's one
// bubble (see TestSim): virtual time, and every goroutine it starts
// (queue, dispatcher, Pebble, providers) stopped before it returns.
func runSchedule(seed uint64, tmpRoot string) outcome {
	tmp, err := os.MkdirTemp(tmpRoot, fmt.Sprintf("seed-%d-", seed))
	if err != nil {
		return outcome{seed: seed, violations: []violation{{inv: "5", what: err.Error()}}}
	}
	defer os.RemoveAll(tmp)
	w := newWorld(seed, tmp, excluded())
	w.run()
	out := outcome{seed: seed, violations: w.found, trace: w.traceLines(), injected: w.injected}
	out.injected.fsync += w.faults.syncs
	out.injected.write += w.faults.writes
	out.injected.open += w.faults.opens
	out.injected.recycled += w.faults.recycled
	return out
}

// tmpRoot is where the schedules keep the memory log and the backups:
// tmpfs when there is one (the memory log fsyncs every publish).
func tmpRoot(t *testing.T) string {
	if dir, err := os.MkdirTemp("/dev/shm", "ankusa-sim-"); err == nil {
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		return dir
	}
	return t.TempDir()
}

// run is one schedule: a fault phase of seeded events, then heal, settle,
// drain and the end-of-schedule checks.
func (w *world) run() {
	w.start = time.Now()
	if err := os.MkdirAll(w.logDir, 0o755); err != nil {
		w.violate("5", "log dir: %v", err)
		return
	}
	w.tracef("schedule seed=%d dual=%v backups=%v release=%d memtable=%d history=%q resend=%d dlq=%d archivejob=%d", w.seed, w.cfg.dual, w.cfg.backups, w.cfg.release, w.cfg.memtable, w.cfg.history, w.resend.weight, w.dlq.weight, w.archJobs.weight)
	w.mustBoot()
	if w.cfg.release > 0 {
		go w.rel.run()
	}
	kinds := make([]string, 0, len(w.cfg.weights))
	total := 0
	for k, v := range w.cfg.weights {
		if v > 0 {
			kinds = append(kinds, k)
			total += v
		}
	}
	sort.Strings(kinds)
	hostLosses := 0
	end := w.start.Add(faultPhase)
	for time.Now().Before(end) {
		// A sub-millisecond offset keeps events off the instants the real
		// code's tickers fire at, so their order does not depend on the
		// scheduler.
		time.Sleep(time.Duration(20+w.rng.IntN(300))*time.Millisecond + time.Duration(1+w.rng.IntN(999))*time.Microsecond)
		synctest.Wait()
		w.superviseExit()
		x := w.rng.IntN(total)
		kind := kinds[0]
		for _, k := range kinds {
			if x < w.cfg.weights[k] {
				kind = k
				break
			}
			x -= w.cfg.weights[k]
		}
		if kind == "hostloss" {
			if hostLosses >= 2 {
				kind = "check"
			}
			hostLosses++
		}
		w.event(kind)
		w.maybeResend()
		w.maybeReplayDLQ()
		w.maybeReplayArchive()
	}
	synctest.Wait()
	w.superviseExit()
	w.heal()
	w.settle()
	if w.current() == nil {
		w.mustBoot()
	}
	w.releaseRest()
	w.checkLive()
	w.drain()
	if n := w.current(); n != nil {
		w.checkpoint(true)
		w.checkPen(n)
		w.checkSingleDeletes(n)
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		w.kill(n)
		if w.cfg.dual {
			w.checkRecoveryIdempotent()
		}
	}
	w.stopAll()
}

// event applies one schedule event at this instant.
func (w *world) event(kind string) {
	n := w.current()
	if n == nil && kind != "submit" {
		return
	}
	r := w.rng
	switch kind {
	case "submit":
		w.submitBurst(1 + r.IntN(3))
	case "check":
		w.checkpoint(false)
	case "fsync":
		k := 1 + r.IntN(2)
		w.faults.set(func(f *diskFaults) { f.failSyncs += k })
		w.tracef("fault: the next %d WAL fsyncs fail", k)
	case "write":
		w.faults.set(func(f *diskFaults) { f.failWrites++ })
		w.tracef("fault: the next WAL write (a log's creation or reuse included) fails")
	case "outage":
		d := time.Duration(300+r.IntN(1700)) * time.Millisecond
		until := time.Now().Add(d)
		w.faults.set(func(f *diskFaults) { f.outageUntil = until })
		w.tracef("fault: the disk fails every WAL fsync for %s", d)
	case "writeoutage":
		d := time.Duration(300+r.IntN(1700)) * time.Millisecond
		until := time.Now().Add(d)
		w.faults.set(func(f *diskFaults) { f.writeOutageUntil = until })
		w.tracef("fault: the disk fails every WAL write for %s", d)
	case "crash":
		w.crash([]string{"powercut", "kill9", "torn"}[r.IntN(3)])
	case "hostloss":
		w.hostLoss()
	case "backup":
		w.backup()
	case "retention":
		w.retain()
	case "sink":
		id := []string{"a", "b"}[r.IntN(2)]
		d := time.Duration(500+r.IntN(3500)) * time.Millisecond
		hang := r.IntN(2) == 0
		w.mu.Lock()
		if hang {
			w.sinkHang[id] = time.Now().Add(d)
		} else {
			w.sinkFail[id] = time.Now().Add(d)
		}
		w.tracefLocked("fault: sink %s %s for %s", id, map[bool]string{true: "hangs", false: "fails"}[hang], d)
		w.mu.Unlock()
	case "pubfail":
		k := 1 + r.IntN(4)
		n.log.FailNext(k, intake.Unavailable)
		w.tracef("fault: the next %d publishes fail unavailable", k)
	case "lostack":
		k := 1 + r.IntN(2)
		n.log.TimeoutAfterAppendNext(k)
		w.tracef("fault: the next %d publishes land and lose their confirm", k)
	case "throttle":
		ra := time.Duration(200+r.IntN(1800)) * time.Millisecond
		n.log.FailNextError(1, &intake.Error{Class: intake.Throttled, RetryAfter: ra, Err: memory.ErrInjected})
		w.tracef("fault: the next publish is throttled, retry after %s", ra)
	case "permanent":
		n.log.FailNext(1, intake.Permanent)
		w.tracef("fault: the next publish fails permanent")
	case "slow":
		d := time.Duration(50+r.IntN(1500)) * time.Millisecond
		for_ := time.Duration(500+r.IntN(3000)) * time.Millisecond
		n.log.SetConfirmLatency(d)
		w.later(for_, func() { n.log.SetConfirmLatency(0) })
		w.tracef("fault: confirms take %s for %s", d, for_)
	case "hang":
		for_ := time.Duration(200+r.IntN(5000)) * time.Millisecond
		n.log.Hang()
		w.later(for_, n.log.Unhang)
		w.tracef("fault: the log hangs for %s", for_)
	case "down":
		for_ := time.Duration(200+r.IntN(2500)) * time.Millisecond
		n.log.SetReady(false)
		w.later(for_, func() { n.log.SetReady(true) })
		w.tracef("fault: the log reports not ready for %s", for_)
	case "dup":
		k := 1 + r.IntN(3)
		w.lmu.Lock()
		w.dupNext += k
		w.lmu.Unlock()
		w.tracef("fault: the next %d appends land twice", k)
	case "reorder":
		k := 1 + r.IntN(3)
		w.lmu.Lock()
		for range k {
			w.delayNext = append(w.delayNext, time.Duration(20+r.IntN(800))*time.Millisecond)
		}
		w.lmu.Unlock()
		w.tracef("fault: the next %d publishes are delayed (they land out of order)", k)
	}
}

// later runs f after d on a goroutine of the bubble.
func (w *world) later(d time.Duration, f func()) {
	go func() {
		time.Sleep(d)
		f()
	}()
}

// heal clears every fault: the disk, the log, the sinks.
func (w *world) heal() {
	w.faults.heal()
	w.lmu.Lock()
	w.dupNext, w.delayNext = 0, nil
	w.lmu.Unlock()
	// The "later" goroutines still pending clear what they set.
	time.Sleep(3 * time.Second)
	if n := w.current(); n != nil {
		n.log.ClearFaults()
		n.log.SetConfirmLatency(0)
		n.log.SetReady(true)
	}
	w.mu.Lock()
	clear(w.sinkFail)
	clear(w.sinkHang)
	w.tracefLocked("every fault healed")
	w.mu.Unlock()
}

// settle waits for every provider to finish its attempts (bounded: a
// provider gives up after six).
func (w *world) settle() {
	done := make(chan struct{})
	go func() {
		w.clients.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		w.violate("L", "providers still waiting for an answer 5 minutes after every fault healed")
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		<-done
	}
}

// drain waits (virtual time) until every acked hook is delivered; what is
// still owed after two minutes is rule 1's missing.
func (w *world) drain() {
	var missing, released, resends []int
	var why, rwhy, swhy, jwhy map[string]int
	var jobs int
	for range 240 {
		n := w.current()
		if n == nil {
			return
		}
		missing, why = w.undelivered(n)
		released, rwhy = w.undeliveredOf(n, w.owedHeld(n))
		resends, swhy = w.unresent(n)
		jobs, jwhy = w.unfinishedJobs(n)
		if len(missing) == 0 && len(released) == 0 && len(resends) == 0 && jobs == 0 {
			w.tracef("drained")
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	show := func(reqs []int) []int {
		sort.Ints(reqs)
		if len(reqs) > 8 {
			reqs = reqs[:8]
		}
		return reqs
	}
	if len(missing) > 0 {
		w.violate("1", "%d acked hooks not delivered 2 minutes after every fault healed (reqs %v; %v)", len(missing), show(missing), why)
	}
	if len(released) > 0 {
		w.violate("Q", "%d held hooks (202) out of the pen and not delivered 2 minutes after every fault healed (reqs %v; %v)", len(released), show(released), rwhy)
	}
	if len(resends) > 0 {
		w.violate("S", "%d answered resends not sent to their sinks 2 minutes after every fault healed (reqs %v; %v)", len(resends), show(resends), swhy)
	}
	if jobs > 0 {
		w.violate("D", "%d answered dlq replay jobs unfinished 2 minutes after every fault healed (%v)", jobs, jwhy)
	}
	if p := os.Getenv("SIM_STACKS"); p != "" {
		buf := make([]byte, 1<<22)
		_ = os.WriteFile(p, buf[:runtime.Stack(buf, true)], 0o600)
	}
}

// summary is the one line every run prints.
type summary struct {
	mu         sync.Mutex
	schedules  int
	first      uint64
	last       uint64
	faults     counts
	violations int
	failed     []uint64
	byInv      map[string][]uint64
}

func (s *summary) add(o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.schedules == 0 || o.seed < s.first {
		s.first = o.seed
	}
	s.last = max(s.last, o.seed)
	s.schedules++
	s.faults.add(o.injected)
	if len(o.violations) > 0 {
		s.violations += len(o.violations)
		s.failed = append(s.failed, o.seed)
		if s.byInv == nil {
			s.byInv = map[string][]uint64{}
		}
		seen := map[string]bool{}
		for _, v := range o.violations {
			if !seen[v.inv] {
				seen[v.inv] = true
				s.byInv[v.inv] = append(s.byInv[v.inv], o.seed)
			}
		}
	}
}

func (s *summary) line() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	return fmt.Sprintf("schedules=%d seeds=%d..%d faults={fsync:%d, write:%d (log opens:%d), publish:%d, crash:%d, hostloss:%d; in recycled logs:%d} history={swept:%d, archived:%d, resent:%d} dlq_jobs=%d archive_jobs=%d violations=%d",
		s.schedules, s.first, s.last, f.fsync, f.write, f.open, f.publish, f.crash, f.hostloss, f.recycled, f.swept, f.archived, f.resent, f.dlqJobs, f.archiveJobs, s.violations)
}

func (s *summary) byInvariant() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	invs := make([]string, 0, len(s.byInv))
	for k := range s.byInv {
		invs = append(invs, k)
	}
	sort.Strings(invs)
	for _, k := range invs {
		seeds := s.byInv[k]
		sort.Slice(seeds, func(i, j int) bool { return seeds[i] < seeds[j] })
		show := seeds
		if len(show) > 10 {
			show = show[:10]
		}
		fmt.Fprintf(&b, "  inv %s: %d schedules, first seeds %v\n", k, len(seeds), show)
	}
	return b.String()
}

func report(t *testing.T, o outcome, full bool) {
	t.Helper()
	lines := o.trace
	if !full && len(lines) > traceTail {
		lines = lines[len(lines)-traceTail:]
	}
	var b strings.Builder
	for _, v := range o.violations {
		fmt.Fprintf(&b, "  inv %s: %s\n", v.inv, v.what)
	}
	t.Errorf("seed %d: %d violations (replay: make sim SEED=%d)\n%s  trace (last %d lines):\n    %s",
		o.seed, len(o.violations), o.seed, b.String(), len(lines), strings.Join(lines, "\n    "))
}

// scheduleLine reports whether a trace line is the schedule itself (what
// the seed decided: faults, crashes, providers), as opposed to how the real
// code answered.
func scheduleLine(l string) bool {
	_, text, _ := strings.Cut(strings.TrimSpace(l), "ms ")
	for _, p := range []string{"schedule ", "fault: ", "crash ", "host loss ", "every fault healed"} {
		if strings.HasPrefix(text, p) {
			return true
		}
	}
	return strings.HasPrefix(text, "req ") && strings.Contains(text, " starts: ")
}

func scheduleOf(trace []string) []string {
	var out []string
	for _, l := range trace {
		if scheduleLine(l) {
			out = append(out, l)
		}
	}
	return out
}

// sameTrace reports the first line where two runs of one seed differ.
func sameTrace(a, b outcome) (int, string, string, bool) { return sameLines(a.trace, b.trace) }

func sameLines(a, b []string) (int, string, string, bool) {
	for i := range max(len(a), len(b)) {
		var la, lb string
		if i < len(a) {
			la = a[i]
		}
		if i < len(b) {
			lb = b[i]
		}
		if la != lb {
			return i, la, lb, false
		}
	}
	return 0, "", "", true
}

// simRan makes TestSim run once per process; see TestSim.
var simRan atomic.Bool

// replaySeeds are run twice at the start of every TestSim: a seed must
// replay exactly, event for event and answer for answer.
var replaySeeds = []uint64{3, 17}

// TestSim runs the schedules: 1000 by default (make test), 200 with -short,
// -sim.n from -sim.start otherwise, or the one -sim.seed (twice, to show
// the replay is exact) with its trace.
//
// Everything runs in ONE synctest bubble, schedule after schedule: Pebble
// keeps sstable write tasks, each with a channel, in a process-wide
// sync.Pool, and a channel made in one bubble is fatal to use from
// another. So this package has exactly one test that touches Pebble, and
// it must not run with -count above 1.
func TestSim(t *testing.T) {
	if !simRan.CompareAndSwap(false, true) {
		t.Skip("TestSim runs once per process (-count above 1): a second bubble would meet the first one's Pebble channels")
	}
	root := tmpRoot(t)
	synctest.Test(t, func(t *testing.T) {
		var s summary
		if *flagSeed != 0 {
			a := runSchedule(*flagSeed, root)
			b := runSchedule(*flagSeed, root)
			s.add(a)
			fmt.Println(strings.Join(a.trace, "\n"))
			if i, la, lb, ok := sameLines(scheduleOf(a.trace), scheduleOf(b.trace)); !ok {
				t.Errorf("seed %d does not replay its schedule: line %d differs:\n  first:  %s\n  second: %s", a.seed, i, la, lb)
			} else if i, la, lb, ok := sameTrace(a, b); !ok {
				// Reported, not failed: what SEED= is for is the violation.
				fmt.Printf("note: seed %d did not replay exactly: the traces differ at line %d:\n  first:  %s\n  second: %s\n", a.seed, i, la, lb)
			}
			if len(a.violations) > 0 {
				report(t, a, false)
			}
			fmt.Println(s.line())
			return
		}
		for _, seed := range replaySeeds {
			a, b := runSchedule(seed, root), runSchedule(seed, root)
			if len(a.trace) < 20 {
				t.Fatalf("seed %d: a trace of %d lines is too short to mean anything", seed, len(a.trace))
			}
			// The schedule must replay exactly; the answers of the real code
			// almost always do (see docs/testing.md), and a difference is
			// reported, not failed.
			if i, la, lb, ok := sameLines(scheduleOf(a.trace), scheduleOf(b.trace)); !ok {
				t.Errorf("seed %d does not replay its schedule: line %d differs:\n  first:  %s\n  second: %s", seed, i, la, lb)
			} else if i, la, lb, ok := sameTrace(a, b); !ok {
				fmt.Printf("note: seed %d replayed its schedule, not every answer: line %d:\n  first:  %s\n  second: %s\n", seed, i, la, lb)
			}
		}
		n := *flagN
		if n <= 0 {
			n = defaultSchedules
			if testing.Short() {
				n = shortSchedules
			}
		}
		start := time.Now()
		diverged := 0
		for i := range n {
			o := runSchedule(*flagStart+uint64(i), root)
			if i < *flagReplay {
				again := runSchedule(o.seed, root)
				if _, _, _, ok := sameTrace(o, again); !ok {
					diverged++
				}
				if _, la, lb, ok := sameLines(scheduleOf(o.trace), scheduleOf(again.trace)); !ok {
					t.Errorf("seed %d does not replay its schedule:\n  first:  %s\n  second: %s", o.seed, la, lb)
				}
			}
			s.add(o)
			if *flagTrace {
				t.Log(strings.Join(o.trace, "\n"))
			}
			if len(o.violations) > 0 {
				report(t, o, false)
			}
		}
		fmt.Println(s.line())
		if *flagReplay > 0 {
			fmt.Printf("replay check: every schedule replayed; %d of %d did not replay every answer exactly\n", diverged, min(n, *flagReplay))
		}
		if *flagExclude != "" {
			fmt.Printf("excluded fault classes: %s\n", *flagExclude)
		}
		if s.violations > 0 {
			fmt.Print(s.byInvariant())
		}
		_ = start
	})
}
