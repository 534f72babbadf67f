package ratelimit_test

import (
	"sync/atomic"
	"time"
)

// fakeClock is the injected clock of every test: it moves only when told.
type fakeClock struct {
	base time.Time
	ns   atomic.Int64
}

func newFakeClock() *fakeClock {
	return &fakeClock{base: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time          { return c.base.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
