package jetstream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/jetstream"
	"github.com/ankusa/ankusa/internal/testutil"
)

// TestIntake_ConfirmIsAtQuorum stops the servers of an R3 stream one by one:
// with one down a publish still confirms (two of three are a quorum), with
// two down it fails Unavailable within its deadline (no quorum, no PubAck),
// and with all three down Ready turns false. The adapter is connected to the
// stream leader, which is stopped last, so each step changes one thing.
func TestIntake_ConfirmIsAtQuorum(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	fleet := newFleet()
	cfg := c.CreateStream(t, streamConfig(fleet))
	leader := c.WaitStreamLeader(t, cfg.Name)
	var followers []int
	for i := range 3 {
		if i != leader {
			followers = append(followers, i)
		}
	}
	node := "quorum-node"
	in := open(t, jetstream.Options{
		URL:         c.ClientURL(leader), // the client learns the others, but starts here
		Stream:      cfg.Name,
		Fleet:       fleet,
		Node:        node,
		VerifyTopic: true,
	})
	testutil.Eventually(t, 10*time.Second, "the adapter to connect", in.Ready)

	r1 := intaketest.NewRecord(node, 1)
	p1 := mustPublish(t, in, r1)

	c.Stop(followers[0])
	r2 := intaketest.NewRecord(node, 2)
	p2, err := publish(in, 10*time.Second, r2)
	if err != nil {
		t.Fatalf("publish with one of three servers down: %v", err)
	}
	if p2 <= p1 {
		t.Fatalf("confirmed at %d, not after %d", p2, p1)
	}

	c.Stop(followers[1])
	const attempt = 2 * time.Second
	start := time.Now()
	_, err = publish(in, attempt, intaketest.NewRecord(node, 3))
	elapsed := time.Since(start)
	assertClass(t, err, intake.Unavailable)
	if elapsed > attempt+time.Second {
		t.Errorf("publish without quorum took %s, beyond its %s deadline", elapsed, attempt)
	}
	t.Logf("two of three down: %v (after %s)", err, elapsed)
	if !in.Ready() {
		t.Error("Ready is false while the client is connected to a running server")
	}

	c.Stop(leader)
	testutil.Eventually(t, 10*time.Second, "Ready to turn false with every server gone", func() bool { return !in.Ready() })
	start = time.Now()
	_, err = publish(in, attempt, intaketest.NewRecord(node, 4))
	assertClass(t, err, intake.Unavailable)
	if !errors.Is(err, jetstream.ErrNotConnected) {
		t.Errorf("publish with every server down: %v, want ErrNotConnected", err)
	}
	if d := time.Since(start); d > attempt/2 {
		t.Errorf("publish with every server down took %s, want prompt", d)
	}
}
