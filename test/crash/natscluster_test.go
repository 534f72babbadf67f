package crash

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/testutil"
)

// natsCluster is three embedded nats-server instances with JetStream,
// clustered on loopback inside the test process (a copy of
// test/e2e/intake_adapters_test.go's jsCluster, without restart: helpers of
// _test files cannot be shared across packages). The drill's child binary
// connects to it over TCP like to any external cluster.
type natsCluster struct {
	t       testing.TB
	mu      sync.Mutex
	opts    []*server.Options
	servers []*server.Server
	admin   *nats.Conn
	js      natsjs.JetStream
}

// natsTimeout bounds cluster start-up, elections and stream placement.
const natsTimeout = 30 * time.Second

func startNATSCluster(t testing.TB) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t, servers: make([]*server.Server, 3)}
	t.Cleanup(c.shutdown)
	// A port found free can be taken before its server binds it: start
	// again on fresh ports rather than fail on a collision.
	for attempt := 1; ; attempt++ {
		c.configure(t.TempDir(), natsLoopbackPorts(t, 6))
		err := c.startAll(10 * time.Second)
		if err == nil {
			break
		}
		c.shutdown()
		if attempt == 3 {
			t.Fatalf("start the NATS cluster: %v (3 attempts)", err)
		}
		t.Logf("start the NATS cluster, attempt %d: %v; again on fresh ports", attempt, err)
	}
	c.waitMetaLeader()
	var err error
	c.admin, err = nats.Connect(c.URL(), nats.Name("ankusa-crash-admin"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("NATS admin connect: %v", err)
	}
	if c.js, err = natsjs.New(c.admin); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *natsCluster) configure(dir string, ports []int) {
	var routes []*url.URL
	for i := range 3 {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[3+i])})
	}
	c.opts = nil
	for i := range 3 {
		c.opts = append(c.opts, &server.Options{
			ServerName:         fmt.Sprintf("n%d", i+1),
			Host:               "127.0.0.1",
			Port:               ports[i],
			JetStream:          true,
			StoreDir:           filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
			Cluster:            server.ClusterOpts{Name: "ankusa-crash-intake", Host: "127.0.0.1", Port: ports[3+i]},
			Routes:             routes, // a route to itself is detected and ignored
			NoLog:              true,
			NoSigs:             true,
		})
	}
}

func natsLoopbackPorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// URL is every server's client URL, comma-separated.
func (c *natsCluster) URL() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(us, ",")
}

// startAll starts the three servers together (a clustered JetStream server
// is ready only once it sees its routes) and waits for each to listen.
func (c *natsCluster) startAll(wait time.Duration) error {
	var started []*server.Server
	for i := range 3 {
		o := *c.opts[i] // a server keeps and edits its options
		s, err := server.NewServer(&o)
		if err != nil {
			return fmt.Errorf("server n%d: %w", i+1, err)
		}
		s.Start()
		c.mu.Lock()
		c.servers[i] = s
		c.mu.Unlock()
		started = append(started, s)
	}
	for i, s := range started {
		if !s.ReadyForConnections(wait) {
			return fmt.Errorf("server n%d (ports %d, %d) not listening after %s", i+1, c.opts[i].Port, c.opts[i].Cluster.Port, wait)
		}
	}
	return nil
}

func (c *natsCluster) shutdown() {
	if c.admin != nil {
		c.admin.Close()
		c.admin = nil
	}
	for i := range c.servers {
		c.mu.Lock()
		s := c.servers[i]
		c.servers[i] = nil
		c.mu.Unlock()
		if s != nil {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
}

// waitMetaLeader polls until one server leads the JetStream meta group and
// every server is current with it (cluster state has no event to wait on).
func (c *natsCluster) waitMetaLeader() {
	c.t.Helper()
	testutil.Eventually(c.t, natsTimeout, "a JetStream meta leader", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		leaders, current, running := 0, 0, 0
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
		return leaders == 1 && current == running
	})
}

// waitStreamLeader polls until a server leads stream and all three
// replicas are current.
func (c *natsCluster) waitStreamLeader(stream string) {
	c.t.Helper()
	testutil.Eventually(c.t, natsTimeout, "stream "+stream+" to have a leader and three current replicas", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		leader, current, assigned := false, 0, 0
		for _, s := range c.servers {
			if s == nil || !s.JetStreamIsStreamAssigned(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				continue
			}
			assigned++
			if s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				leader = true
			}
			if s.JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				current++
			}
		}
		return leader && current == 3 && assigned == 3
	})
}

// createStream creates the stream as the operator would (Ankusa never
// does), retrying while the cluster is still placing peers.
func (c *natsCluster) createStream(cfg natsjs.StreamConfig) {
	c.t.Helper()
	var last error
	testutil.Eventually(c.t, natsTimeout, "stream "+cfg.Name+" to be created", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, last = c.js.CreateStream(ctx, cfg)
		if errors.Is(last, natsjs.ErrStreamNameAlreadyInUse) {
			c.t.Fatalf("create stream %s: %v", cfg.Name, last)
		}
		return last == nil
	})
}

// streamState is the stream's message count and last sequence.
func (c *natsCluster) streamState(stream string) (msgs, lastSeq uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return info.State.Msgs, info.State.LastSeq, nil
}
