package crash

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/intake/memory"
	"github.com/ankusa/ankusa/internal/store"
)

const dualDrillRounds = 3

var republishedRE = regexp.MustCompile(`intake recovery done.*?republished=(\d+)`)

// TestCrash_DualKillNineKeepsTheDataDir is the dual kill -9 drill on the
// same data dir (beside the host-loss drills, which wipe it): a wal.type:
// dual node on the memory intake log is loaded, killed with SIGKILL mid-load
// and restarted on its own data dir, several rounds. After every restart
// every acked hook is in the store with its body (verifyAll), and boot
// recovery has republished the local tail above the watermark (hooks whose
// publish the kill cut off): the watermark is at the last seq before the
// node serves. At the end every hook of the store, and every acked one, is
// in the log. The receiver stays down, so no hook is reclaimed.
func TestCrash_DualKillNineKeepsTheDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("long drill: dual node, kill -9 under load, restart on the same data dir")
	}
	start := time.Now()
	work := t.TempDir()
	dataDir := filepath.Join(work, "data")
	logDir := filepath.Join(work, "log", "intake")
	backupDir := filepath.Join(work, "bucket")
	if err := os.MkdirAll(backupDir, 0o755); err != nil {
		t.Fatal(err)
	}
	g := &gatedReceiver{rv: newReceiver()} // down: every hook stays in the store
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	cfg := func(httpPort, adminPort int) string {
		return hostLossConfig(true, dataDir, logDir, backupDir, srv.URL+"/hook", httpPort, adminPort)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, data dir %s, intake log %s", seed, dataDir, logDir)
	rng := rand.New(rand.NewPCG(seed, 0))

	n := startNodeWith(t, work, dataDir, "dual-round0", cfg)
	var led ledger
	for round := 1; round <= dualDrillRounds; round++ {
		killAt := drillMinAcks/2 + rng.IntN(500)
		p := startPosters(n, &led, drillWorkers, round, killAt, seed)
		p.waitReached(t, n, round)
		killNine(t, n, p, fmt.Sprintf("dual round %d", round))
		st := p.st

		n = startNodeWith(t, work, dataDir, fmt.Sprintf("dual-round%d", round), cfg)
		republished := -1
		if m := republishedRE.FindStringSubmatch(n.log(1 << 20)); m != nil {
			republished, _ = strconv.Atoi(m[1])
		}
		wal := readDualWAL(t, n)
		res := verifyAll(t, n, led.snapshot())
		t.Logf("dual round %d: kill after %d acks; acked %d (%d duplicate), 503 %d; checked %d ids from %d acks: present %d, missing %d; "+
			"boot recovery republished %d; watermark %d, next_seq %d, pending %d",
			round, killAt, st.acks.Load(), st.dups.Load(), st.refused.Load(), res.ids, res.acks, res.present, res.missing,
			republished, wal.Intake.Watermark, wal.WAL.NextSeq, wal.Intake.Pending)
		if res.missing != 0 {
			t.Fatalf("dual round %d: %d acked hooks missing after kill -9", round, res.missing)
		}
		if republished < 0 {
			t.Errorf("dual round %d: no \"intake recovery done\" line with republished=N in the boot log", round)
		}
		if wal.Intake.Watermark != wal.WAL.NextSeq-1 {
			t.Errorf("dual round %d: watermark %d after boot recovery, want next_seq-1 = %d: the local tail was not republished",
				round, wal.Intake.Watermark, wal.WAL.NextSeq-1)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	if err := n.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if !n.wait(30 * time.Second) {
		t.Fatal("no exit 30s after SIGTERM")
	}
	if code := n.exitCode(); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d (%v), want 0", code, n.waitErr)
	}

	// The log holds every acked hook and every hook the store holds.
	lg, err := memory.Open(memory.Options{Dir: logDir, Node: hostLossNodeID})
	if err != nil {
		t.Fatal(err)
	}
	inLog := map[string]bool{}
	for _, r := range lg.Records() {
		inLog[uuid.UUID(r.ID).String()] = true
	}
	_ = lg.Close()
	notLogged := 0
	for _, a := range led.snapshot() {
		if !inLog[a.id] {
			notLogged++
		}
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(dataDir, "store")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hooks, storeNotLogged := 0, 0
	if err := st.Scan([]byte{store.PrefixHook}, []byte{store.PrefixHook + 1}, func(_, v []byte) bool {
		hooks++
		if env, err := store.DecodeEnvelope(v); err != nil || !inLog[uuid.UUID(env.ID).String()] {
			storeNotLogged++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("dual drill: %d rounds, %d acks (%d not in the log), %d hooks in the store (%d not in the log), log records %d, %s",
		dualDrillRounds, len(led.snapshot()), notLogged, hooks, storeNotLogged, len(inLog), time.Since(start).Round(time.Millisecond))
	if notLogged != 0 || storeNotLogged != 0 {
		t.Fatalf("%d acked hooks and %d stored hooks are not in the intake log", notLogged, storeNotLogged)
	}
}

// dualWAL is the part of GET /v1/wal the dual drill reads.
type dualWAL struct {
	WAL struct {
		NextSeq uint64 `json:"next_seq"`
	} `json:"wal"`
	Intake struct {
		Watermark uint64 `json:"watermark"`
		Offset    int64  `json:"offset"`
		Pending   int    `json:"pending"`
	} `json:"intake"`
}

func readDualWAL(t *testing.T, n *node) dualWAL {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	code, raw, err := get(context.Background(), c, n.adminURL+"/v1/wal")
	var w dualWAL
	if err != nil || code != http.StatusOK || json.Unmarshal(raw, &w) != nil {
		t.Fatalf("GET /v1/wal: %d %s %v", code, raw, err)
	}
	return w
}
