package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/intaketest"
	"github.com/ankusa/ankusa/internal/intake/jetstream"
	"github.com/ankusa/ankusa/internal/testutil"
)

// TestIntake_PermissionDenied: a user that may use the JetStream API but not
// publish on the node's subject gets Permanent promptly, not a timeout. It
// runs one embedded server with two users (no cluster needed).
func TestIntake_PermissionDenied(t *testing.T) {
	t.Parallel()
	fleet := newFleet()
	allowed := jetstream.Subject(fleet, "allowed")
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
		Users: []*server.User{
			{Username: "admin", Password: "admin-pw"},
			{Username: "intake", Password: "intake-pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"$JS.API.>", allowed}},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(fleet)
	cfg.Replicas = 1
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream: %v", err)
	}

	opts := func(node, password string) jetstream.Options {
		return jetstream.Options{URL: s.ClientURL(), Stream: cfg.Name, Fleet: fleet, Node: node,
			User: "intake", Password: password}
	}
	ok := open(t, opts("allowed", "intake-pw"))
	testutil.Eventually(t, 10*time.Second, "the adapter to connect", ok.Ready)
	mustPublish(t, ok, intaketest.NewRecord("allowed", 1))

	denied := open(t, opts("denied", "intake-pw"))
	testutil.Eventually(t, 10*time.Second, "the adapter to connect", denied.Ready)
	start := time.Now()
	_, err = publish(denied, 10*time.Second, intaketest.NewRecord("denied", 1))
	assertClass(t, err, intake.Permanent)
	if !errors.Is(err, jetstream.ErrPermissionDenied) {
		t.Errorf("%v does not wrap ErrPermissionDenied", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("denied publish took %s, want prompt", d)
	}

	// Wrong credentials: Open still succeeds (the client keeps trying), but
	// the adapter is never ready.
	wrong := open(t, opts("allowed", "wrong"))
	if wrong.Ready() {
		t.Error("Ready with refused credentials")
	}
}

func TestSubjectMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"ankusa.intake.f.>", "ankusa.intake.f.n", true},
		{"ankusa.intake.f.>", "ankusa.intake.f.n.x", true},
		{"ankusa.intake.f.>", "ankusa.intake.f", false},
		{"ankusa.intake.*.n", "ankusa.intake.f.n", true},
		{"ankusa.intake.*", "ankusa.intake.f.n", false},
		{"ankusa.>", "ankusa.intake.f.n", true},
		{">", "ankusa.intake.f.n", true},
		{"ankusa.intake.f.n", "ankusa.intake.f.n", true},
		{"ankusa.intake.f.n", "ankusa.intake.f.m", false},
		{"ankusa.intake.g.>", "ankusa.intake.f.n", false},
		{"ankusa.intake.f.n.x", "ankusa.intake.f.n", false},
	} {
		if got := jetstream.SubjectMatches(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("SubjectMatches(%q, %q) = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}
