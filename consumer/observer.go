package consumer

import (
	"time"

	"github.com/mqlite/mqlite"
)

// Observer receives Loop's events, for metrics. Loop calls it from its own
// goroutines, concurrently: implementations must be safe for concurrent use
// and return quickly. took is how long the handler ran. Embed NopObserver to
// implement only some of the methods.
type Observer interface {
	// Received reports a claim of n messages (n ≥ 1) of queue.
	Received(queue string, n int)
	// Completed reports a handler that succeeded and a Complete that
	// settled its message.
	Completed(m mqlite.Message, took time.Duration)
	// Abandoned reports a message given back, to come again after delay:
	// its handler failed (cause is the error, a *PanicError for a panic),
	// or Loop was stopping (cause is the handler's error, or nil for a
	// message released before its handler started).
	Abandoned(m mqlite.Message, took time.Duration, delay time.Duration, cause error)
	// Rejected reports a message dead-lettered because its handler
	// returned a Permanent error.
	Rejected(m mqlite.Message, took time.Duration, cause error)
	// LockLost reports a delivery whose lease could not be kept (a renewal
	// or the settlement found the lock lost): the message was not settled
	// by this Loop and will be, or has been, delivered again.
	LockLost(m mqlite.Message, err error)
	// SettleFailed reports a settlement that failed for another reason
	// than a lost lock (the store closed, an I/O error). The message comes
	// back when its lease ends.
	SettleFailed(m mqlite.Message, err error)
}

// NopObserver ignores every event. Embed it in an Observer that needs only
// some of the methods.
type NopObserver struct{}

var _ Observer = NopObserver{}

// Received does nothing.
func (NopObserver) Received(string, int) {}

// Completed does nothing.
func (NopObserver) Completed(mqlite.Message, time.Duration) {}

// Abandoned does nothing.
func (NopObserver) Abandoned(mqlite.Message, time.Duration, time.Duration, error) {}

// Rejected does nothing.
func (NopObserver) Rejected(mqlite.Message, time.Duration, error) {}

// LockLost does nothing.
func (NopObserver) LockLost(mqlite.Message, error) {}

// SettleFailed does nothing.
func (NopObserver) SettleFailed(mqlite.Message, error) {}
