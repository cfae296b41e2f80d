package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/tracing"
)

// TxHandler processes one message for LoopTx in two parts: the handler
// itself does the slow work (calls to other services, computing), outside
// any transaction, and returns the database work as a TxStep, which LoopTx
// runs in the transaction that completes the message. A nil step with a
// nil error just completes the message. An error abandons the message for
// a retry after LoopConfig.Backoff, or, wrapped with Permanent,
// dead-letters it, as with Handler; so does an error or a panic of the
// step, after the transaction rolled back. A programming error of either
// dead-letters the message at once and stops LoopTx (see LoopTx). ctx is
// Handler's.
type TxHandler func(ctx context.Context, msg mqlite.Message) (TxStep, error)

// LoopTx is Loop for exactly-once effects: the handler's rows, the
// messages it sends and the message's completion commit in one
// transaction, one commit per message, or none of them does. No table of
// processed ids is needed: a message whose effect committed is completed,
// so it never comes again; one whose transaction rolled back comes again
// with nothing of it written.
//
// For each message LoopTx calls handler outside any transaction; on a nil
// error it stops renewing the lease, opens a transaction on src, runs the
// returned step in it, completes the message inside it (consumer.CompleteTx)
// and commits. The completion checks the lease at its statement: a lease
// that lapsed before (the handler or the step took too long) is
// mqlite.ErrLockLost, the transaction rolls back and the message comes
// again when its lease ends. An error of the step (or a panic) rolls the
// transaction back, then abandons the message with backoff, or
// dead-letters it for a Permanent error.
//
// A programming error is never retried, since every retry would repeat the
// handler's side effects (its call to another service) and fail the same
// way: ErrNoSQL (a step that asks for SQL over the broker), ErrTxEnded,
// mqlite.ErrInsideTx, mqlite.ErrNotAStore and mqlite.ErrNilTx, whether the
// handler, the step or the commit returns it. LoopTx dead-letters that
// message on that delivery (the error is the reason), logs why, stops
// claiming, drains as on a cancelled ctx (the handlers already running
// finish, and their messages settle by the same rules) and returns the
// error. What it can know before the first message it refuses at once
// (mqlite.ErrInvalidArgument): no Store, no handler, bad options, a Store
// that is neither a TxStore nor a Committer; whether a step needs SQL only
// the step knows. A write of the step that the store or the broker refuses
// as invalid (mqlite.ErrInvalidArgument, mqlite.ErrMessageTooLarge), which
// the same step would write again, dead-letters that message at once too,
// and LoopTx goes on with the others.
//
// A commit claims the next message only while LoopTx is not stopping, and
// the message it claimed runs even if LoopTx begins to stop meanwhile: a
// stop gives back no message a commit claimed, so it spends no delivery.
// The messages claimed ahead (Prefetch) and never handed to a handler go
// back as Loop's do: released uncounted on a Releaser (mqlite.Store, the
// broker's client), else abandoned with no delay.
//
// The transaction holds the file's one writer until it commits: every
// other statement of the process waits for it, renewals of the other
// messages included. Do slow work (calls to other services) in the handler,
// never in the step, and keep the step to a few statements. The step runs
// under LoopConfig.SettleTimeout: past it the transaction rolls back
// (ctx's error, the message abandoned). Concurrency runs the handlers in
// parallel; their steps take the writer one at a time.
//
// Over the broker (src a Committer: client.Client) the same handler runs
// unchanged: its step stages its sends in the batch of one commit request
// (POST /v1/commit), which carries the completion too and commits all of
// it in one transaction on the broker's store, or nothing (ErrLockLost for
// a lapsed lease); a retry after a lost reply replays by the batch's
// idempotency key. The step gets no SQL there (SQL is ErrNoSQL), and the
// loop claims with receives, not a stream.
//
// Everything else is Loop's (claims, renewals, draining, Observer).
// src must be a TxStore (*mqlite.Store) or a Committer; another is
// mqlite.ErrInvalidArgument. LoopTx returns nil once ctx is cancelled and
// it drained, or Loop's errors, or a programming error (above).
func LoopTx(ctx context.Context, src Store, queue string, handler TxHandler, opts LoopConfig) error {
	if src == nil {
		return invalid("nil Store")
	}
	if handler == nil {
		return invalid("nil TxHandler")
	}
	commit, err := committerOf(src)
	if err != nil {
		return err
	}
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	return run(ctx, &loop{src: src, queue: queue, txHandler: handler, commitTx: commit, o: o}, o.Concurrency+o.Prefetch)
}

