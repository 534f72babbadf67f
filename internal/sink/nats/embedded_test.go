package natssink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/ankusa/ankusa/internal/hook"
	natssink "github.com/ankusa/ankusa/internal/sink/nats"
	"github.com/ankusa/ankusa/internal/testutil"
)

// These tests run an embedded nats-server, for what the shared server
// cannot do: go away, come back, enforce permissions and credentials.

// adminOpts make the test's own client ride out a server restart quickly.
var adminOpts = []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}

func TestSink_ServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv := runServer(t, -1, dir, nil)
	port := serverPort(t, srv)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	js := embeddedJetStream(t, url, adminOpts...)
	st := makeStream(t, js, func(c *jetstream.StreamConfig) { c.Storage = jetstream.FileStorage })
	s := newSink(t, natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0]})
	if err := deliver(s, newMessage(nil), 5*time.Second); err != nil {
		t.Fatalf("Deliver: %v", err)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	const attempt = 2 * time.Second
	start := time.Now()
	err := deliver(s, newMessage(nil), attempt)
	if d := time.Since(start); d > attempt+time.Second {
		t.Errorf("Deliver with the server down took %s, beyond its %s deadline", d, attempt)
	}
	assertTransient(t, err)
	t.Logf("server down: %v", err)

	runServer(t, port, dir, nil) // same port, same store: the stream is back
	eventuallyDelivered(t, s, newMessage(nil))
	if n := streamMsgs(t, st); n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
}

func TestSink_ServerDownAtBoot(t *testing.T) {
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	start := time.Now()
	s := newSink(t, natssink.Options{URL: url, Subject: "ankusa.hooks"})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("New took %s with the server down", d)
	}
	err := deliver(s, newMessage(nil), 5*time.Second)
	assertTransient(t, err)
	if !errors.Is(err, natssink.ErrNotConnected) {
		t.Errorf("error %q is not ErrNotConnected", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Deliver took %s with the server down, want prompt", d)
	}

	runServer(t, port, t.TempDir(), nil)
	js := embeddedJetStream(t, url)
	makeStream(t, js, func(c *jetstream.StreamConfig) { c.Subjects = []string{"ankusa.hooks"} })
	eventuallyDelivered(t, s, newMessage(nil))
}

func TestSink_PermissionViolation(t *testing.T) {
	srv := runServer(t, -1, t.TempDir(), func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "ankusa", Password: "pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{"denied.>"}},
			}},
		}
	})
	url := srv.ClientURL()
	js := embeddedJetStream(t, url, nats.UserInfo("admin", "admin"))
	makeStream(t, js, func(c *jetstream.StreamConfig) { c.Subjects = []string{"denied.hooks", "allowed.hooks"} })

	allowed := newSink(t, natssink.Options{URL: url, Subject: "allowed.hooks", User: "ankusa", Password: "pw"})
	if err := deliver(allowed, newMessage(nil), 5*time.Second); err != nil {
		t.Fatalf("Deliver to an allowed subject: %v", err)
	}

	denied := newSink(t, natssink.Options{URL: url, Subject: "denied.hooks", User: "ankusa", Password: "pw"})
	const attempt = 10 * time.Second
	start := time.Now()
	err := deliver(denied, newMessage(nil), attempt)
	assertPermanent(t, err)
	if !errors.Is(err, natssink.ErrPermissionDenied) {
		t.Errorf("error %q is not ErrPermissionDenied", err)
	}
	if d := time.Since(start); d > attempt/2 {
		t.Errorf("Deliver took %s: the denial should end the attempt, not its deadline", d)
	}
	// The allowed sink is not disturbed by the other's denials.
	if err := deliver(allowed, newMessage(nil), 5*time.Second); err != nil {
		t.Fatalf("Deliver to an allowed subject after a denial: %v", err)
	}
}

func TestSink_BadPassword(t *testing.T) {
	srv := runServer(t, -1, t.TempDir(), func(o *server.Options) {
		o.Users = []*server.User{{Username: "ankusa", Password: "pw"}}
	})
	s := newSink(t, natssink.Options{URL: srv.ClientURL(), Subject: "ankusa.hooks", User: "ankusa", Password: "wrong"})
	err := deliver(s, newMessage(nil), 5*time.Second)
	assertTransient(t, err)
	if !errors.Is(err, natssink.ErrNotConnected) {
		t.Errorf("error %q is not ErrNotConnected", err)
	}
}

