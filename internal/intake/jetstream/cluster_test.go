package jetstream_test

import (
	"os"
	"sync"
	"testing"

	"github.com/ankusa/ankusa/internal/testutil/natscluster"
)

// Tests run three nats-server instances clustered on loopback, embedded
// (internal/testutil/natscluster). Tests that keep every server up share
// one cluster (sharedCluster); a test that stops servers starts its own.

// clusterOptions are the servers' settings for this package's clusters.
var clusterOptions = natscluster.Options{Name: "ankusa-intake-test", MaxMemory: 256 << 20}

// startCluster starts a cluster of the test's own, stopped when it ends.
func startCluster(t testing.TB) *natscluster.Cluster {
	t.Helper()
	return natscluster.Start(t, clusterOptions)
}

var (
	sharedOnce sync.Once
	shared     *natscluster.Cluster
	sharedDir  string
)

// sharedCluster is the cluster of every test that keeps all servers up,
// started on first use; TestMain stops it.
func sharedCluster(t *testing.T) *natscluster.Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ankusa-intake-js-")
		if err != nil {
			t.Fatalf("shared cluster: %v", err)
		}
		sharedDir = dir
		shared = natscluster.StartIn(t, dir, clusterOptions)
	})
	if shared == nil {
		t.Fatal("shared cluster: it failed to start in an earlier test")
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Shutdown()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}
