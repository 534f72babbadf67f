package jetstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/ankusa/ankusa/internal/intake"
	"github.com/ankusa/ankusa/internal/intake/jetstream"
	"github.com/ankusa/ankusa/internal/testutil"
)

// callTimeout bounds one adapter call in these tests.
const callTimeout = 15 * time.Second

// randHex is 2n random hex digits.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// streamConfig is the stream an operator would create for fleet: R3,
// ankusa.intake.<fleet>.>, duplicate window 2m, file storage. The name is
// ANKUSA_INTAKE_<random>.
func streamConfig(fleet string) natsjs.StreamConfig {
	return natsjs.StreamConfig{
		Name:       "ANKUSA_INTAKE_" + strings.ToUpper(randHex(6)),
		Subjects:   []string{jetstream.SubjectPrefix + "." + fleet + ".>"},
		Replicas:   3,
		Storage:    natsjs.FileStorage,
		Duplicates: 2 * time.Minute,
		MaxAge:     24 * time.Hour,
	}
}

// newFleet is a fleet name no other test uses.
func newFleet() string { return "f" + randHex(4) }

// open opens an adapter and closes it when the test ends.
func open(t *testing.T, o jetstream.Options) *jetstream.Intake {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testutil.Logger(t)
	}
	in, err := jetstream.Open(o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return in
}

// publish publishes recs with a fresh deadline.
func publish(in intake.Intake, timeout time.Duration, recs ...intake.Record) (intake.Position, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return in.PublishBatch(ctx, recs)
}

// mustPublish publishes recs and fails the test on an error.
func mustPublish(t *testing.T, in intake.Intake, recs ...intake.Record) intake.Position {
	t.Helper()
	p, err := publish(in, callTimeout, recs...)
	if err != nil {
		t.Fatalf("publish %d records: %v", len(recs), err)
	}
	return p
}

// assertClass fails unless err is classified c.
func assertClass(t *testing.T, err error, c intake.Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", c)
	}
	var e *intake.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %q is not classified, want %s", err, c)
	}
	if e.Class != c {
		t.Fatalf("error %q is %s, want %s", err, e.Class, c)
	}
}