// completeTx runs d's step and completes d in one commit, which also
// claims the next message for d's slot while Loop claims with Receive
// (next: what it claimed). stepErr is the step's own failure (its error,
// its panic, ErrTxEnded): the handler's outcome, to abandon or reject by.
// err is the completion's or the commit's (mqlite.ErrLockLost, a failed
// commit).
//
// A stopping loop claims nothing ahead: the next message would only go
// back, one of its deliveries spent (on MaxDeliveryCount 1 a dead letter).
// claimMu keeps Loop from beginning to stop between the check and the end
// of the commit, so that what the commit claimed was claimed before the
// stop, and d's worker runs it.
func (l *loop) completeTx(ctx context.Context, d *delivery) (next []mqlite.Message, stepErr, err error) {
	l.claimMu.RLock()
	defer l.claimMu.RUnlock()
	claim := 0
	if l.claimOnComplete.Load() && !l.stopping() {
		claim = 1
	}
	next, err = l.commitTx(ctx, d.msg.Lock(), func(ctx context.Context, tx Tx) error {
		if d.step != nil {
			stepErr = l.runStep(ctx, tx, d)
		}
		return stepErr
	}, claim)
	switch {
	case stepErr != nil:
		return nil, stepErr, nil
	case errors.Is(err, ErrTxEnded):
		return nil, err, nil
	}
	return next, nil, err
}

// commitStep settles d, whose TxHandler succeeded, by its commit
// (completeTx). settled reports that d needs nothing more: it completed,
// or its commit failed and the message comes back when its lease ends;
// next is then the message the commit claimed for d's slot, or nil. Else
// err is the step's failure or the commit's refusal, which settle settles
// like a handler's error (a refusal dead-letters d at once).
func (l *loop) commitStep(ctx context.Context, d *delivery, took time.Duration) (next *delivery, settled bool, err error) {
	m := d.msg
	claimed, stepErr, serr := l.completeTx(ctx, d)
	switch {
	case serr != nil && !programmingError(serr) && !refused(serr):
		l.settleFailed(m, "complete", serr)
		return nil, true, nil
	case serr != nil:
		d.stepErr = serr // nothing committed: dead-lettered by settle
		return nil, false, serr
	case stepErr != nil:
		d.stepErr = stepErr // settled by settle like a handler's error
		return nil, false, stepErr
	}
	l.o.Observer.Completed(m, took)
	if len(claimed) == 0 {
		return nil, true, nil
	}
	// The commit claimed the next message for d's slot.
	if d.span != nil {
		tracing.End(d.span, nil)
	}
	l.o.Observer.Received(l.queue, len(claimed))
	next = l.newDelivery(claimed[0]) // the commit claims one at most
	l.renewals.add(next, l.clock.Now())
	return next, true, nil
}

// runStep runs d's step on tx, turning a panic into a *PanicError and a
// transaction ended by the step into ErrTxEnded.
func (l *loop) runStep(ctx context.Context, tx Tx, d *delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = l.panicked("step", r, msgAttrs(d.msg)...)
		}
	}()
	err = d.step(ctx, tx)
	if errors.Is(err, sql.ErrTxDone) {
		err = fmt.Errorf("%w: %w", ErrTxEnded, err)
	}
	return err
}