func TestSink_ServerMaxPayload(t *testing.T) {
	srv := runServer(t, -1, t.TempDir(), func(o *server.Options) { o.MaxPayload = 2048 })
	js := embeddedJetStream(t, srv.ClientURL())
	st := makeStream(t, js, nil)
	s := newSink(t, natssink.Options{URL: srv.ClientURL(), Subject: st.CachedInfo().Config.Subjects[0]})
	err := deliver(s, newMessage(bytes.Repeat([]byte("x"), 4096)), 5*time.Second)
	assertPermanent(t, err)
	if !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("error %q is not nats.ErrMaxPayload", err)
	}
}

func TestSink_Auth(t *testing.T) {
	userKey, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seedFile := writeFile(t, "user.nk", must(userKey.Seed()))
	opKey, accKey, creds := operatorCreds(t)

	for _, c := range []struct {
		name  string
		srv   func(*testing.T, *server.Options)
		cfg   func(*natssink.Options)
		admin func(*testing.T) nats.Option
	}{
		{
			name:  "user/password",
			srv:   func(_ *testing.T, o *server.Options) { o.Username, o.Password = "ankusa", "pw" },
			cfg:   func(c *natssink.Options) { c.User, c.Password = "ankusa", "pw" },
			admin: func(*testing.T) nats.Option { return nats.UserInfo("ankusa", "pw") },
		},
		{
			name:  "token",
			srv:   func(_ *testing.T, o *server.Options) { o.Authorization = "s3cret" },
			cfg:   func(c *natssink.Options) { c.Token = "s3cret" },
			admin: func(*testing.T) nats.Option { return nats.Token("s3cret") },
		},
		{
			name: "nkey file",
			srv: func(_ *testing.T, o *server.Options) {
				o.Nkeys = []*server.NkeyUser{{Nkey: must(userKey.PublicKey())}}
			},
			cfg: func(c *natssink.Options) { c.NKeyFile = seedFile },
			admin: func(t *testing.T) nats.Option {
				o, err := nats.NkeyOptionFromSeed(seedFile)
				if err != nil {
					t.Fatal(err)
				}
				return o
			},
		},
		{
			name: "creds file",
			srv:  func(t *testing.T, o *server.Options) { operatorMode(t, o, opKey, accKey) },
			cfg:  func(c *natssink.Options) { c.CredsFile = creds },
			admin: func(*testing.T) nats.Option {
				return nats.UserCredentials(creds)
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := runServer(t, -1, t.TempDir(), func(o *server.Options) { c.srv(t, o) })
			js := embeddedJetStream(t, srv.ClientURL(), c.admin(t))
			st := makeStream(t, js, nil)
			cfg := natssink.Options{URL: srv.ClientURL(), Subject: st.CachedInfo().Config.Subjects[0]}
			c.cfg(&cfg)
			s := newSink(t, cfg)
			if err := deliver(s, newMessage(nil), 5*time.Second); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			if n := streamMsgs(t, st); n != 1 {
				t.Fatalf("stream holds %d messages, want 1", n)
			}

			noCreds := newSink(t, natssink.Options{URL: srv.ClientURL(), Subject: cfg.Subject})
			if err := deliver(noCreds, newMessage(nil), 5*time.Second); !errors.Is(err, natssink.ErrNotConnected) {
				t.Fatalf("Deliver without credentials = %v, want ErrNotConnected", err)
			}
		})
	}
}

// operatorCreds makes an operator, an account with JetStream, and a user
// creds file for that account.
func operatorCreds(t *testing.T) (op, acc nkeys.KeyPair, credsFile string) {
	t.Helper()
	op = must(nkeys.CreateOperator())
	acc = must(nkeys.CreateAccount())
	user := must(nkeys.CreateUser())
	uc := jwt.NewUserClaims(must(user.PublicKey()))
	userJWT := must(uc.Encode(acc))
	creds := must(jwt.FormatUserConfig(userJWT, must(user.Seed())))
	return op, acc, writeFile(t, "user.creds", creds)
}

