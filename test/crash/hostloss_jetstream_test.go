package crash

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/testutil/natscluster"
)

const (
	hostLossJSStream = "ANKUSA_INTAKE_DEFAULT"
	hostLossJSNodeID = "node-js"
)

// hostLossJetStreamConfig is hostLossConfig under wal.type: dual with the
// JetStream intake: the log is the test's three-server cluster at natsURL,
// stream hostLossJSStream, instead of a memory log on disk. Backups every
// second to backupDir, outside dataDir.
func hostLossJetStreamConfig(dataDir, natsURL, backupDir, sinkURL string, httpPort, adminPort int) string {
	wal := fmt.Sprintf(`wal:
  type: dual
intake:
  type: jetstream
  node_id: %s
  publish_timeout_ms: 2000
  max_record_bytes: 1048576
  jetstream: {url: %q, stream: %s}
`, hostLossJSNodeID, natsURL, hostLossJSStream)
	return hostLossYAML("hostloss-js-drill", dataDir, "  max_body_bytes: 524288\n", wal, backupDir, sinkURL, httpPort, adminPort)
}

// TestHostLoss_DualJetStream is the host-loss drill of
// TestHostLoss_DualVersusDisk on a real replicated log: a three-server
// JetStream cluster embedded in the test process, an R3 stream the
// "operator" created, and the real binary under wal.type: dual with
// intake.type: jetstream. The receiver is down, so every acked hook stays
// in the node's store; after at least one scheduled backup and
// hostLossAfterBackup more acks the node is killed -9 and its data dir
// deleted. A replacement with the same config on an empty data dir, the
// receiver up, restores the latest backup and replays the stream since the
// backup's offset: every acked id must reach the receiver.
func TestHostLoss_DualJetStream(t *testing.T) {
	if testing.Short() {
		t.Skip("long drill: 3-node JetStream cluster, kill -9 and wipe the data dir under load, replacement restores backup + replays the stream")
	}
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const mode = "dual-jetstream"

	c := natscluster.Start(t, natscluster.Options{Name: "ankusa-crash-intake"})
	c.CreateStream(t, natsjs.StreamConfig{
		Name:       hostLossJSStream,
		Subjects:   []string{"ankusa.intake.default.>"},
		Replicas:   3,
		Storage:    natsjs.FileStorage,
		Duplicates: 2 * time.Minute,
		MaxAge:     24 * time.Hour, // ≥ 2 × backup.max_age_ms (60 s)
		MaxMsgSize: -1,
	})
	c.WaitStreamLeader(t, hostLossJSStream)
	t.Logf("%s: NATS cluster %s, stream %s R3 up in %s", mode, c.URL(), hostLossJSStream, time.Since(start).Round(time.Millisecond))

	work := t.TempDir()
	dataDir := filepath.Join(work, "host", "data") // the host: wiped
	backupDir := filepath.Join(work, "bucket")     // the object store: survives
	if err := os.MkdirAll(backupDir, 0o755); err != nil {
		t.Fatal(err)
	}

	g := &gatedReceiver{rv: newReceiver()}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	sinkURL := srv.URL + "/hook"
	cfg := func(httpPort, adminPort int) string {
		return hostLossJetStreamConfig(dataDir, c.URL(), backupDir, sinkURL, httpPort, adminPort)
	}

	// 1. The doomed node, receiver down.
	loadStart := time.Now()
	n := startNodeWith(t, work, dataDir, mode+"-a", cfg)
	if d := durabilityRE.FindString(n.log(1 << 20)); d != "" {
		t.Logf("%s: the doomed node's startup line: %s", mode, d)
	}
	var led timedLedger
	bw := &backupWatch{}
	st, killAt := driveUntilBackupThenKill(t, n, &led, bw, "dual", seed)
	load := time.Since(loadStart)
	doomedLog := n.log(64 << 20)
	backupsLogged := len(backupTakenRE.FindAllStringIndex(doomedLog, -1))
	logNodeProblems(t, n, mode+", doomed node")
	var msgs, lastSeq uint64
	if info, err := c.Info(hostLossJSStream); err != nil {
		t.Errorf("%s: stream state after the kill: %v", mode, err)
	} else {
		msgs, lastSeq = info.State.Msgs, info.State.LastSeq
	}
	t.Logf("%s: stream after the kill: %d messages, last seq %d", mode, msgs, lastSeq)

	// 2. Host loss: the data dir is gone.
	wipeDataDir(t, mode, dataDir)

	// 3. The replacement: same config, empty data dir, receiver up.
	g.up.Store(true)
	restartStart := time.Now()
	n2 := startNodeWith(t, work, dataDir, mode+"-b", cfg)
	ready := time.Since(restartStart)
	boot := n2.log(1 << 20)
	restoreLine := firstMatch(restoredLineRE, boot)
	if restoreLine == "" {
		t.Errorf("%s: the replacement did not restore a backup: %q", mode, firstMatch(noBackupLineRE, boot))
	}
	recoveryLine := firstMatch(recoveryLineRE, boot)
	if recoveryLine == "" {
		t.Errorf("%s: the replacement logged no intake recovery", mode)
	}
	t.Logf("%s: replacement ready in %s; %s", mode, ready.Round(time.Millisecond), restoreLine)
	t.Logf("%s: %s", mode, recoveryLine)

	// 4. Drain: every acked id must arrive.
	first := led.firstAck()
	wantIDs := sortedKeys(first)
	remaining := drainAll(t, n2, g.rv, mode, wantIDs)
	drain := time.Since(restartStart)
	q := waitSettled(t, n2, 1)

	// 5. Figures.
	last, _ := bw.last()
	bw.mu.Lock()
	backupsSeen := len(bw.seen)
	bw.mu.Unlock()
	afterBackup, afterBackupGenerous := 0, 0
	for _, id := range wantIDs {
		at := first[id]
		if backupsSeen > 0 && at.After(last.seenAt) {
			afterBackup++
		}
		if backupsSeen > 0 && at.After(last.prevPoll.Add(-hostLossBackupSlack)) {
			afterBackupGenerous++
		}
	}
	counts := g.rv.counts()
	redelivered, extra := 0, 0
	for id, n := range counts {
		if _, ok := first[id]; !ok {
			extra++
		}
		if n > 1 {
			redelivered++
		}
	}
	missing := len(remaining)
	delivered := len(wantIDs) - missing
	t.Logf("%s: acked %d ids (%d acks, %d duplicate), ingest 503 %d, cut by the kill %d; receiver refused %d attempts while down; "+
		"backups seen %d (node logged %d, failed runs %d), the last %s before the kill (%d acks then); acked after it %d ids (generous %d); "+
		"delivered %d, missing %d, redelivered %d, delivered but never acked %d; "+
		"queue after drain: pending %v inflight %v dead %v, wal hooks %d deliveries %d; load %s, replacement ready %s, drain %s",
		mode, len(wantIDs), led.len(), st.dups.Load(), st.refused.Load(), st.cutByKill.Load(), g.refused.Load(),
		backupsSeen, backupsLogged, bw.errRuns, killAt.Sub(last.seenAt).Round(time.Millisecond), last.acks, afterBackup, afterBackupGenerous,
		delivered, missing, redelivered, extra,
		q.pending, q.inflight, q.dead, q.hooks, q.deliveries,
		load.Round(time.Millisecond), ready.Round(time.Millisecond), drain.Round(time.Millisecond))
	if missing > 0 {
		var notes []string
		for _, id := range firstN(remaining, 5) {
			notes = append(notes, fmt.Sprintf("%s (acked %+dms vs last backup seen)", id, first[id].Sub(last.seenAt).Milliseconds()))
		}
		t.Errorf("%s: %d of %d acked ids never delivered after host loss; first: %s", mode, missing, len(wantIDs), strings.Join(notes, ", "))
	}
	// Nothing was delivered before the kill (receiver down), so an id
	// received twice was sent twice by the replacement. Bounded, generously,
	// by what the backup lacked.
	if redelivered > afterBackupGenerous {
		t.Errorf("%s: %d ids redelivered, more than the %d acked after the last backup (generous)", mode, redelivered, afterBackupGenerous)
	}
	logNodeProblems(t, n2, mode+", replacement")

	stopReplacement(t, n2, mode)
	t.Logf("host-loss drill on JetStream: %s", time.Since(start).Round(time.Millisecond))
}
