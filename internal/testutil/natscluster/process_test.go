package natscluster_test

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/testutil"
	"github.com/ankusa/ankusa/internal/testutil/natscluster"
)

// TestStartProcesses_QuorumFollowsTheProcesses runs three nats-server
// processes with an R3 stream: one stopped still confirms a publish, two
// stopped refuse it, and after a restart (same ports and store) the stream
// confirms again and keeps what it had.
func TestStartProcesses_QuorumFollowsTheProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	c := natscluster.StartProcesses(t, natscluster.Options{Name: "ankusa-proc-test"})
	c.CreateStream(t, natsjs.StreamConfig{Name: "PROC", Subjects: []string{"proc.>"}, Replicas: 3, Storage: natsjs.FileStorage})
	// Each publish has its own subject and message id, so that a retried
	// one whose first try was confirmed late is still one message.
	publish := func(name string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.JetStream().Publish(ctx, "proc."+name, []byte(name), natsjs.WithMsgID(name))
		return err
	}
	if err := publish("three-up"); err != nil {
		t.Fatalf("publish, three up: %v", err)
	}
	c.Stop(2)
	if c.Running(2) {
		t.Fatal("n3 still running after Stop")
	}
	// n3 may have led the stream: a new leader is elected from the two left.
	testutil.Eventually(t, natscluster.Timeout, "a publish confirmed with n3 stopped", func() bool { return publish("one-down") == nil })
	c.Stop(1)
	if err := publish("two-down"); err == nil {
		t.Fatal("publish confirmed with two of three servers stopped")
	}
	c.Restart(t, 1, 2)
	c.WaitMetaLeader(t)
	c.WaitStreamLeader(t, "PROC")
	if err := publish("restarted"); err != nil {
		t.Fatalf("publish after the restart: %v", err)
	}
	// (The refused "two-down" proposal may still commit once the quorum is
	// back: the client was not told it was stored, so it is not asserted.)
	st, err := c.JetStream().Stream(context.Background(), "PROC")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"three-up", "one-down", "restarted"} {
		m, err := st.GetLastMsgForSubject(context.Background(), "proc."+name)
		if err != nil || string(m.Data) != name {
			t.Fatalf("confirmed message %s after the restart: %v", name, err)
		}
	}
}
