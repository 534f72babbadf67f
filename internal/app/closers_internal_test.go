package app

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestClosers: the stack runs last pushed first, runs every closer even
// after one failed, joins their errors, and runs each only once.
func TestClosers(t *testing.T) {
	var order []string
	errB, errD := errors.New("b failed"), errors.New("d failed")
	var cl closers
	cl.pushFunc(func() { order = append(order, "a") })
	cl.push(func(context.Context) error { order = append(order, "b"); return errB })
	cl.pushFunc(func() { order = append(order, "c") })
	cl.push(func(context.Context) error { order = append(order, "d"); return errD })

	err := cl.close(context.Background())
	if want := []string{"d", "c", "b", "a"}; !slices.Equal(order, want) {
		t.Fatalf("close order %v, want %v", order, want)
	}
	if !errors.Is(err, errB) || !errors.Is(err, errD) {
		t.Fatalf("close = %v, want both errors", err)
	}
	order = nil
	if err := cl.close(context.Background()); err != nil || len(order) != 0 {
		t.Fatalf("second close ran %v (err %v), want nothing", order, err)
	}
}

// TestClosers_CtxReachesEveryCloser: Stop's deadline bounds the closers
// that wait (the final backup).
func TestClosers_CtxReachesEveryCloser(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "stop")
	var got []any
	var cl closers
	for range 2 {
		cl.push(func(ctx context.Context) error { got = append(got, ctx.Value(key{})); return nil })
	}
	_ = cl.close(ctx)
	if !slices.Equal(got, []any{"stop", "stop"}) {
		t.Fatalf("closers saw %v, want Stop's ctx in both", got)
	}
}
