package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// Tx is the transaction a TxStep runs in: the one that completes the
// message. What the step writes through it commits with the completion or
// not at all.
type Tx interface {
	// Send stages msgs on queue (or topic) in the transaction; results and
	// errors are outbox.SendBatch's.
	Send(ctx context.Context, queue string, msgs ...outbox.Message) ([]outbox.Result, error)
	// SQL returns the transaction on the store's connection, for the
	// application's own rows. Never commit or roll it back: LoopTx does.
	SQL() *sql.Tx
}

// TxStep is the database work of a TxHandler: LoopTx runs it inside the
// transaction that completes the message, with that transaction's ctx (the
// values of the handler's, no cancellation: see mqlite.Store.Tx).
type TxStep func(ctx context.Context, tx Tx) error

// TxHandler processes one message for LoopTx in two parts: the handler
// itself does the slow work (calls to other services, computing), outside
// any transaction, and returns the database work as a TxStep, which LoopTx
// runs in the transaction that completes the message. A nil step with a
// nil error just completes the message. An error abandons the message for
// a retry after LoopConfig.Backoff, or, wrapped with Permanent,
// dead-letters it, as with Handler; so does an error or a panic of the
// step, after the transaction rolled back. ctx is Handler's.
type TxHandler func(ctx context.Context, msg mqlite.Message) (TxStep, error)

// TxSource is a Source that runs a transaction on its store, for LoopTx.
// *mqlite.Store is one.
type TxSource interface {
	Source
	// Tx runs fn in one transaction; see mqlite.Store.Tx.
	Tx(ctx context.Context, fn func(tx *mqlite.Tx) error) error
}

var _ TxSource = (*mqlite.Store)(nil)

// ErrTxEnded is the error of a TxStep that committed or rolled back the
// transaction itself: the message is abandoned like for any error (what a
// step committed itself stays committed without the completion).
var ErrTxEnded = errors.New("consumer: the step committed or rolled back the transaction LoopTx owns")

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
// again when its lease ends. An error of the step (or a panic, or
// ErrTxEnded) rolls the transaction back, then abandons the message with
// backoff, or dead-letters it for a Permanent error.
//
// The transaction holds the file's one writer until it commits: every
// other statement of the process waits for it, renewals of the other
// messages included. Do slow work (calls to other services) in the handler,
// never in the step, and keep the step to a few statements. The step runs
// under LoopConfig.SettleTimeout: past it the transaction rolls back
// (ctx's error, the message abandoned). Concurrency runs the handlers in
// parallel; their steps take the writer one at a time.
//
// Everything else is Loop's (claims, renewals, draining, Observer).
// src must be a TxSource (*mqlite.Store); another is mqlite.ErrInvalidArgument.
func LoopTx(ctx context.Context, src Source, queue string, handler TxHandler, opts LoopConfig) error {
	if src == nil {
		return invalid("nil Source")
	}
	if handler == nil {
		return invalid("nil TxHandler")
	}
	ts, ok := src.(TxSource)
	if !ok {
		return invalid("LoopTx needs a Source that runs transactions (*mqlite.Store), not %T", src)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	return run(ctx, &loop{src: src, queue: queue, txHandler: handler, txSource: ts, o: o}, o.Concurrency+o.Prefetch)
}

// storeTx is the Tx of a transaction on the store.
type storeTx struct{ tx *mqlite.Tx }

var _ Tx = storeTx{}

// Send sends with outbox.SendBatch on the transaction.
func (t storeTx) Send(ctx context.Context, queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
	return outbox.SendBatch(ctx, t.tx.SQL(), queue, msgs)
}

// SQL returns the *sql.Tx.
func (t storeTx) SQL() *sql.Tx { return t.tx.SQL() }

// completeTx runs d's step and completes d in one transaction. stepErr is
// the step's own failure (its error, its panic, ErrTxEnded): the handler's
// outcome, to abandon or reject by. err is the completion's or the
// transaction's (mqlite.ErrLockLost, a failed commit).
func (l *loop) completeTx(ctx context.Context, d *delivery) (stepErr, err error) {
	err = l.txSource.Tx(ctx, func(tx *mqlite.Tx) error {
		if d.step != nil {
			if stepErr = l.runStep(tx, d); stepErr != nil {
				return stepErr
			}
		}
		cerr := CompleteTx(tx.Context(), tx.SQL(), d.msg.Lock())
		if errors.Is(cerr, sql.ErrTxDone) {
			stepErr = fmt.Errorf("%w: %w", ErrTxEnded, cerr)
			return stepErr
		}
		return cerr
	})
	if stepErr != nil {
		return stepErr, nil
	}
	return nil, err
}

// runStep runs d's step in tx, turning a panic into a *PanicError and a
// transaction ended by the step into ErrTxEnded.
func (l *loop) runStep(tx *mqlite.Tx, d *delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := debug.Stack()
			err = &PanicError{Value: r, Stack: stack}
			l.log.Error("consumer: step panicked", append(msgAttrs(d.msg), "panic", r, "stack", string(stack))...)
		}
	}()
	err = d.step(tx.Context(), storeTx{tx})
	if errors.Is(err, sql.ErrTxDone) {
		err = fmt.Errorf("%w: %w", ErrTxEnded, err)
	}
	return err
}
