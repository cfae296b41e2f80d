package consumer

import (
	"context"
	"reflect"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/outbox"
)

// CompleteTx completes the delivery l inside tx, the caller's transaction
// on the store (the shapes outbox.SendOne takes: a *sql.Tx on Store.DB(),
// Store.Tx's tx.SQL(), a *sqlx.Tx, GORM's through gormtx), so that the
// rows the caller wrote in tx and the message's completion commit together
// or not at all: exactly-once effects, with no table of processed ids.
//
// Like Store.Complete it is fenced: it needs the delivery's current token
// and a lease still running at the store's clock when its statement runs
// (the transaction holds the file's one writer, so nothing can claim the
// message between that check and the commit). A lapsed lease or a stale
// token is an error matching mqlite.ErrLockLost: the caller must then roll
// tx back, or its effects commit without the completion (return the error
// from Store.Tx's or mqlite.InTx's callback and they do).
//
// It never replays: a delivery already settled (by another transaction, an
// earlier run of this one that committed, a plain settlement) is an error
// matching mqlite.ErrAlreadySettled, and so ErrLockLost, for as long as
// its receipt lives (about 30 minutes; a plain ErrLockLost after). A
// caller that runs its transaction again after an ambiguous commit error
// gets it and rolls back: its effects never commit twice. Only a plain
// Store.Complete retried answers from the receipt.
//
// What follows a completion (the store's metrics, the registry of
// Store.Receivers, waking receivers when the head of a FIFO group leaves)
// happens when tx commits, never when it rolls back. A transaction on any
// other handle than the store's is mqlite.ErrNotAStore, a malformed lock
// mqlite.ErrInvalidArgument; either way nothing is written and tx stays
// usable. CompleteTx never begins, commits or rolls back tx.
func CompleteTx(ctx context.Context, tx outbox.Execer, l mqlite.Lock) error {
	return settleTx(ctx, tx, l, driver.Settlement{Op: driver.OpComplete})
}

// RejectTx dead-letters the delivery l inside tx with a reason and a
// description (see Store.Reject for their bounds: mqlite.ErrInvalidArgument
// past them), so that what the caller wrote in tx (say, a row recording
// the failure) and the dead letter commit together. It is fenced, refused
// for a delivery already settled (mqlite.ErrAlreadySettled) and bound to
// tx's commit exactly like CompleteTx.
func RejectTx(ctx context.Context, tx outbox.Execer, l mqlite.Lock, reason, description string) error {
	if err := mqlite.ValidateReject(reason, description); err != nil {
		return err
	}
	return settleTx(ctx, tx, l, driver.Settlement{Op: driver.OpReject, Reason: reason, Description: description})
}

// settleTx runs the settlement s of l inside the caller's tx.
func settleTx(ctx context.Context, tx outbox.Execer, l mqlite.Lock, s driver.Settlement) error {
	if tx == nil || reflect.ValueOf(tx).Kind() == reflect.Pointer && reflect.ValueOf(tx).IsNil() {
		return mqlite.ErrNilTx
	}
	if err := l.Validate(); err != nil {
		return err
	}
	s.Queue, s.Seq, s.Token = l.Queue, l.Seq, l.Token
	if s.Op == driver.OpReject {
		s.Worker = mqlite.WorkerOf(ctx)
	}
	return driver.Of(tx).SettleTx(ctx, tx, s)
}
