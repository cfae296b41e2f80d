// Package fakeclock is the fake mqlite.Clock of the project's tests and of
// package mqlitetest: it moves only when told to.
package fakeclock

import (
	"sync"
	"time"
)

// Start is where a new Clock stands: fixed, so tests repeat.
var Start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Clock is a fake mqlite.Clock that moves only when told to. It is safe
// for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Clock set to Start.
func New() *Clock { return &Clock{now: Start} }

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
