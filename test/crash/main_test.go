// Package crash holds the drills that run the real ankusa binary as a child
// process: kill -9 in the middle of load, restart on the same data dir, and
// check that every hook answered 201 is still there. Also the exit status of
// a bad configuration, which only the binary can show.
package crash

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// binPath is the ankusa binary built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash: module root:", err)
		return 1
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		fmt.Fprintln(os.Stderr, "crash: no go.mod at the module root:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "ankusa-crash-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "ankusa")
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintf(os.Stderr, "crash: the go tool is not on PATH: %v\n", err)
		return 1
	}
	build := exec.Command(goTool, "build", "-o", binPath, "./cmd/ankusa")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "crash: go build ./cmd/ankusa: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// childEnv is the test's environment without ANKUSA_* variables, so that a
// developer's shell cannot override the config the drill writes.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANKUSA_") {
			env = append(env, kv)
		}
	}
	return env
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the child binds it; startNode retries on that.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// node is one running ankusa child process.
type node struct {
	t         testing.TB
	cmd       *exec.Cmd
	done      chan struct{} // closed once Wait has returned
	waitErr   error         // valid after done
	logPath   string
	ingestURL string // http://127.0.0.1:port
	adminURL  string
}

// exited reports whether the process has exited.
func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// exitCode is the exit status, or -1 for a signal; only after done.
func (n *node) exitCode() int { return n.cmd.ProcessState.ExitCode() }

// wait waits up to d for the process to exit.
func (n *node) wait(d time.Duration) bool {
	select {
	case <-n.done:
		return true
	case <-time.After(d):
		return false
	}
}

// signal sends sig to the child process.
func (n *node) signal(sig syscall.Signal) error { return n.cmd.Process.Signal(sig) }

// log returns the last max bytes of the child's output.
func (n *node) log(max int) string {
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", n.logPath, err)
	}
	if len(b) > max {
		b = append([]byte("…"), b[len(b)-max:]...)
	}
	return string(b)
}

// drillConfig is the drill's config: two sources, one of them deduped on
// X-Event-Id, every listener on loopback. The node has only the ingest role:
// with dispatch running, a delivered hook is reclaimed from the store, and
// this drill proves the ack (every acked hook is in the store after a
// kill -9). Delivery after a crash has its own drill.
func drillConfig(dataDir string, httpPort, adminPort int) string {
	return fmt.Sprintf(`node:
  instance: crash-drill
  data_dir: %q
  roles: [ingest]
http:
  ip: 127.0.0.1
  port: %d
admin:
  ip: 127.0.0.1
  port: %d
log:
  level: info
sources:
  demo:
    verify: {type: none}
    sinks: [{id: log, type: log}]
  deduped:
    verify: {type: none}
    dedupe: {header: X-Event-Id}
    sinks: [{id: log, type: log}]
`, dataDir, httpPort, adminPort)
}

// startNode starts ankusa on dataDir with fresh loopback ports and waits
// until both listeners answer /ready with 200. The child's stdout and
// stderr go to <workDir>/<name>.log. A port taken between picking and
// binding is retried with new ports; any other early exit fails the test.
// The process is killed when the test ends if it is still running.
func startNode(t testing.TB, workDir, dataDir, name string) *node {
	t.Helper()
	return startNodeWith(t, workDir, dataDir, name, func(httpPort, adminPort int) string {
		return drillConfig(dataDir, httpPort, adminPort)
	})
}

// waitReady polls GET /ready on both listeners until both answer 200, the
// process exits, or the timeout passes.
func (n *node) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if n.exited() {
			return fmt.Errorf("exited before ready: %v", n.waitErr)
		}
		ok := true
		for _, base := range []string{n.ingestURL, n.adminURL} {
			code, body, err := get(context.Background(), client, base+"/ready")
			if err != nil || code != http.StatusOK {
				ok = false
				last = fmt.Sprintf("%s/ready: %d %s %v", base, code, bytes.TrimSpace(body), err)
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s; last: %s", timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get fetches url and returns its status and whole body.
func get(ctx context.Context, c *http.Client, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes(), err
}
