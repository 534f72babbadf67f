package crash

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	hostLossWorkers      = 16  // posters
	hostLossAfterBackup  = 500 // acks after the first backup before the kill
	hostLossConcurrency  = 64  // dispatch.concurrency of the drill's node
	hostLossBackupWait   = 20 * time.Second
	hostLossDrainTimeout = 60 * time.Second
	hostLossMetricsPoll  = 50 * time.Millisecond
	hostLossNodeID       = "node-a"
	hostLossSigningKey   = "hostloss-drill-signing-key-0123"
	hostLossBackupSlack  = time.Second // "generous": the run's checkpoint may precede the poll before the one that saw it
)

// hostLossConfig is the host-loss drill's config: both roles, one HTTP sink
// (the test's receiver) behind both sources of postOne, backups every second
// to backupDir, and under dual the memory intake log at logDir. Both dirs are
// outside dataDir, so they outlive the "host" whose data dir is wiped.
func hostLossConfig(dual bool, dataDir, logDir, backupDir, sinkURL string, httpPort, adminPort int) string {
	wal := "wal:\n  type: disk\n"
	if dual {
		wal = fmt.Sprintf(`wal:
  type: dual
intake:
  type: memory
  node_id: %s
  memory: {path: %q}
`, hostLossNodeID, logDir)
	}
	return hostLossYAML("hostloss-drill", dataDir, "", wal, backupDir, sinkURL, httpPort, adminPort)
}

// gatedReceiver is the delivery drill's receiver behind a switch: while
// down it answers 503 without recording anything (the hook stays in the
// node's store); once up it is the slow recording receiver.
type gatedReceiver struct {
	rv      *receiver
	up      atomic.Bool
	refused atomic.Int64
}

func (g *gatedReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.up.Load() {
		_, _ = io.Copy(io.Discard, r.Body)
		g.refused.Add(1)
		http.Error(w, "receiver down", http.StatusServiceUnavailable)
		return
	}
	g.rv.ServeHTTP(w, r)
}

// timedLedger is the ledger with the client-side time each 201 was read.
type timedLedger struct {
	mu   sync.Mutex
	acks []ack
	at   []time.Time
}

func (l *timedLedger) add(a ack) int {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acks = append(l.acks, a)
	l.at = append(l.at, now)
	return len(l.acks)
}

func (l *timedLedger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// firstAck maps every acked id to the time of the first 201 that named it.
func (l *timedLedger) firstAck() map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]time.Time, len(l.acks))
	for i, a := range l.acks {
		if t0, ok := out[a.id]; !ok || l.at[i].Before(t0) {
			out[a.id] = l.at[i]
		}
	}
	return out
}

// backupSeen is one increase of ankusa_backup_runs_total{result="ok"} the
// drill observed on the admin port.
type backupSeen struct {
	ok       int       // the counter's new value
	seenAt   time.Time // the poll that saw it
	prevPoll time.Time // the poll before, which still saw the old value
	acks     int       // ledger length at seenAt
}

// backupWatch polls the node's /metrics for successful backups.
type backupWatch struct {
	mu        sync.Mutex
	seen      []backupSeen
	lastPoll  time.Time
	lastOK    int
	errRuns   int
	pollFails int
}

func (bw *backupWatch) last() (backupSeen, bool) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	if len(bw.seen) == 0 {
		return backupSeen{}, false
	}
	return bw.seen[len(bw.seen)-1], true
}

func (bw *backupWatch) first() (backupSeen, bool) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	if len(bw.seen) == 0 {
		return backupSeen{}, false
	}
	return bw.seen[0], true
}

// poll scrapes once and records an increase of the ok counter.
func (bw *backupWatch) poll(c *http.Client, adminURL string, led *timedLedger) {
	okRuns, errRuns, err := readBackupRuns(c, adminURL)
	now := time.Now()
	acks := led.len()
	bw.mu.Lock()
	defer bw.mu.Unlock()
	if err != nil {
		bw.pollFails++
		return
	}
	if okRuns > bw.lastOK {
		prev := bw.lastPoll
		if prev.IsZero() {
			prev = now
		}
		bw.seen = append(bw.seen, backupSeen{ok: okRuns, seenAt: now, prevPoll: prev, acks: acks})
		bw.lastOK = okRuns
	}
	bw.errRuns = errRuns
	bw.lastPoll = now
}

