package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// This file runs three nats-server instances clustered on loopback,
// embedded: JetStream on, routes between them on random free ports, server
// names n1..n3. Tests that keep every server up share one cluster
// (sharedCluster); a test that stops servers starts its own.

// clusterTimeout bounds cluster start-up, the meta leader election and
// stream creation.
const clusterTimeout = 30 * time.Second

// cluster is three embedded, clustered JetStream servers.
type cluster struct {
	mu      sync.Mutex
	servers []*server.Server // nil once shut down
	urls    []string         // client URL of each server
	admin   *nats.Conn
	js      natsjs.JetStream
}

// newCluster starts the three servers with their stores under dir and waits
// for a JetStream meta leader, with a deadline.
func newCluster(dir string) (_ *cluster, err error) {
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	var routes []*url.URL
	for i := range 3 {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[3+i])})
	}
	c := &cluster{}
	defer func() {
		if err != nil {
			c.shutdown()
		}
	}()
	for i := range 3 {
		o := &server.Options{
			ServerName:         fmt.Sprintf("n%d", i+1),
			Host:               "127.0.0.1",
			Port:               ports[i],
			JetStream:          true,
			StoreDir:           filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			JetStreamMaxMemory: 256 << 20,
			JetStreamMaxStore:  1 << 30,
			Cluster: server.ClusterOpts{
				Name: "ankusa-intake-test",
				Host: "127.0.0.1",
				Port: ports[3+i],
			},
			Routes: routes, // a route to itself is detected and ignored
			NoLog:  true,
			NoSigs: true,
		}
		s, err := server.NewServer(o)
		if err != nil {
			return nil, fmt.Errorf("server n%d: %w", i+1, err)
		}
		s.Start()
		c.servers = append(c.servers, s)
		c.urls = append(c.urls, s.ClientURL())
	}
	for i, s := range c.servers {
		if !s.ReadyForConnections(clusterTimeout) {
			return nil, fmt.Errorf("server n%d not ready after %s", i+1, clusterTimeout)
		}
	}
	if err := c.waitMetaLeader(clusterTimeout); err != nil {
		return nil, err
	}
	c.admin, err = nats.Connect(c.URL(), nats.Name("ankusa-intake-test-admin"), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("admin connect: %w", err)
	}
	if c.js, err = natsjs.New(c.admin); err != nil {
		return nil, err
	}
	return c, nil
}

// startCluster starts a cluster of the test's own, stopped when it ends.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := newCluster(t.TempDir())
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.shutdown)
	return c
}

var (
	sharedOnce sync.Once
	shared     *cluster
	sharedErr  error
	sharedDir  string
)

// sharedCluster is the cluster of every test that keeps all servers up,
// started on first use; TestMain stops it.
func sharedCluster(t *testing.T) *cluster {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "ankusa-intake-js-")
		if sharedErr == nil {
			shared, sharedErr = newCluster(sharedDir)
		}
	})
	if sharedErr != nil {
		t.Fatalf("shared cluster: %v", sharedErr)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.shutdown()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// URL is every server's client URL, comma-separated.
func (c *cluster) URL() string { return strings.Join(c.urls, ",") }

// waitMetaLeader polls until one running server is the JetStream meta
// leader and every running server is current with it.
func (c *cluster) waitMetaLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leaders, current, running := 0, 0, 0
		c.mu.Lock()
		for _, s := range c.servers {
			if s == nil {
				continue
			}
			running++
			if s.JetStreamIsLeader() {
				leaders++
			}
			if s.JetStreamIsCurrent() {
				current++
			}
		}
		c.mu.Unlock()
		if leaders == 1 && current == running {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no JetStream meta leader after %s (%d leaders, %d of %d current)", timeout, leaders, current, running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// streamLeader polls until a running server leads stream and every running
// server holding it is current, and returns the leader's index.
func (c *cluster) streamLeader(t *testing.T, stream string) int {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		leader, current, assigned := -1, 0, 0
		c.mu.Lock()
		for i, s := range c.servers {
			if s == nil || !s.JetStreamIsStreamAssigned(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				continue
			}
			assigned++
			if s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				leader = i
			}
			if s.JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				current++
			}
		}
		c.mu.Unlock()
		if leader >= 0 && current == assigned {
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s has no leader after %s", stream, clusterTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop shuts server i down and waits until it is gone.
func (c *cluster) stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (c *cluster) shutdown() {
	if c.admin != nil {
		c.admin.Close()
	}
	for i := range c.servers {
		c.stop(i)
	}
}

// createStream creates a stream as the operator would (the adapter never
// does), retrying while the cluster is still placing peers, and returns its
// config as the server stored it.
func (c *cluster) createStream(t *testing.T, cfg natsjs.StreamConfig) natsjs.StreamConfig {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		st, err := c.js.CreateStream(ctx, cfg)
		cancel()
		if err == nil {
			return st.CachedInfo().Config
		}
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) || time.Now().After(deadline) {
			t.Fatalf("create stream %s: %v", cfg.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streamInfo reads a stream's info with the admin client.
func (c *cluster) streamInfo(t *testing.T, name string, opts ...natsjs.StreamInfoOpt) *natsjs.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := c.js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(ctx, opts...)
	if err != nil {
		t.Fatalf("stream info %s: %v", name, err)
	}
	return info
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
