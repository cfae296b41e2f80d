package mqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Tx is one transaction of Store.Tx. It is not safe for concurrent use.
type Tx struct {
	tx  *sql.Tx
	ctx context.Context
}

// SQL returns the *sql.Tx, for the application's statements and for
// outbox.SendOne / SendBatch.
func (t *Tx) SQL() *sql.Tx { return t.tx }

// Context returns the context to run statements with inside the
// transaction: it carries the values of Store.Tx's ctx but not its
// cancellation, because an interrupted statement must not leave a
// half-finished transaction on the store's only connection. See Store.Tx for
// how cancellation is honoured instead.
func (t *Tx) Context() context.Context { return t.ctx }

// Tx runs fn in one transaction on the store's connection and commits when fn
// returns nil. It rolls back when fn returns an error (which Tx returns),
// when fn panics (the panic is re-raised after the rollback), and when ctx is
// cancelled before the commit, even if fn returned nil: then ctx's error is
// returned and neither the business rows nor the messages exist.
//
// Cancellation contract: statements run with tx.Context(), which is never
// cancelled, so a statement is never interrupted half-way. A callback that
// runs several statements should check ctx.Err() between them and return
// early; Tx cannot stop a callback that keeps running. Tx blocks while
// another goroutine holds the store's connection.
func (s *Store) Tx(ctx context.Context, fn func(tx *Tx) error) (err error) {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	stmtCtx := context.WithoutCancel(ctx)
	sqlTx, err := s.db.BeginTx(stmtCtx, nil)
	if err != nil {
		if s.isClosed() {
			return ErrClosed // Close began while this call waited for the connection
		}
		return fmt.Errorf("begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			// fn panicked: roll back, then let the panic continue.
			_ = sqlTx.Rollback()
		}
	}()
	ferr := fn(&Tx{tx: sqlTx, ctx: stmtCtx})
	done = true
	if ferr != nil {
		return errors.Join(ferr, ignoreDone(sqlTx.Rollback()))
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(err, ignoreDone(sqlTx.Rollback()))
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ignoreDone drops sql.ErrTxDone: a callback may have ended the transaction
// itself.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}