// readBackupRuns reads ankusa_backup_runs_total for result ok and for the
// failing results (error, refused, secondary_failed) together.
func readBackupRuns(c *http.Client, adminURL string) (okRuns, failed int, err error) {
	code, raw, err := get(context.Background(), c, adminURL+"/metrics")
	if err != nil || code != http.StatusOK {
		return 0, 0, fmt.Errorf("GET /metrics: %d %v", code, err)
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, `ankusa_backup_runs_total{result="`)
		if !ok {
			continue
		}
		result, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		f, perr := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("ankusa_backup_runs_total{result=%q}: %v", result, perr)
		}
		if result == "ok" {
			okRuns, found = int(f), true
		} else {
			failed += int(f)
		}
	}
	if !found {
		return 0, 0, fmt.Errorf(`GET /metrics: no ankusa_backup_runs_total{result="ok"}`)
	}
	return okRuns, failed, nil
}

// hostLossResult is what one phase of the drill measured.
type hostLossResult struct {
	mode                                   string
	acks                                   int // 201s, duplicates included
	ids                                    int // distinct acked ids
	afterBackup, afterBackupGenerous       int // ids first acked after the last backup seen (strict / generous)
	afterManifest                          int // ids first acked after the restored manifest's created_at; -1 if unknown
	backupsSeen, backupsLogged, backupErrs int
	delivered, missing, redelivered, extra int
	missingBeforeBackup                    int // missing ids first acked before the last backup (generous bound)
	refusedWhileDown                       int64
	restoreLine, recoveryLine              string
	load, ready, drain                     time.Duration
}

var (
	backupTakenRE   = regexp.MustCompile(`msg="backup taken"`)
	restoredLineRE  = regexp.MustCompile(`(?m)^.*store restored from backup.*$`)
	recoveryLineRE  = regexp.MustCompile(`(?m)^.*intake recovery done.*$`)
	noBackupLineRE  = regexp.MustCompile(`(?m)^.*no backup to restore.*$`)
	logTimePrefixRE = regexp.MustCompile(`^time=\S+ `)
	createdAtRE     = regexp.MustCompile(`created_at=(\S+)`)
	durabilityRE    = regexp.MustCompile(`durability: [^"]*`)
)

func firstMatch(re *regexp.Regexp, s string) string {
	m := re.FindString(s)
	return logTimePrefixRE.ReplaceAllString(strings.TrimSpace(m), "")
}

// TestHostLoss_DualVersusDisk is the host-loss drill: load a node whose
// receiver is down, so every acked hook stays in its store; let at least one
// scheduled backup happen and 500 more hooks be acked after it; kill -9 the
// node and delete its data dir (the host is lost). A replacement with the
// same config on an empty data dir restores the latest backup and, under
// wal.type: dual, replays the intake log since the backup's offset. The
// receiver is up for the replacement.
//
// Under dual every acked id must reach the receiver. Under disk the hooks
// acked after the last backup are lost: the drill counts them, to show the
// difference between the two modes honestly.
func TestHostLoss_DualVersusDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("long drill: kill -9 and wipe the data dir under load, replacement restores backup (+ intake log)")
	}
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var results []hostLossResult
	for _, mode := range []struct {
		name string
		dual bool
	}{{"dual", true}, {"disk", false}} {
		ok := t.Run(mode.name, func(t *testing.T) {
			results = append(results, hostLossPhase(t, mode.dual, seed))
		})
		if !ok {
			break
		}
	}
	for _, r := range results {
		t.Logf("%-4s: acked %d ids (%d acks), acked after the last backup %d (after its manifest's created_at %d, generous %d); delivered %d, missing %d "+
			"(of them acked before the last backup %d), redelivered %d, delivered but never acked %d; "+
			"backups seen %d (node logged %d, failed runs %d); load %s, replacement ready %s, drain %s",
			r.mode, r.ids, r.acks, r.afterBackup, r.afterManifest, r.afterBackupGenerous, r.delivered, r.missing, r.missingBeforeBackup,
			r.redelivered, r.extra, r.backupsSeen, r.backupsLogged, r.backupErrs,
			r.load.Round(time.Millisecond), r.ready.Round(time.Millisecond), r.drain.Round(time.Millisecond))
	}
	t.Logf("host-loss drill: %s", time.Since(start).Round(time.Millisecond))
}

