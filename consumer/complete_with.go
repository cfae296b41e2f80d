package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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

// TxStore is a Store that runs a transaction on its store, for LoopTx.
// *mqlite.Store is one. LoopTx commits through TxAndReceive while it claims
// with Receive and through Tx otherwise, so a wrapper that changes one
// changes both.
type TxStore interface {
	Store
	// Tx runs fn in one transaction; see mqlite.Store.Tx.
	Tx(ctx context.Context, fn func(tx *mqlite.Tx) error) error
	// TxAndReceive runs fn in one transaction that also claims up to
	// opts.Max messages of queue once fn succeeded; see
	// mqlite.Store.TxAndReceive. LoopTx commits a step with it, so that
	// the commit that completes a message claims the next.
	TxAndReceive(ctx context.Context, queue string, opts mqlite.ReceiveOptions, fn func(tx *mqlite.Tx) error) ([]mqlite.Message, error)
}

var _ TxStore = (*mqlite.Store)(nil)

// Committer is a Store that commits a step's sends and a completion in
// one request of its own, for LoopTx: the broker's client is one.
type Committer interface {
	Store
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

// CompleteWith completes the delivery l together with what step writes,
// in one commit on src, as LoopTx does for each message: on a
// *mqlite.Store (a TxStore) step runs in the transaction that completes l
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
func CompleteWith(ctx context.Context, src Store, l mqlite.Lock, step TxStep) error {
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

// committerOf is the commitFunc of src: a TxStore's transaction or a
// Committer's request.
func committerOf(src Store) (commitFunc, error) {
	switch s := src.(type) {
	case TxStore:
		return storeCommit(s), nil
	case Committer:
		return committerCommit(s), nil
	}
	return nil, invalid("exactly-once effects need a TxStore (*mqlite.Store) or a Committer (the broker's client), not %T", src)
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
func storeCommit(ts TxStore) commitFunc {
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
