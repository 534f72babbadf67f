package natscluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/testutil"
)

// DebianBinary is where Debian's nats-server package puts the server
// (/usr/sbin is not on every user's PATH). scripts/test.sh installs it.
const DebianBinary = "/usr/sbin/nats-server"

// Binary finds the nats-server executable: $PATH, then DebianBinary.
func Binary() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(DebianBinary); err == nil {
		return DebianBinary, nil
	}
	return "", errors.New("no nats-server on $PATH or at " + DebianBinary + " (scripts/test.sh installs Debian's nats-server package)")
}

// proc is one running nats-server process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// StartProcesses is Start with three real nats-server processes (Binary)
// instead of embedded servers: each has its config file, log and
// JetStream store under the test's temporary directory, client, route and
// monitoring ports on loopback. Stop sends a server SIGTERM and waits for
// the process to exit; Restart execs it again on the same config (ports
// and store). Every process is killed when the test ends.
func StartProcesses(tb testing.TB, o Options) *Cluster {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{bin: bin}
	tb.Cleanup(c.Shutdown)
	c.start(tb, func(int) string { return tb.TempDir() }, o)
	return c
}

// confPath is server i's config file, beside its store.
func (c *Cluster) confPath(i int) string {
	return filepath.Join(filepath.Dir(c.opts[i].StoreDir), c.opts[i].ServerName+".conf")
}

func (c *Cluster) logPath(i int) string {
	return filepath.Join(filepath.Dir(c.opts[i].StoreDir), c.opts[i].ServerName+".log")
}

// writeConf renders server i's options as a nats-server config file.
func (c *Cluster) writeConf(i int) error {
	o := c.opts[i]
	var routes []string
	for _, r := range o.Routes {
		routes = append(routes, fmt.Sprintf("%q", r.String()))
	}
	conf := fmt.Sprintf(`server_name: %q
host: %q
port: %d
http: "%s:%d"
jetstream {
  store_dir: %q
  max_memory_store: %d
  max_file_store: %d
}
cluster {
  name: %q
  host: %q
  port: %d
  routes: [%s]
}
`, o.ServerName, o.Host, o.Port, o.HTTPHost, o.HTTPPort, o.StoreDir, o.JetStreamMaxMemory, o.JetStreamMaxStore,
		o.Cluster.Name, o.Cluster.Host, o.Cluster.Port, strings.Join(routes, ", "))
	if err := os.MkdirAll(filepath.Dir(o.StoreDir), 0o755); err != nil {
		return err
	}
	return os.WriteFile(c.confPath(i), []byte(conf), 0o600)
}

// startProcs execs the servers which, then waits up to wait for each to
// answer on its monitoring port (a clustered JetStream server is healthy
// only once it sees its routes, so they start together: health is
// WaitMetaLeader's). A process that exits first (a port taken) is an error.
func (c *Cluster) startProcs(wait time.Duration, which ...int) error {
	for _, i := range which {
		if err := c.writeConf(i); err != nil {
			return fmt.Errorf("server n%d: %w", i+1, err)
		}
		logf, err := os.OpenFile(c.logPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("server n%d: %w", i+1, err)
		}
		cmd := exec.Command(c.bin, "-c", c.confPath(i))
		testutil.DiesWithTest(cmd)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			_ = logf.Close() // the start error is the one to report
			return fmt.Errorf("server n%d: %w", i+1, err)
		}
		p := &proc{cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); _ = logf.Close(); close(p.done) }()
		c.mu.Lock()
		c.procs[i] = p
		c.mu.Unlock()
	}
	hc := &http.Client{Timeout: time.Second}
	for _, i := range which {
		c.mu.Lock()
		p := c.procs[i]
		c.mu.Unlock()
		url := fmt.Sprintf("http://127.0.0.1:%d/healthz", c.opts[i].HTTPPort)
		answered := testutil.Poll(wait, func() bool {
			if p.exited() {
				return true
			}
			resp, err := hc.Get(url)
			if err != nil {
				return false
			}
			// Listening is all this waits for (healthy is WaitMetaLeader's).
			_ = resp.Body.Close()
			return true
		})
		if p.exited() {
			return fmt.Errorf("server n%d (ports %d, %d, %d) exited at start: %s", i+1, c.opts[i].Port, c.opts[i].Cluster.Port, c.opts[i].HTTPPort, c.logTail(i))
		}
		if !answered {
			return fmt.Errorf("server n%d (ports %d, %d, %d) not listening after %s: %s", i+1, c.opts[i].Port, c.opts[i].Cluster.Port, c.opts[i].HTTPPort, wait, c.logTail(i))
		}
	}
	return nil
}

func (c *Cluster) logTail(i int) string {
	b, _ := os.ReadFile(c.logPath(i))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// stopProc sends server i SIGTERM and waits until the process has exited;
// one still running after Timeout is killed.
func (c *Cluster) stopProc(i int) {
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(Timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Running reports whether server i's process is running (process mode).
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[i] != nil && !c.procs[i].exited()
}

// waitHealthy is WaitMetaLeader for processes: every running server
// answers 200 on /healthz (which a clustered JetStream server gives only
// once it is in contact with, and current with, a meta leader, and its
// assigned streams are current), and, once the admin client is connected,
// the JetStream API answers it.
func (c *Cluster) waitHealthy(tb testing.TB) {
	tb.Helper()
	hc := &http.Client{Timeout: time.Second}
	testutil.Eventually(tb, Timeout, "every running nats-server healthy (/healthz 200) with a JetStream meta leader", func() bool {
		running := 0
		for i := range c.procs {
			if !c.Running(i) {
				continue
			}
			running++
			resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", c.opts[i].HTTPPort))
			if err != nil {
				return false
			}
			_ = resp.Body.Close() // only the status is read
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		if running == 0 {
			return false
		}
		if c.js == nil {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.js.AccountInfo(ctx)
		return err == nil
	})
}

// waitStreamLeaderProcs is WaitStreamLeader for processes, read from the
// stream's cluster info: a leader and two current replicas.
func (c *Cluster) waitStreamLeaderProcs(tb testing.TB, stream string) int {
	tb.Helper()
	leader := -1
	testutil.Eventually(tb, Timeout, "stream "+stream+" to have a leader and three current replicas", func() bool {
		info, err := c.Info(stream)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		leader = -1
		for i, o := range c.opts {
			if o.ServerName == info.Cluster.Leader {
				leader = i
			}
		}
		return leader >= 0 && c.Running(leader)
	})
	return leader
}
