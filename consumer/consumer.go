// Package consumer is the receiving side of mqlite: the Store interface that
// the embedded store and the broker's client (package client) implement, and
// Loop, which runs handlers over a queue.
//
// Delivery is peek-lock and at-least-once: a message is locked for its
// queue's LockDuration with a fresh fencing token, and must be settled with
// that token before the lease ends. Make handlers idempotent, or, for
// effects in the store's own file, let them commit with the completion:
// LoopTx runs a handler's database step and the message's completion in
// one transaction, and CompleteTx / RejectTx settle inside a transaction
// the caller holds (the shapes outbox.SendOne takes), so an effect is
// committed exactly when its message is settled.
package consumer

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
)

// Store is the consumer side of a queue store. *mqlite.Store implements it,
// and so does the broker's Go client (*client.Client), so that the same
// consumer code, Loop and relay run embedded or over the network. Implementations must be safe for
// concurrent use.
//
// Everything Loop and the relay use of a Store is a method here, none
// found by type assertion: a wrapper that embeds a Store forwards them all,
// and one that does not must write each (a compile error otherwise), so it
// cannot lose batched completions, the clock or the tracer silently. The
// extras a Store may lack are interfaces that Loop or LoopTx names in its
// contract: Streamer (Loop claims with Receive without it) and TxStore or
// Committer (LoopTx refuses a Store that is neither).
type Store interface {
	// Receive claims up to opts.Max messages; see mqlite.Store.Receive.
	Receive(ctx context.Context, queue string, opts mqlite.ReceiveOptions) ([]mqlite.Message, error)
	// Complete settles a delivered message as handled: it leaves the
	// queue for good.
	Complete(ctx context.Context, l mqlite.Lock) error
	// CompleteBatch completes locks in one transaction; each lock gets its
	// own result (nil or an error matching mqlite.ErrLockLost), err is for
	// failures of the whole call. Loop's handlers hand their successes to
	// one completer goroutine that completes what gathered meanwhile in
	// one call, so concurrent handlers share commits.
	CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error)
	// CompleteAndReceive completes locks (all of queue) and claims up to
	// opts.Max messages of queue in one transaction (over the network one
	// round trip); see mqlite.Store.CompleteAndReceive. Loop's completer
	// claims in the call that completes a batch as many messages as the
	// batch frees slots, so a handler finds the next message at hand.
	CompleteAndReceive(ctx context.Context, queue string, locks []mqlite.Lock, opts mqlite.ReceiveOptions) ([]error, []mqlite.Message, error)
	// Abandon makes a delivered message claimable again after delay.
	Abandon(ctx context.Context, l mqlite.Lock, delay time.Duration) error
	// AbandonWithReason is Abandon that keeps reason as the message's
	// LastError; see mqlite.Store.AbandonWithReason. Loop (and so the
	// relay) abandons through it with the handler's error, cut to
	// mqlite.MaxLastErrorLen bytes of UTF-8.
	AbandonWithReason(ctx context.Context, l mqlite.Lock, delay time.Duration, reason string) error
	// Reject dead-letters a delivered message.
	Reject(ctx context.Context, l mqlite.Lock, reason, description string) error
	// Defer sets a delivered message aside for ReceiveDeferred.
	Defer(ctx context.Context, l mqlite.Lock) error
	// ReceiveDeferred locks a deferred message by its sequence number.
	ReceiveDeferred(ctx context.Context, queue string, seq int64) (mqlite.Message, error)
	// Renew extends a running lease.
	Renew(ctx context.Context, l mqlite.Lock) (time.Time, error)
	// RenewBatch extends several leases at once.
	RenewBatch(ctx context.Context, locks []mqlite.Lock) ([]mqlite.RenewResult, error)
	// Peek reads messages without locking them.
	Peek(ctx context.Context, queue string, opts mqlite.PeekParams) ([]mqlite.Message, error)
	// Clock returns the clock the Store's leases are measured by
	// (mqlite.Config.Clock for a store); Loop reads "now" for lease
	// arithmetic from it. nil is the wall clock (mqlite.SystemClock).
	Clock() mqlite.Clock
	// TracerProvider returns the provider of the Store's spans
	// (mqlite.Config.TracerProvider for a store); Loop and the relay record
	// their spans there too. nil is otel.GetTracerProvider().
	TracerProvider() trace.TracerProvider
}

var _ Store = (*mqlite.Store)(nil)

// Releaser is a Store that can give back a delivery its holder never
// started without counting it, as mqlite.Store.Release does. When Loop,
// LoopTx or LoopBatch stop, they release through it the messages they had
// claimed ahead but never handed to a handler, so those keep their
// delivery count and a queue with a low MaxDeliveryCount does not
// dead-letter them (while Loop streams, too: through the Store's own
// Release). A Store that is not a Releaser (a wrapper that embeds a
// Store) gets Abandon with no delay instead, which spends a delivery of
// each. mqlite.Store and the broker's client are Releasers.
type Releaser interface {
	// Release gives back a delivery no code has seen: ready again at once,
	// the delivery not counted; fenced like Abandon.
	Release(ctx context.Context, l mqlite.Lock) error
}

var _ Releaser = (*mqlite.Store)(nil)

// clockOf returns src's clock, or the wall clock.
func clockOf(src Store) mqlite.Clock {
	if c := src.Clock(); c != nil {
		return c
	}
	return mqlite.SystemClock{}
}

// Streamer is a Store that can open a stream of a queue's messages with a
// prefetch window, as the broker's client can: the broker keeps up to the
// window handed out and unsettled, and settlements flow back on the same
// stream while messages flow out. Loop over a Streamer receives and
// settles on a stream of Concurrency+Prefetch messages; when the stream
// breaks it settles what the stream handed out through the Store's own
// calls and opens another. While the Streamer refuses to open a stream (a
// broker whose long-poll slots are taken), Loop claims with Receive, logs
// the refusal once, and tries a stream again after a growing delay.
type Streamer interface {
	// OpenStream opens a stream of queue with a window of window messages.
	OpenStream(ctx context.Context, queue string, window int) (Stream, error)
}

// Stream is an open stream of a Streamer. It must be safe for concurrent use.
type Stream interface {
	// Receive waits for the messages handed out since the last call.
	Receive(ctx context.Context) ([]mqlite.Message, error)
	// CompleteBatch completes locks; each gets its own result.
	CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error)
	// Abandon gives a delivery back, claimable after delay.
	Abandon(ctx context.Context, l mqlite.Lock, delay time.Duration) error
	// Reject dead-letters a delivery.
	Reject(ctx context.Context, l mqlite.Lock, reason, description string) error
	// Release frees the places of deliveries given up without a settlement.
	Release(ctx context.Context, locks ...mqlite.Lock) error
	// Close ends the stream.
	Close() error
}
