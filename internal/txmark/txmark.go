// Package txmark keeps the re-entry marks of the store's transactions: what
// Store.Tx and InTx put on the context they hand their callback. A call of
// that store made with this context (or one derived from it) while the
// transaction is open would wait for the connection the transaction holds,
// for ever: the store asks Inside and refuses it at once (ErrInsideTx). A
// call made inside the callback with an unrelated context (say
// context.Background()) cannot be told apart from a call of another
// goroutine, which Go does not identify; it waits for the connection until
// its own ctx ends, like any other call.
package txmark

import (
	"context"
	"sync/atomic"
)

// Mark is the mark of one transaction: its store when known, else the
// transaction itself, and whether it is still open.
type Mark struct {
	// Store is the store whose connection the transaction holds (any
	// comparable value naming it); nil when not known (InTx).
	Store any
	// Tx is the transaction of InTx, asked which store it is on (Inside).
	Tx   any
	open atomic.Bool
}

type markKey struct{}

// With returns ctx carrying m, the mark of an open transaction, and the
// func that records its end.
func With(ctx context.Context, m *Mark) (context.Context, func()) {
	m.open.Store(true)
	return context.WithValue(ctx, markKey{}, m), func() { m.open.Store(false) }
}

// Inside reports whether ctx carries the mark of an open transaction on
// the connection of store, whose id is id. A transaction of InTx is asked
// (idOf, the engine's StoreID): it is the caller's, it may be on another
// store or on no store at all (then the question fails: not store).
func Inside(ctx context.Context, store any, id int64, idOf func(ctx context.Context, tx any) (int64, error)) bool {
	m, ok := ctx.Value(markKey{}).(*Mark)
	if !ok || !m.open.Load() {
		return false
	}
	if m.Store != nil {
		return m.Store == store
	}
	got, err := idOf(context.WithoutCancel(ctx), m.Tx)
	return err == nil && got == id
}
