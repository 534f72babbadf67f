package natsclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestDenials(t *testing.T) {
	d := NewDenials()
	ctx, stop := d.Watch(context.Background())
	defer stop()

	violation := func(text string) error { return fmt.Errorf("%w %s", nats.ErrPermissionViolation, text) }
	for _, err := range []error{
		errors.New(`publish to "a.b"`),         // not a violation
		violation(`for Subscription to "a.b"`), // not a publish
		violation(`for Publish to "a.c"`),      // another subject
		violation(`for Publish to "a.b.c"`),    // a longer one
	} {
		if d.Observe(err, "a.b") {
			t.Errorf("Observe(%v) = true", err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the watch ended without a denial")
	}
	if !d.Observe(violation(`for Publish to "a.b"`), "a.b") {
		t.Fatal("Observe missed the denial")
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end at the denial")
	}
	if !errors.Is(context.Cause(ctx), ErrDenied) || !IsPermissionDenied(ctx, context.Canceled) {
		t.Errorf("cause = %v, want ErrDenied recognised", context.Cause(ctx))
	}

	// A watch begun after the denial waits for the next one.
	ctx2, stop2 := d.Watch(context.Background())
	defer stop2()
	if ctx2.Err() != nil {
		t.Error("a new watch saw an old denial")
	}
}

func TestIsConditions(t *testing.T) {
	bg := context.Background()
	for _, tc := range []struct {
		name string
		is   func(error) bool
		yes  []error
		no   []error
	}{
		{"IsPermissionDenied", func(err error) bool { return IsPermissionDenied(bg, err) },
			[]error{nats.ErrPermissionViolation, fmt.Errorf("x: %w", ErrDenied)},
			[]error{nats.ErrTimeout, nats.ErrAuthorization}},
		{"IsMaxPayload", IsMaxPayload, []error{nats.ErrMaxPayload}, []error{nats.ErrBadHeaderMsg}},
		{"IsNoResponders", IsNoResponders, []error{nats.ErrNoResponders}, []error{nats.ErrTimeout}},
		{"IsTimeout", IsTimeout, []error{nats.ErrTimeout, context.DeadlineExceeded}, []error{context.Canceled}},
		{"IsDisconnected", IsDisconnected,
			[]error{nats.ErrConnectionClosed, nats.ErrDisconnected, nats.ErrConnectionDraining, nats.ErrHeadersNotSupported},
			[]error{nats.ErrNoServers, nats.ErrTimeout}},
	} {
		for _, err := range tc.yes {
			if !tc.is(err) {
				t.Errorf("%s(%v) = false", tc.name, err)
			}
		}
		for _, err := range tc.no {
			if tc.is(err) {
				t.Errorf("%s(%v) = true", tc.name, err)
			}
		}
	}
}

func TestAuthOptions(t *testing.T) {
	for _, tc := range []struct {
		a    Auth
		want string // "" = accepted
	}{
		{Auth{}, ""},
		{Auth{User: "u", Password: "p"}, ""},
		{Auth{Token: "t"}, ""},
		{Auth{Password: "p"}, "password set without user"},
		{Auth{User: "u", Token: "t"}, "at most one"},
		{Auth{CredsFile: "/nonexistent/user.creds"}, "creds_file"},
		{Auth{NKeyFile: "/nonexistent/seed.nk"}, "nkey_file"},
	} {
		_, err := AuthOptions(tc.a)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("AuthOptions(%+v) = %v", tc.a, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("AuthOptions(%+v) = %v, want it to mention %q", tc.a, err, tc.want)
		}
	}
}
