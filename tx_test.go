package mqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// txBundle is a store with a queue "q" and a business table biz.
func txBundle(t *testing.T) *testdb.Bundle {
	t.Helper()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	if _, err := b.Store.DB().Exec(`CREATE TABLE biz (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return b
}

// writeBoth inserts one business row and one message (with its dedup row)
// in tx.
func writeBoth(tx *mqlite.Tx) error { return writeSQL(tx.Context(), tx.SQL()) }

// writeSQL is writeBoth on a *sql.Tx.
func writeSQL(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO biz (v) VALUES ('x')`); err != nil {
		return err
	}
	_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"), MessageID: "x"})
	return err
}

// txRunners are the three ways to run a transaction on the store, each
// given fn on the *sql.Tx: TestTx holds them to the same rules.
var txRunners = map[string]func(ctx context.Context, st *mqlite.Store, fn func(context.Context, *sql.Tx) error) error{
	"Store.Tx": func(ctx context.Context, st *mqlite.Store, fn func(context.Context, *sql.Tx) error) error {
		return st.Tx(ctx, func(tx *mqlite.Tx) error { return fn(tx.Context(), tx.SQL()) })
	},
	"InTx on st.DB()": func(ctx context.Context, st *mqlite.Store, fn func(context.Context, *sql.Tx) error) error {
		return mqlite.InTx(ctx, st.DB().BeginTx, fn)
	},
	"InTx on sqlx": func(ctx context.Context, st *mqlite.Store, fn func(context.Context, *sql.Tx) error) error {
		dbx := sqlx.NewDb(st.DB(), "sqlite")
		return mqlite.InTx(ctx, dbx.BeginTxx, func(ctx context.Context, tx *sqlx.Tx) error { return fn(ctx, tx.Tx) })
	},
}

func TestTx(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	type panicValue struct{ s string }
	tests := []struct {
		name string
		// end runs after writeBoth; cancel cancels the ctx given to Store.Tx.
		end       func(ctx context.Context, tx *sql.Tx, cancel context.CancelFunc) error
		wantErr   error
		wantPanic any
		wantRows  int64
	}{
		{
			name:     "commit",
			end:      func(context.Context, *sql.Tx, context.CancelFunc) error { return nil },
			wantRows: 1,
		},
		{
			name:    "rollback on error",
			end:     func(context.Context, *sql.Tx, context.CancelFunc) error { return errBoom },
			wantErr: errBoom,
		},
		{
			name: "rollback on panic",
			end: func(context.Context, *sql.Tx, context.CancelFunc) error {
				panic(&panicValue{"kaboom"})
			},
			wantPanic: &panicValue{"kaboom"},
		},
		{
			name: "rollback when ctx is cancelled before commit",
			end: func(ctx context.Context, tx *sql.Tx, cancel context.CancelFunc) error {
				cancel()
				// Statements keep working: the statements' ctx is not cancelled.
				if err := ctx.Err(); err != nil {
					return err
				}
				return writeSQL(ctx, tx)
			},
			wantErr: context.Canceled,
		},
		{
			name: "callback ended the transaction itself",
			end: func(_ context.Context, tx *sql.Tx, _ context.CancelFunc) error {
				if err := tx.Rollback(); err != nil {
					return err
				}
				return errBoom
			},
			wantErr: errBoom,
		},
	}
	for runner, runTx := range txRunners {
		for _, tc := range tests {
			t.Run(runner+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				b := txBundle(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var err error
				var recovered any
				func() {
					defer func() { recovered = recover() }()
					err = runTx(ctx, b.Store, func(ctx context.Context, tx *sql.Tx) error {
						if err := writeSQL(ctx, tx); err != nil {
							t.Errorf("write in tx: %v", err)
						}
						return tc.end(ctx, tx, cancel)
					})
				}()
				if tc.wantPanic != nil {
					p, ok := recovered.(*panicValue)
					if !ok || *p != *tc.wantPanic.(*panicValue) {
						t.Fatalf("recovered %v, want the callback's panic %v", recovered, tc.wantPanic)
					}
				} else if recovered != nil {
					t.Fatalf("unexpected panic: %v", recovered)
				}
				if tc.wantErr == nil && err != nil {
					t.Fatalf("Tx: %v", err)
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("Tx: %v, want %v", err, tc.wantErr)
				}
				if tc.wantErr != nil && err.Error() != tc.wantErr.Error() {
					t.Errorf("Tx error %q carries more than %q", err, tc.wantErr)
				}
				db := b.Store.DB()
				for _, table := range []string{"biz", "mqlite_messages", "mqlite_dedup"} {
					if got := testdb.Int(t, db, `SELECT count(*) FROM `+table); got != tc.wantRows {
						t.Errorf("%s rows = %d, want %d", table, got, tc.wantRows)
					}
				}
				// The connection is free again: another transaction commits.
				if err := b.Store.Tx(context.Background(), writeBoth); err != nil {
					t.Fatalf("Tx after %s: %v", tc.name, err)
				}
			})
		}
	}
}

func TestTxCancelledBeforeStart(t *testing.T) {
	t.Parallel()
	b := txBundle(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := b.Store.Tx(ctx, func(*mqlite.Tx) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Tx: %v, want context.Canceled", err)
	}
	if called {
		t.Fatal("the callback ran on a cancelled ctx")
	}
}

func TestTxContextCarriesValues(t *testing.T) {
	t.Parallel()
	b := txBundle(t)
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		if got := tx.Context().Value(key{}); got != "v" {
			t.Errorf("tx.Context() value = %v, want v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
