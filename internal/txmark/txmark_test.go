package txmark

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"testing"

	"modernc.org/sqlite"
)

func init() {
	// The id the engine registers per connection; the tests' file is
	// store 7.
	sqlite.MustRegisterDeterministicScalarFunction("mqlite_store_id", 0,
		func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) { return int64(7), nil })
}

// TestInsideStore: a mark of a store's transaction refuses that store,
// while open, and no other; a ctx derived from it too.
func TestInsideStore(t *testing.T) {
	type store struct{ int }
	s, other := &store{1}, &store{2}
	ctx := context.Background()
	if Inside(ctx, s, 1) {
		t.Fatal("unmarked ctx inside")
	}
	marked, end := With(ctx, &Mark{Store: s})
	derived, cancel := context.WithCancel(marked)
	defer cancel()
	if !Inside(marked, s, 1) || !Inside(derived, s, 1) || Inside(marked, other, 2) {
		t.Fatal("mark not recognised")
	}
	end()
	if Inside(marked, s, 1) {
		t.Fatal("ended mark still inside")
	}
}

// TestInsideTx: a mark of InTx asks its transaction which store it is on.
func TestInsideTx(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	marked, end := With(context.Background(), &Mark{Tx: tx})
	defer end()
	if !Inside(marked, "any store", 7) || Inside(marked, "any store", 8) {
		t.Fatal("InTx's mark not asked")
	}
	noQuerier, end2 := With(context.Background(), &Mark{Tx: 42})
	defer end2()
	if Inside(noQuerier, "any store", 7) {
		t.Fatal("a transaction that cannot be asked is inside")
	}
}