// hostLossPhase runs the drill in one mode and returns what it measured.
func hostLossPhase(t *testing.T, dual bool, seed uint64) hostLossResult {
	mode := "disk"
	if dual {
		mode = "dual"
	}
	res := hostLossResult{mode: mode}
	work := t.TempDir()
	dataDir := filepath.Join(work, "host", "data") // the host: wiped
	logDir := filepath.Join(work, "log", "intake") // the replicated log: survives
	backupDir := filepath.Join(work, "bucket")     // the object store: survives
	if err := os.MkdirAll(backupDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: data dir %s, intake log %s, backups %s", mode, dataDir, logDir, backupDir)

	g := &gatedReceiver{rv: newReceiver()}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	sinkURL := srv.URL + "/hook"
	cfg := func(httpPort, adminPort int) string {
		return hostLossConfig(dual, dataDir, logDir, backupDir, sinkURL, httpPort, adminPort)
	}

	// 1. The doomed node, receiver down.
	loadStart := time.Now()
	n := startNodeWith(t, work, dataDir, mode+"-a", cfg)
	var led timedLedger
	bw := &backupWatch{}
	st, killAt := driveUntilBackupThenKill(t, n, &led, bw, mode, seed)
	res.load = time.Since(loadStart)
	res.refusedWhileDown = g.refused.Load()
	res.acks = led.len()
	doomedLog := n.log(64 << 20)
	res.backupsLogged = len(backupTakenRE.FindAllStringIndex(doomedLog, -1))
	if d := durabilityRE.FindString(doomedLog); d != "" {
		t.Logf("%s: the doomed node's startup line: %s", mode, d)
		if strings.Contains(d, "backups are not configured") {
			t.Logf("%s: NOTE: the startup line says backups are not configured, but backup.enabled is true "+
				"(internal/app/app.go Instance.DurabilityLine ignores cfg.Backup)", mode)
		}
	}
	logNodeProblems(t, n, mode+", doomed node")

	// 2. Host loss: the data dir is gone.
	wipeDataDir(t, mode, dataDir)

	// 3. The replacement: same config, empty data dir, receiver up.
	g.up.Store(true)
	restartStart := time.Now()
	n2 := startNodeWith(t, work, dataDir, mode+"-b", cfg)
	res.ready = time.Since(restartStart)
	boot := n2.log(1 << 20)
	res.restoreLine = firstMatch(restoredLineRE, boot)
	if res.restoreLine == "" {
		res.restoreLine = firstMatch(noBackupLineRE, boot)
		t.Errorf("%s: the replacement did not restore a backup: %q", mode, res.restoreLine)
	}
	res.recoveryLine = firstMatch(recoveryLineRE, boot)
	var createdAt time.Time
	if m := createdAtRE.FindStringSubmatch(res.restoreLine); m != nil {
		createdAt, _ = time.Parse(time.RFC3339Nano, m[1])
	}
	t.Logf("%s: replacement ready in %s; %s", mode, res.ready.Round(time.Millisecond), res.restoreLine)
	if dual {
		t.Logf("%s: %s", mode, res.recoveryLine)
		if res.recoveryLine == "" {
			t.Errorf("%s: the replacement logged no intake recovery", mode)
		}
	}

	// 4. Drain. Under dual every acked id must arrive; under disk the node
	// delivers what the backup held, then has nothing left.
	first := led.firstAck()
	wantIDs := sortedKeys(first)
	res.ids = len(wantIDs)
	remaining := wantIDs
	if dual {
		remaining = drainAll(t, n2, g.rv, mode, wantIDs)
	}
	q := waitSettled(t, n2, 1)
	res.drain = time.Since(restartStart)
	res.afterManifest = -1
	if !createdAt.IsZero() {
		res.afterManifest = 0
	}
	if !dual {
		remaining = g.rv.missingOf(remaining)
	}

	// 5. Figures.
	last, haveBackup := bw.last()
	bw.mu.Lock()
	res.backupsSeen = len(bw.seen)
	bw.mu.Unlock()
	res.backupErrs = bw.errRuns
	counts := g.rv.counts()
	missing := map[string]bool{}
	for _, id := range remaining {
		missing[id] = true
	}
	for _, id := range wantIDs {
		at := first[id]
		if haveBackup && at.After(last.seenAt) {
			res.afterBackup++
		}
		if !createdAt.IsZero() && at.After(createdAt) {
			res.afterManifest++
		}
		generous := haveBackup && at.After(last.prevPoll.Add(-hostLossBackupSlack))
		if generous {
			res.afterBackupGenerous++
		}
		if missing[id] {
			res.missing++
			if !generous {
				res.missingBeforeBackup++
			}
		} else {
			res.delivered++
		}
	}
	for id, c := range counts {
		if _, ok := first[id]; !ok {
			res.extra++
		}
		if c > 1 {
			res.redelivered++
		}
	}
	t.Logf("%s: acked %d ids (%d acks, %d duplicate), ingest 503 %d, cut by the kill %d; receiver refused %d attempts while down; "+
		"last backup seen at ok=%d, %s before the kill (%d acks then); acked after it %d ids (after the restored manifest's created_at %d, generous %d); "+
		"delivered %d, missing %d (acked before the last backup %d), redelivered %d, delivered but never acked %d; "+
		"queue after drain: pending %v inflight %v dead %v, wal hooks %d deliveries %d; load %s, ready %s, drain %s",
		mode, res.ids, res.acks, st.dups.Load(), st.refused.Load(), st.cutByKill.Load(), res.refusedWhileDown,
		last.ok, killAt.Sub(last.seenAt).Round(time.Millisecond), last.acks, res.afterBackup, res.afterManifest, res.afterBackupGenerous,
		res.delivered, res.missing, res.missingBeforeBackup, res.redelivered, res.extra,
		q.pending, q.inflight, q.dead, q.hooks, q.deliveries,
		res.load.Round(time.Millisecond), res.ready.Round(time.Millisecond), res.drain.Round(time.Millisecond))
	if res.backupsLogged > last.ok {
		t.Logf("%s: the doomed node logged %d backups, the drill saw %d: one completed after the last scrape, "+
			"so \"acked after the last backup\" overstates what the backup lacks", mode, res.backupsLogged, last.ok)
	}
	if len(remaining) > 0 {
		var notes []string
		for _, id := range firstN(remaining, 5) {
			notes = append(notes, fmt.Sprintf("%s (acked %+dms vs last backup seen)", id, first[id].Sub(last.seenAt).Milliseconds()))
		}
		t.Logf("%s: first missing: %s", mode, strings.Join(notes, ", "))
	}
	logNodeProblems(t, n2, mode+", replacement")

	if dual {
		if res.missing != 0 {
			t.Errorf("%s: %d of %d acked ids never delivered after host loss (%d of them acked before the last backup)",
				mode, res.missing, res.ids, res.missingBeforeBackup)
		}
		// Redelivery: nothing was delivered before the kill (receiver down),
		// so an id received twice was sent twice by the replacement. Bounded,
		// generously, by what the backup lacked.
		if res.redelivered > res.afterBackupGenerous {
			t.Errorf("%s: %d ids redelivered, more than the %d acked after the last backup (generous)",
				mode, res.redelivered, res.afterBackupGenerous)
		}
	} else {
		switch {
		case res.missing > 0:
			t.Logf("%s: as expected, %d acked hooks were lost with the host (acked after the last backup: %d, generous %d)",
				mode, res.missing, res.afterBackup, res.afterBackupGenerous)
		case res.afterBackup == 0:
			t.Logf("%s: nothing missing, and no ack came after the last backup", mode)
		case res.backupsLogged > last.ok:
			t.Logf("%s: nothing missing: a backup the drill did not see covered the acks after the last one it saw", mode)
		default:
			t.Errorf("%s: nothing missing, yet %d ids were acked after the last backup: a disk-only node restored hooks its backup cannot have held",
				mode, res.afterBackup)
		}
		if res.missingBeforeBackup > 0 {
			t.Errorf("%s: %d missing ids were acked before the last backup (by more than %s): the backup lacked them",
				mode, res.missingBeforeBackup, hostLossBackupSlack)
		}
		if res.missing > res.afterBackupGenerous {
			t.Errorf("%s: %d ids missing, more than the %d acked after the last backup (generous)", mode, res.missing, res.afterBackupGenerous)
		}
	}

	// A clean stop of the replacement.
	stopReplacement(t, n2, mode)
	return res
}

// driveUntilBackupThenKill runs hostLossWorkers posters against n, polls
// its /metrics for successful backups, and once a backup was seen and
// hostLossAfterBackup more acks were recorded after it, kills n with
// SIGKILL while the posters are still posting.
func driveUntilBackupThenKill(t *testing.T, n *node, led *timedLedger, bw *backupWatch, mode string, seed uint64) (*loadStats, time.Time) {
	t.Helper()
	round := 1
	if mode == "disk" {
		round = 2 // distinct dedupe keys per phase
	}
	p := startPosters(n, led, hostLossWorkers, round, 0, seed)
	defer p.stop()
	st := p.st
	metricsClient := &http.Client{Timeout: 2 * time.Second}
	defer metricsClient.CloseIdleConnections()

	deadline := time.Now().Add(hostLossBackupWait)
	for {
		if n.exited() {
			t.Fatalf("%s: process exited during load after %d acks: %v", mode, st.acks.Load(), n.waitErr)
		}
		bw.poll(metricsClient, n.adminURL, led)
		if f, ok := bw.first(); ok && led.len()-f.acks >= hostLossAfterBackup {
			break
		}
		if time.Now().After(deadline) {
			_, haveBackup := bw.first()
			t.Fatalf("%s: after %s: backup seen %v, %d acks (503 %d, other %d, transport errors %d), failed backup runs %d",
				mode, hostLossBackupWait, haveBackup, st.acks.Load(), st.refused.Load(), st.otherStatus.Load(),
				st.errBeforeKill.Load(), bw.errRuns)
		}
		time.Sleep(hostLossMetricsPoll)
	}
	// One last scrape right before the kill narrows the window in which a
	// backup could complete unseen.
	bw.poll(metricsClient, n.adminURL, led)
	killAt, _ := killNine(t, n, p, mode)
	return st, killAt
}
