package txmark

import (
	"context"
	"errors"
	"testing"
)

// TestInsideStore: a mark of a store's transaction refuses that store,
// while open, and no other; a ctx derived from it too.
func TestInsideStore(t *testing.T) {
	type store struct{ int }
	s, other := &store{1}, &store{2}
	ctx := context.Background()
	if Inside(ctx, s, 1, nil) {
		t.Fatal("unmarked ctx inside")
	}
	marked, end := With(ctx, &Mark{Store: s})
	derived, cancel := context.WithCancel(marked)
	defer cancel()
	if !Inside(marked, s, 1, nil) || !Inside(derived, s, 1, nil) || Inside(marked, other, 2, nil) {
		t.Fatal("mark not recognised")
	}
	end()
	if Inside(marked, s, 1, nil) {
		t.Fatal("ended mark still inside")
	}
}

// TestInsideTx: a mark of InTx asks which store its transaction is on.
func TestInsideTx(t *testing.T) {
	tx := new(int)
	idOf := func(_ context.Context, x any) (int64, error) {
		if x == any(tx) {
			return 7, nil
		}
		return 0, errors.New("on no store")
	}
	marked, end := With(context.Background(), &Mark{Tx: tx})
	defer end()
	if !Inside(marked, "any store", 7, idOf) || Inside(marked, "any store", 8, idOf) {
		t.Fatal("InTx's mark not asked")
	}
	noStore, end2 := With(context.Background(), &Mark{Tx: 42})
	defer end2()
	if Inside(noStore, "any store", 7, idOf) {
		t.Fatal("a transaction on no store is inside")
	}
}
