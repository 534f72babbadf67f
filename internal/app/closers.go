package app

import (
	"context"
	"errors"
)

// closers is the instance's one cleanup path. New pushes each component's
// close right after the component opened; a failed New runs the stack, and
// Stop runs the same stack, so a component added to New is closed by both
// or by neither (the hand-repeated close chains it replaces forgot the
// intake on some paths and the backup locations on all of them).
//
// The stack runs last-pushed first, so the order components are pushed in
// New IS the shutdown order, read bottom-up. Stop relies on it for the
// drain (see the comment in New above the first push).
type closers []func(ctx context.Context) error

// push adds fn, run before everything pushed earlier.
func (c *closers) push(fn func(ctx context.Context) error) { *c = append(*c, fn) }

// pushFunc adds a close that cannot fail.
func (c *closers) pushFunc(fn func()) {
	c.push(func(context.Context) error { fn(); return nil })
}

// close runs every closer, last pushed first, each once, even after an
// earlier one failed; it returns their errors joined. The stack is empty
// afterwards, so a second close does nothing.
func (c *closers) close(ctx context.Context) error {
	var errs []error
	for i := len(*c) - 1; i >= 0; i-- {
		if err := (*c)[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	*c = nil
	return errors.Join(errs...)
}
