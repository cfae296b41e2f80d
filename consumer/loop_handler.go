package consumer

import (
	"cmp"
	"context"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/tracing"
)

// Handler processes one message. Returning nil completes the message; an
// error abandons it for a retry after LoopConfig.Backoff, or, wrapped with
// Permanent, dead-letters it. A panic is recovered and treated as an error.
//
// ctx is cancelled when the lease cannot be kept (the cause matches
// mqlite.ErrLockLost) and when Loop stops and DrainTimeout passes (the cause is
// ErrDrainTimeout); ctx carries the values of Loop's ctx and, when tracing
// is on, the message's process span (see Loop). Delivery is at-least-once:
// make handlers idempotent.
type Handler func(ctx context.Context, msg mqlite.Message) error

// Loop runs handler over the messages of queue until ctx is cancelled.
//
// It claims messages in batches with Receive, which blocks without polling:
// a commit that makes a message claimable wakes it at once, and so does the
// moment a scheduled or abandoned message falls due or a lease expires. It
// runs the handler on up to opts.Concurrency goroutines, renews each held
// message's lease at half its remaining time, and settles each message by
// the handler's outcome: nil completes it, a Permanent error rejects it to
// the dead letters with the error's text as the reason, any other error or
// a panic abandons it for a retry after opts.Backoff.Delay(DeliveryCount).
// A delivery whose lease is lost has its handler's ctx cancelled (the cause
// matches mqlite.ErrLockLost) and is not settled by Loop.
//
// When every handler call fails (a downstream outage), Loop keeps cycling
// with backoff: each failed message is abandoned for its delay, taken
// again when it falls due, and dead-lettered once its queue's
// MaxDeliveryCount is spent. A failing handler never stops Loop from
// receiving, embedded or over the broker's stream.
//
// When ctx is cancelled Loop stops claiming and gives back the messages it
// claimed ahead but never handed to a handler: through Release when src is
// a Releaser (mqlite.Store and the broker's client are: each is ready at
// once and the delivery does not count, so even a queue with
// MaxDeliveryCount 1 keeps them), else by Abandon with no delay (each
// spends a delivery, and on its last allowed one becomes a dead letter).
// It lets running handlers finish for up to opts.DrainTimeout, then
// cancels their ctx and abandons with no delay what they still hold
// (those deliveries count). Loop gives back the same way when it stops on
// an error. It waits for every handler to return, so a handler that
// ignores its ctx delays Loop's return, and then returns nil. No goroutine
// of Loop outlives it.
//
// Loop returns early with an error for bad arguments, and when Receive
// fails for good (the store is closed, the queue does not exist), after
// the same drain. Other Receive errors are logged and retried with a
// backoff. A handler error that says the code is wrong rather than the
// moment, the same on every delivery (a programming error: ErrNoSQL,
// ErrTxEnded, mqlite.ErrInsideTx, mqlite.ErrNotAStore, mqlite.ErrNilTx,
// however wrapped), is never retried: Loop dead-letters the message at once
// with the error as its reason, logs why, stops claiming, and returns the
// error after the same drain. The completions of concurrent handlers share
// commits (Store.CompleteBatch). Loop is safe to run several times at
// once, on one queue or many.
//
// When tracing is on (Store.TracerProvider),
// each handler runs inside a "process <queue>" span of kind consumer,
// child of the context the message was sent in (its traceparent property)
// and carried by the handler's ctx; the settlement's span is its child. A
// handler error sets the span's status to Error.
func Loop(ctx context.Context, src Store, queue string, handler Handler, opts LoopConfig) error {
	if src == nil {
		return invalid("nil Store")
	}
	if handler == nil {
		return invalid("nil Handler")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	return run(ctx, &loop{src: src, queue: queue, handler: handler, o: o}, o.Concurrency+o.Prefetch)
}

// handle runs the handler on d and settles d by its outcome, then does the
// same for the message LoopTx's commit of d claimed in d's slot, if any:
// claimed before Loop stopped, it runs even if Loop is stopping now.
func (l *loop) handle(d *delivery) {
	for d != nil {
		d = l.handleOne(d)
	}
}

// handleOne runs the handler on d and settles d by its outcome; it returns
// the delivery LoopTx's commit of d claimed, which holds d's slot, or nil.
func (l *loop) handleOne(d *delivery) (next *delivery) {
	handedOver := false // to the completer, release or next, which free the slot
	defer func() {
		if !handedOver {
			l.slots <- struct{}{}
		}
	}()
	if d.ctx.Err() != nil {
		// The lease was lost while d waited (release leaves it be), or
		// Loop is stopping and its drain already ended (release gives
		// it back).
		handedOver = true
		l.release(d)
		return nil
	}
	ctx, span := l.startProcess(d)
	start := time.Now()
	err := l.call(ctx, d)
	handedOver, next = l.settle(d, err, time.Since(start))
	if span != nil && !handedOver { // the completer ends a span handed over
		tracing.End(span, cmp.Or(err, d.stepErr))
	}
	return next
}

// call runs the handler, turning a panic into a *PanicError.
func (l *loop) call(ctx context.Context, d *delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = l.panicked("handler", r, msgAttrs(d.msg)...)
		}
	}()
	if l.txHandler != nil {
		d.step, err = l.txHandler(ctx, d.msg)
		return err
	}
	return l.handler(ctx, d.msg)
}
