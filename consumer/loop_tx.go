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

// Tx is what a TxStep writes through: what it sends commits with the
// message's completion or not at all. Over a *mqlite.Store it is a
// transaction on the file, whose *sql.Tx SQL gives for the application's
// own rows; over the broker's client it is the batch of one commit request
// (client.Batch), which stages the sends and checks them, and has no SQL.
type Tx interface {
	// Send sends msgs to queue (or a topic) with the completion. A message
	// outbox.Message.Validate refuses is its error; so is, in the store, a
	// MessageID that conflicts (mqlite.ErrDuplicateConflict), which over
	// the broker fails the commit instead. Either way, a step that returns
	// the error commits nothing.
	Send(ctx context.Context, queue string, msgs ...outbox.Message) error
}

// ErrNoSQL is SQL's error for a Tx that is not a transaction on the store:
// over the broker a step can only send. It is a programming error: LoopTx
// dead-letters the message at once and stops (see LoopTx).
var ErrNoSQL = errors.New("consumer: no SQL transaction: the step runs over the broker, where it can only send")

// SQL returns the transaction on the store's connection of the Tx LoopTx
// gives a step over a *mqlite.Store, for the application's own rows. Never
// commit or roll it back: LoopTx does (a step that does is ErrTxEnded).
// Over the broker there is none: ErrNoSQL.
func SQL(tx Tx) (*sql.Tx, error) {
	if s, ok := tx.(interface{ SQL() *sql.Tx }); ok {
		return s.SQL(), nil
	}
	return nil, ErrNoSQL
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
// step, after the transaction rolled back. A programming error of either
// dead-letters the message at once and stops LoopTx (see LoopTx). ctx is
// Handler's.
type TxHandler func(ctx context.Context, msg mqlite.Message) (TxStep, error)

// TxSource is a Source that runs a transaction on its store, for LoopTx.
// *mqlite.Store is one. LoopTx commits through TxAndReceive while it claims
// with Receive and through Tx otherwise, so a wrapper that changes one
// changes both.
type TxSource interface {
	Source
	// Tx runs fn in one transaction; see mqlite.Store.Tx.
	Tx(ctx context.Context, fn func(tx *mqlite.Tx) error) error
	// TxAndReceive runs fn in one transaction that also claims up to
	// opts.Max messages of queue once fn succeeded; see
	// mqlite.Store.TxAndReceive. LoopTx commits a step with it, so that
	// the commit that completes a message claims the next.
	TxAndReceive(ctx context.Context, queue string, opts mqlite.ReceiveOptions, fn func(tx *mqlite.Tx) error) ([]mqlite.Message, error)
}

var _ TxSource = (*mqlite.Store)(nil)

// Committer is a Source that commits a step's sends and a completion in
// one request of its own, for LoopTx: the broker's client is one.
type Committer interface {
	Source
	// CommitTx runs step with a Tx that stages its sends, then, unless
	// step failed (its error is CommitTx's, nothing sent), commits them
	// and the completion of l together: nil, or the commit's error
	// (mqlite.ErrLockLost for a lease that lapsed), with nothing
	// committed.
	CommitTx(ctx context.Context, l mqlite.Lock, step TxStep) error
}

// ErrTxEnded is the error of a TxStep that committed or rolled back the
// transaction itself (what a step committed itself stays committed without
// the completion). It is a programming error: LoopTx dead-letters the
// message at once and stops (see LoopTx).
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
// (mqlite.ErrInvalidArgument): no Source, no handler, bad options, a Source
// that is neither a TxSource nor a Committer; whether a step needs SQL only
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
// src must be a TxSource (*mqlite.Store) or a Committer; another is
// mqlite.ErrInvalidArgument. LoopTx returns nil once ctx is cancelled and
// it drained, or Loop's errors, or a programming error (above).
func LoopTx(ctx context.Context, src Source, queue string, handler TxHandler, opts LoopConfig) error {
	if src == nil {
		return invalid("nil Source")
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

// CompleteWith completes the delivery l together with what step writes,
// in one commit on src, as LoopTx does for each message: on a
// *mqlite.Store (a TxSource) step runs in the transaction that completes l
// (consumer.SQL gives its *sql.Tx); on the broker's client (a Committer)
// step stages its sends in the batch of one commit request. Either way the
// result is nil with everything committed, or an error with nothing: step's
// own (ErrTxEnded for a step that ended the transaction itself), or the
// completion's (mqlite.ErrLockLost for a lapsed lease or a stale token).
// The one exception is an error that says the outcome is unknown (the
// client's ErrOutcomeUnknown: the commit may have gone through, its answer
// lost, and the client's retries under the same idempotency key got no
// definite answer before ctx or its retry budget ended): CompleteWith
// again with the same l and a step that stages the same sends answers
// from the commit that went through (nil), or commits now; never twice. A
// src that is neither is mqlite.ErrInvalidArgument. It blocks until the
// commit ends or ctx does.
func CompleteWith(ctx context.Context, src Source, l mqlite.Lock, step TxStep) error {
	if step == nil {
		return invalid("nil TxStep")
	}
	commit, err := committerOf(src)
	if err != nil {
		return err
	}
	_, err = commit(ctx, l, step, 0)
	return err
}

// committerOf is the commitFunc of src: a TxSource's transaction or a
// Committer's request.
func committerOf(src Source) (commitFunc, error) {
	switch s := src.(type) {
	case TxSource:
		return storeCommit(s), nil
	case Committer:
		return committerCommit(s), nil
	}
	return nil, invalid("exactly-once effects need a TxSource (*mqlite.Store) or a Committer (the broker's client), not %T", src)
}

// commitFunc commits step's writes and the completion of l together:
// Committer.CommitTx's contract. With claim above 0 it may claim up to
// claim messages of l's queue in the same commit, after the completion,
// and returns them (a store does; the broker's client claims nothing).
type commitFunc func(ctx context.Context, l mqlite.Lock, step TxStep, claim int) ([]mqlite.Message, error)

// storeCommit is the commitFunc of a store: step, CompleteTx and the claim
// in one transaction (TxAndReceive, whose claim a failed step or
// completion never reaches). A completion that finds the transaction
// ended is the step's doing: ErrTxEnded.
func storeCommit(ts TxSource) commitFunc {
	return func(ctx context.Context, l mqlite.Lock, step TxStep, claim int) ([]mqlite.Message, error) {
		fn := func(tx *mqlite.Tx) error {
			if err := step(tx.Context(), storeTx{tx}); err != nil {
				return err
			}
			err := CompleteTx(tx.Context(), tx.SQL(), l)
			if errors.Is(err, sql.ErrTxDone) {
				return fmt.Errorf("%w: %w", ErrTxEnded, err)
			}
			return err
		}
		if claim == 0 {
			return nil, ts.Tx(ctx, fn)
		}
		return ts.TxAndReceive(ctx, l.Queue, mqlite.ReceiveOptions{Max: claim}, fn)
	}
}

// committerCommit is the commitFunc of a Committer, which claims nothing.
func committerCommit(c Committer) commitFunc {
	return func(ctx context.Context, l mqlite.Lock, step TxStep, _ int) ([]mqlite.Message, error) {
		return nil, c.CommitTx(ctx, l, step)
	}
}

// storeTx is the Tx of a transaction on the store.
type storeTx struct{ tx *mqlite.Tx }

var _ Tx = storeTx{}

// Send sends with outbox.SendBatch on the transaction; a slot's conflict
// is the error.
func (t storeTx) Send(ctx context.Context, queue string, msgs ...outbox.Message) error {
	res, err := outbox.SendBatch(ctx, t.tx.SQL(), queue, msgs)
	if err != nil {
		return err
	}
	for i, r := range res {
		if r.Err != nil {
			return fmt.Errorf("message %d: %w", i, r.Err)
		}
	}
	return nil
}

// SQL returns the *sql.Tx (consumer.SQL).
func (t storeTx) SQL() *sql.Tx { return t.tx.SQL() }

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

// runStep runs d's step on tx, turning a panic into a *PanicError and a
// transaction ended by the step into ErrTxEnded.
func (l *loop) runStep(ctx context.Context, tx Tx, d *delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := debug.Stack()
			err = &PanicError{Value: r, Stack: stack}
			l.log.Error("consumer: step panicked", append(msgAttrs(d.msg), "panic", r, "stack", string(stack))...)
		}
	}()
	err = d.step(ctx, tx)
	if errors.Is(err, sql.ErrTxDone) {
		err = fmt.Errorf("%w: %w", ErrTxEnded, err)
	}
	return err
}
