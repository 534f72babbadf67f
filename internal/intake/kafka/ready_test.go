package kafka_test

import (
	"github.com/ankusa/ankusa/internal/testutil"

	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestReady_FollowsTheCluster: the flag turns true once a metadata request
// finds the partition's leader, false once no broker answers (kfake's
// cluster closed), and false on Close. Ready itself never does I/O, so the
// test polls it against a deadline.
func TestReady_FollowsTheCluster(t *testing.T) {
	c := newCluster(t)
	in := open(t, c, "node-a", 1)
	testutil.Eventually(t, bound, "Ready on a healthy cluster", in.Ready)
	c.Close()
	testutil.Eventually(t, bound, "Ready false once the cluster is gone", func() bool { return !in.Ready() })
}

// TestReady_NoLeader: a partition whose metadata carries an error (kfake's
// Fault on Metadata, as during a leader election) is not ready, and
// recovers when the fault is removed.
func TestReady_NoLeader(t *testing.T) {
	c := newCluster(t)
	in := open(t, c, "node-a", 2)
	testutil.Eventually(t, bound, "Ready on a healthy cluster", in.Ready)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Partitions: []int32{2}, Err: kerr.LeaderNotAvailable, Count: -1})
	testutil.Eventually(t, bound, "Ready false while the partition has no leader", func() bool { return !in.Ready() })
	h.Remove()
	testutil.Eventually(t, bound, "Ready again", in.Ready)
}

// TestReady_FalseAfterClose and Close is idempotent.
func TestReady_FalseAfterClose(t *testing.T) {
	c := newCluster(t)
	in := open(t, c, "node-a", 0)
	testutil.Eventually(t, bound, "Ready on a healthy cluster", in.Ready)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if in.Ready() {
		t.Fatal("Ready after Close")
	}
	if err := in.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
