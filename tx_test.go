package mqlite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// txBundle is a store with a queue "q" and a business table biz.
func txBundle(t *testing.T) *testdb.Bundle {
	t.Helper()
	b := testdb.Open(t, mqlite.Options{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	if _, err := b.Store.DB().Exec(`CREATE TABLE biz (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return b
}

// writeBoth inserts one business row and one message (with its dedup row)
// in tx.
func writeBoth(tx *mqlite.Tx) error {
	if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO biz (v) VALUES ('x')`); err != nil {
		return err
	}
	_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("x"), MessageID: "x"})
	return err
}

func TestTx(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	type panicValue struct{ s string }
	tests := []struct {
		name string
		// end runs after writeBoth; cancel cancels the ctx given to Store.Tx.
		end       func(tx *mqlite.Tx, cancel context.CancelFunc) error
		wantErr   error
		wantPanic any
		wantRows  int64
	}{
		{
			name:     "commit",
			end:      func(*mqlite.Tx, context.CancelFunc) error { return nil },
			wantRows: 1,
		},
		{
			name:    "rollback on error",
			end:     func(*mqlite.Tx, context.CancelFunc) error { return errBoom },
			wantErr: errBoom,
		},
		{
			name: "rollback on panic",
			end: func(*mqlite.Tx, context.CancelFunc) error {
				panic(&panicValue{"kaboom"})
			},
			wantPanic: &panicValue{"kaboom"},
		},
		{
			name: "rollback when ctx is cancelled before commit",
			end: func(tx *mqlite.Tx, cancel context.CancelFunc) error {
				cancel()
				// Statements keep working: tx.Context() is not cancelled.
				if err := tx.Context().Err(); err != nil {
					return err
				}
				return writeBoth(tx)
			},
			wantErr: context.Canceled,
		},
		{
			name: "callback ended the transaction itself",
			end: func(tx *mqlite.Tx, _ context.CancelFunc) error {
				if err := tx.SQL().Rollback(); err != nil {
					return err
				}
				return errBoom
			},
			wantErr: errBoom,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := txBundle(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var err error
			var recovered any
			func() {
				defer func() { recovered = recover() }()
				err = b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
					if err := writeBoth(tx); err != nil {
						t.Errorf("write in tx: %v", err)
					}
					return tc.end(tx, cancel)
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
