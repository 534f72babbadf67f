package crash

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/testutil"
)

// limitsConfig is the hardening drills' config: one source, ingest only
// (hooks stay in the store), every listener on loopback; extra is more of
// the http: section, node is more of the node: section (both indented).
func limitsConfig(dataDir, nodeExtra, httpExtra string, httpPort, adminPort int) string {
	return fmt.Sprintf(`node:
  instance: limits-drill
  data_dir: %q
  roles: [ingest]
%shttp:
  ip: 127.0.0.1
  port: %d
%sadmin:
  ip: 127.0.0.1
  port: %d
log:
  level: info
sources:
  demo:
    verify: {type: none}
    sinks: [{id: log, type: log}]
`, dataDir, nodeExtra, httpPort, httpExtra, adminPort)
}

func startLimitsNode(t *testing.T, name, nodeExtra, httpExtra string, wrap ...string) *node {
	t.Helper()
	work := t.TempDir()
	data := filepath.Join(work, "data")
	return startNodeWith(t, work, data, name, func(hp, ap int) string {
		return limitsConfig(data, nodeExtra, httpExtra, hp, ap)
	}, wrap...)
}

// procStatus reads one "Key: value kB" field of /proc/<pid>/status, in bytes.
func procStatus(t *testing.T, pid int, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read status: %v", err)
	}
	m := regexp.MustCompile(`(?m)^` + key + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /proc/%d/status", key, pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("read fds: %v", err)
	}
	return len(ents)
}

// The memory ceiling: concurrent large uploads against the default body
// budget (http.max_inflight_body_bytes 256 MiB, batcher.max_queue_bytes
// 256 MiB). Each scenario runs on a fresh node and reads its peak RSS
// (VmHWM); every upload is answered 201 or 503 overload with Retry-After.
// Before the budget, the same load took the node to 5.55 GB (300 × 7.5 MB)
// and 2.41 GB (100 × 7.5 MB), issue 12.
func TestDrill_MemoryCeilingUnderConcurrentUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("long drill")
	}
	// The documented ceiling (docs/deployment.md "Limits to size for") at
	// the defaults: 2 × (http.max_inflight_body_bytes +
	// batcher.max_queue_bytes) + dispatch.max_inflight_bytes + 256 MiB.
	const ceiling = 2*(256<<20+256<<20) + 64<<20 + 256<<20
	for _, sc := range []struct {
		uploads int
		size    int
	}{{300, 7_500_000}, {2000, 1_000_000}} {
		t.Run(fmt.Sprintf("%dx%d", sc.uploads, sc.size), func(t *testing.T) {
			n := startLimitsNode(t, "mem", "", "")
			body := bytes.Repeat([]byte("m"), sc.size)
			tr := &http.Transport{MaxIdleConnsPerHost: sc.uploads, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
			var mu sync.Mutex
			var firstErr error
			tally := map[string]int{}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for range sc.uploads {
				wg.Go(func() {
					<-start
					req, _ := http.NewRequest(http.MethodPost, n.ingestURL+"/webhooks/demo", bytes.NewReader(body))
					resp, err := client.Do(req)
					key := ""
					switch {
					case err != nil:
						key = "transport error"
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					default:
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						key = strconv.Itoa(resp.StatusCode)
						if resp.StatusCode == http.StatusServiceUnavailable {
							if !bytes.Contains(b, []byte(`"overload"`)) || resp.Header.Get("Retry-After") == "" {
								key = "503 without overload/Retry-After"
							}
						}
					}
					mu.Lock()
					tally[key]++
					mu.Unlock()
				})
			}
			began := time.Now()
			close(start)
			wg.Wait()
			peak := procStatus(t, n.cmd.Process.Pid, "VmHWM")
			t.Logf("%d concurrent uploads of %d bytes in %s: %v; peak RSS %.0f MiB (ceiling %d MiB)",
				sc.uploads, sc.size, time.Since(began).Round(time.Millisecond), tally, float64(peak)/(1<<20), ceiling>>20)
			if tally["201"] == 0 {
				t.Errorf("no upload was accepted: %v", tally)
			}
			for k, v := range tally {
				if k != "201" && k != "503" && k != "transport error" {
					t.Errorf("%d uploads answered %s", v, k)
				}
			}
			if e := tally["transport error"]; e*20 > sc.uploads {
				t.Errorf("%d of %d uploads got no answer (first: %v)", e, sc.uploads, firstErr)
			}
			if peak > ceiling {
				t.Errorf("peak RSS %d MiB over the documented ceiling %d MiB", peak>>20, ceiling>>20)
			}
		})
	}
}

