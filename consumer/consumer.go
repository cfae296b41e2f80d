// Package consumer is the receiving side of mqlite: the Source interface that
// the embedded store implements (and the broker's client will), and Loop,
// which runs handlers over a queue.
//
// Delivery is peek-lock and at-least-once: a message is locked for its
// queue's LockDuration with a fresh fencing token, and must be settled with
// that token before the lease ends. Make handlers idempotent.
package consumer

import (
	"context"
	"time"

	"github.com/mqlite/mqlite"
)

// Types shared with the root package, so callers need only this package.
type (
	// Message is a received message; see mqlite.Message.
	Message = mqlite.Message
	// Lock identifies one delivery; see mqlite.Lock.
	Lock = mqlite.Lock
	// ReceiveOptions configures Receive; see mqlite.ReceiveOptions.
	ReceiveOptions = mqlite.ReceiveOptions
	// PeekOptions configures Peek; see mqlite.PeekOptions.
	PeekOptions = mqlite.PeekOptions
	// RenewResult is one lock's outcome of RenewBatch.
	RenewResult = mqlite.RenewResult
)

// Receive modes; see mqlite.ReceiveMode.
const (
	PeekLock         = mqlite.PeekLock
	ReceiveAndDelete = mqlite.ReceiveAndDelete
)

// Source is the consumer side of a queue store. *mqlite.Store implements it;
// so will the broker's Go client, so that the same consumer code, Loop and
// relay run embedded or over the network. Implementations must be safe for
// concurrent use.
type Source interface {
	// Receive claims up to opts.Max messages; see mqlite.Store.Receive.
	Receive(ctx context.Context, queue string, opts ReceiveOptions) ([]Message, error)
	// Complete deletes a delivered message.
	Complete(ctx context.Context, l Lock) error
	// Abandon makes a delivered message claimable again after delay.
	Abandon(ctx context.Context, l Lock, delay time.Duration) error
	// Reject dead-letters a delivered message.
	Reject(ctx context.Context, l Lock, reason, description string) error
	// Defer sets a delivered message aside for ReceiveDeferred.
	Defer(ctx context.Context, l Lock) error
	// ReceiveDeferred locks a deferred message by its sequence number.
	ReceiveDeferred(ctx context.Context, queue string, seq int64) (Message, error)
	// Renew extends a running lease.
	Renew(ctx context.Context, l Lock) (time.Time, error)
	// RenewBatch extends several leases at once.
	RenewBatch(ctx context.Context, locks []Lock) ([]RenewResult, error)
	// Peek reads messages without locking them.
	Peek(ctx context.Context, queue string, opts PeekOptions) ([]Message, error)
}

var _ Source = (*mqlite.Store)(nil)
