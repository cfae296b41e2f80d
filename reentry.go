package mqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
)

// txMark is what Store.Tx and InTx put on the context they hand their
// callback (Tx.Context): the transaction, the store when known, and whether
// the transaction is still open. A call of that store made with this
// context (or one derived from it) while the transaction is open would wait
// for the connection the transaction holds, for ever: ready refuses it at
// once. A call made inside the callback with an unrelated context (say
// context.Background()) cannot be told apart from a call of another
// goroutine, which Go does not identify; it waits for the connection until
// its own ctx ends, like any other call.
type txMark struct {
	store *Store // nil for InTx, which does not know the store
	tx    any    // InTx's transaction, asked which store it is on
	open  atomic.Bool
}

type txMarkKey struct{}

// storeIDs numbers the stores of the process, for mqlite_store_id().
var storeIDs atomic.Int64

// markTx returns ctx carrying a mark of an open transaction, and the func
// that records its end.
func markTx(ctx context.Context, m *txMark) (context.Context, func()) {
	m.open.Store(true)
	return context.WithValue(ctx, txMarkKey{}, m), func() { m.open.Store(false) }
}

// rowQuerier is what a transaction of InTx needs for ready to ask it which
// store it is on: *sql.Tx and *sqlx.Tx have it.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ready is the preamble of every Store call that uses the connection:
// ErrClosed once Close has begun, ErrInsideTx for a ctx of an open Store.Tx
// or InTx transaction on this store's connection.
func (s *Store) ready(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if m, ok := ctx.Value(txMarkKey{}).(*txMark); ok && m.open.Load() && m.on(ctx, s) {
		return fmt.Errorf("%w: use the transaction's SQL(), or call the store after the transaction", ErrInsideTx)
	}
	return nil
}

// on reports whether m's transaction is on s's connection. A transaction
// of InTx is asked (mqlite_store_id()): it is the caller's, it may be on
// another store or on no store at all (then the question fails: not s).
func (m *txMark) on(ctx context.Context, s *Store) bool {
	if m.store != nil {
		return m.store == s
	}
	q, ok := m.tx.(rowQuerier)
	if !ok {
		return false
	}
	var id int64
	err := q.QueryRowContext(context.WithoutCancel(ctx), "SELECT mqlite_store_id()").Scan(&id)
	return err == nil && id == s.id
}
