package mqlite

import (
	"context"
	"fmt"
	"sync/atomic"
)

// txMark is what Store.Tx puts on the context it hands its callback
// (Tx.Context): which store's connection the transaction holds, and
// whether it still does. A call of that store made with this context (or
// one derived from it) while the transaction is open would wait for the
// connection the transaction holds, for ever: ready refuses it at once.
// A call made inside the callback with an unrelated context (say
// context.Background()) cannot be told apart from a call of another
// goroutine, which Go does not identify; it waits for the connection
// until its own ctx ends, like any other call.
type txMark struct {
	store *Store
	open  atomic.Bool
}

type txMarkKey struct{}

// markTx returns ctx carrying m.
func markTx(ctx context.Context, m *txMark) context.Context {
	return context.WithValue(ctx, txMarkKey{}, m)
}

// ready is the preamble of every Store call that uses the connection:
// ErrClosed once Close has begun, ErrInsideTx for a ctx of an open Store.Tx
// of this store.
func (s *Store) ready(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if m, ok := ctx.Value(txMarkKey{}).(*txMark); ok && m.store == s && m.open.Load() {
		return fmt.Errorf("%w: use the transaction's SQL(), or call the store after Tx returns", ErrInsideTx)
	}
	return nil
}