// A flood of idle connections against a node whose descriptor limit was
// lowered (hard 1500): the ingest cap keeps descriptors for the store, new
// clients still get 201 (the oldest idle connections are evicted for them),
// the store flushes a memtable (opens new files) meanwhile, and the log
// never shows "too many open files".
func TestDrill_IdleConnectionFloodKeepsIngestAndStore(t *testing.T) {
	if testing.Short() {
		t.Skip("long drill")
	}
	n := startLimitsNode(t, "fds", "  fd_reserve: 256\n", "",
		"bash", "-c", `ulimit -Sn 1024 && ulimit -Hn 1500 && exec "$@"`, "bash")
	pid := n.cmd.Process.Pid
	addr := strings.TrimPrefix(n.ingestURL, "http://")
	const idle = 3000
	conns := make([]net.Conn, 0, idle)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range idle {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	// Every dial completed in the kernel; let the node accept (and evict)
	// them all: its descriptor count stops growing under the cap.
	var fds int
	deadline := time.Now().Add(10 * time.Second)
	for prev := -1; time.Now().Before(deadline); prev = fds {
		fds = openFDs(t, pid)
		if fds == prev {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline: the node reports no "accepted all" event
	}
	t.Logf("after %d idle connections: node holds %d descriptors (hard limit 1500)", idle, fds)
	if fds >= 1500-100 {
		t.Errorf("node holds %d descriptors, within 100 of its limit", fds)
	}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	body := bytes.Repeat([]byte("f"), 1_000_000) // 100 × 1 MB: past the 64 MiB memtable, so the store flushes
	created := 0
	for i := range 100 {
		resp, err := client.Post(n.ingestURL+"/webhooks/demo", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("post %d during the flood: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			created++
		}
	}
	if created != 100 {
		t.Errorf("%d of 100 posts during the flood got 201", created)
	}
	code, _, err := get(context.Background(), client, n.adminURL+"/metrics")
	if err != nil || code != http.StatusOK {
		t.Errorf("/metrics during the flood: %d %v", code, err)
	}
	peakFDs := openFDs(t, pid)
	t.Logf("after 100 posts of 1 MB during the flood: %d created, node holds %d descriptors", created, peakFDs)
	log := n.log(1 << 22)
	if strings.Contains(log, "too many open files") {
		t.Errorf("the node hit EMFILE:\n%s", n.log(4<<10))
	}
	if m := regexp.MustCompile(`msg="connection caps" ingest=(\d+)`).FindStringSubmatch(log); m != nil {
		t.Logf("ingest connection cap: %s", m[1])
	}
}

// rawPoster sends keep-alive POSTs back to back on one connection and
// counts the requests it wrote in full and the answers it read.
type rawPoster struct {
	sent, answered, created, refused int
	err                              error
}

func (p *rawPoster) run(addr string, stop <-chan struct{}) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		p.err = err
		return
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := []byte("POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello")
	for {
		select {
		case <-stop:
			return
		default:
		}
		if _, err := c.Write(req); err != nil {
			return // not sent in full: nothing is owed
		}
		p.sent++
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			p.err = err
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p.answered++
		switch resp.StatusCode {
		case http.StatusCreated:
			p.created++
		case http.StatusServiceUnavailable:
			p.refused++
		}
		if resp.Close {
			return
		}
	}
}

// SIGTERM under keep-alive load: every request a client wrote in full
// gets an answer (201 or 503), the node exits 0; a slow upload still in
// progress past http.shutdown_timeout_ms makes the exit status 1.
func TestDrill_SIGTERMAnswersEveryRequestSent(t *testing.T) {
	if testing.Short() {
		t.Skip("long drill")
	}
	t.Run("keep-alive load", func(t *testing.T) {
		n := startLimitsNode(t, "drain", "", "")
		addr := strings.TrimPrefix(n.ingestURL, "http://")
		const clients = 32
		posters := make([]*rawPoster, clients)
		stop := make(chan struct{})
		defer close(stop)
		var wg sync.WaitGroup
		for i := range posters {
			posters[i] = &rawPoster{}
			wg.Go(func() { posters[i].run(addr, stop) })
		}
		// Load for a moment: SIGTERM lands in the middle of it.
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			code, body, _ := get(context.Background(), http.DefaultClient, n.adminURL+"/metrics")
			if code == 200 && regexp.MustCompile(`ankusa_ingest_requests_total\{outcome="accepted",source_id="demo"\} ([0-9]{4,})`).Match(body) {
				break
			}
			time.Sleep(50 * time.Millisecond) // polling with a deadline on the node's own counter
		}
		if err := n.signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !n.wait(30 * time.Second) {
			t.Fatal("still running 30 s after SIGTERM")
		}
		wg.Wait()
		var sent, answered, created, refused int
		for i, p := range posters {
			sent, answered, created, refused = sent+p.sent, answered+p.answered, created+p.created, refused+p.refused
			if p.sent != p.answered {
				t.Errorf("client %d wrote %d requests in full and got %d answers (last error %v)", i, p.sent, p.answered, p.err)
			}
		}
		t.Logf("%d keep-alive clients: %d requests sent, %d answered (%d × 201, %d × 503)", clients, sent, answered, created, refused)
		if code := n.exitCode(); code != 0 {
			t.Errorf("exit status after a drain that finished = %d, want 0\n%s", code, n.log(4<<10))
		}
	})
	t.Run("slow upload past the drain timeout", func(t *testing.T) {
		n := startLimitsNode(t, "slow", "", "  shutdown_timeout_ms: 1000\n")
		c, err := net.Dial("tcp", strings.TrimPrefix(n.ingestURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nslow"); err != nil {
			t.Fatal(err)
		}
		code, body, err := get(context.Background(), http.DefaultClient, n.adminURL+"/metrics")
		if err != nil || code != 200 || !bytes.Contains(body, []byte("ankusa_")) {
			t.Fatalf("metrics: %d %v", code, err)
		}
		began := time.Now()
		if err := n.signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !n.wait(15 * time.Second) {
			t.Fatal("still running 15 s after SIGTERM with a 1 s drain timeout")
		}
		took := time.Since(began)
		if code := n.exitCode(); code != 1 {
			t.Errorf("exit status after a drain cut a slow upload = %d, want 1", code)
		}
		if !strings.Contains(n.log(1<<16), "shutdown drain did not finish") {
			t.Errorf("the log does not say the drain was cut:\n%s", n.log(4<<10))
		}
		t.Logf("drain timeout 1 s: exited %d after %s", n.exitCode(), took.Round(time.Millisecond))
	})
}

// A node whose store cannot be opened exits 74 (EX_IOERR) at once, before
// anything listens, instead of running without its store.
func TestServe_StoreThatCannotOpenExits74(t *testing.T) {
	work := t.TempDir()
	data := filepath.Join(work, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	// <data_dir>/store is a file, not a directory: Pebble cannot open it.
	if err := os.WriteFile(filepath.Join(data, "store"), []byte("not a store"), 0o600); err != nil {
		t.Fatal(err)
	}
	hp, ap := freePort(t), freePort(t)
	cfgPath := filepath.Join(work, "ankusa.yml")
	if err := os.WriteFile(cfgPath, []byte(limitsConfig(data, "", "", hp, ap)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "serve", "--config", cfgPath)
	testutil.DiesWithTest(cmd)
	cmd.Env = childEnv()
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 74 {
		t.Fatalf("exit status %d, want 74; output:\n%s", code, out)
	}
	if !bytes.Contains(out, []byte("cannot open the store")) {
		t.Errorf("the log does not say the store cannot be opened:\n%s", out)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hp), time.Second); err == nil {
		c.Close()
		t.Error("something listens on the ingest port after the exit")
	}
}