// operatorMode trusts op, with a system account (JetStream needs one), and
// serves the account JWTs from memory.
func operatorMode(t *testing.T, o *server.Options, op, acc nkeys.KeyPair) {
	t.Helper()
	sys := must(nkeys.CreateAccount())
	sysPub := must(sys.PublicKey())
	oc := jwt.NewOperatorClaims(must(op.PublicKey()))
	oc.SystemAccount = sysPub
	o.TrustedOperators = []*jwt.OperatorClaims{oc}
	o.SystemAccount = sysPub

	res := &server.MemAccResolver{}
	ac := jwt.NewAccountClaims(must(acc.PublicKey()))
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	for pub, claims := range map[string]*jwt.AccountClaims{
		must(acc.PublicKey()): ac,
		sysPub:                jwt.NewAccountClaims(sysPub),
	} {
		if err := res.Store(pub, must(claims.Encode(op))); err != nil {
			t.Fatal(err)
		}
	}
	o.AccountResolver = res
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestSink_MaxPayloadWarning: on a server whose max_payload cannot carry
// the edge's largest body after base64 and the envelope, the sink warns
// when it connects, naming both numbers; and the arithmetic it warns with
// is the real one: a body of MaxBodyFor(max_payload) bytes is delivered, a
// body whose base64 alone exceeds max_payload is refused permanently.
func TestSink_MaxPayloadWarning(t *testing.T) {
	const maxPayload = 64 << 10
	srv := runServer(t, -1, t.TempDir(), func(o *server.Options) { o.MaxPayload = maxPayload })
	url := fmt.Sprintf("nats://127.0.0.1:%d", serverPort(t, srv))
	st := makeStream(t, embeddedJetStream(t, url), nil)
	subject := st.CachedInfo().Config.Subjects[0]

	fits := natssink.MaxBodyFor(maxPayload)
	if need := natssink.MessageBytes(fits); need > maxPayload || natssink.MessageBytes(fits+3) <= maxPayload {
		t.Fatalf("MaxBodyFor(%d) = %d is not the largest body whose MessageBytes fits (%d)", maxPayload, fits, need)
	}

	rec := testutil.NewLogRecorder()
	s, err := natssink.New(natssink.Options{URL: url, Subject: subject, Logger: slog.New(rec), MaxBody: fits + 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testutil.Eventually(t, 5*time.Second, "the max_payload warning", func() bool {
		return len(rec.Matching("WARN", "max_payload", "max_payload=65536", fmt.Sprintf("http_max_body_bytes=%d", fits+1),
			fmt.Sprintf("largest_body_carried=%d", fits))) == 1
	})

	if err := deliver(s, newMessage(bytes.Repeat([]byte("a"), int(fits))), 5*time.Second); err != nil {
		t.Fatalf("a body of MaxBodyFor(max_payload) = %d bytes: %v", fits, err)
	}
	assertPermanent(t, deliver(s, newMessage(bytes.Repeat([]byte("a"), maxPayload*3/4+3)), 5*time.Second))
}

// TestSink_DropHeaders: the sink's drop_headers reach its messages: by
// default the credentials are left out, with [] every header is carried.
func TestSink_DropHeaders(t *testing.T) {
	srv := runServer(t, -1, t.TempDir(), nil)
	url := fmt.Sprintf("nats://127.0.0.1:%d", serverPort(t, srv))
	js := embeddedJetStream(t, url)
	for _, c := range []struct {
		name     string
		drop     []string
		wantAuth bool
	}{
		{"default", nil, false},
		{"carry everything", []string{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := makeStream(t, js, nil)
			s := newSink(t, natssink.Options{URL: url, Subject: st.CachedInfo().Config.Subjects[0], DropHeaders: c.drop})
			m := newMessage(nil)
			m.Headers = append(m.Headers, hook.Header{Name: "authorization", Value: "Bearer provider-token"})
			if err := deliver(s, m, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if has := bytes.Contains(got.Data(), []byte(`"authorization"`)); has != c.wantAuth {
				t.Fatalf("authorization carried = %v, want %v: %s", has, c.wantAuth, got.Data())
			}
			if !bytes.Contains(got.Data(), []byte(`"stripe-signature"`)) {
				t.Fatalf("the signature header is not carried: %s", got.Data())
			}
		})
	}
}
