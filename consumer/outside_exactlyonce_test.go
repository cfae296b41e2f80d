package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/mqlitetest"
	"github.com/mqlite/mqlite/outbox"
)

// An outsider's view of CompleteTx and RejectTx, written from their doc
// comments alone: a caller that runs its transaction again after the first
// one committed (the normal thing after an ambiguous commit error) gets
// mqlite.ErrAlreadySettled, which matches mqlite.ErrLockLost, and its
// effect rows never commit twice, whatever shape the transaction has.
// A plain Complete retried still answers from its receipt.

func TestOutsideSettleTxReRun(t *testing.T) {
	type runner func(ctx context.Context, st *mqlite.Store, fn func(ctx context.Context, tx outbox.Execer) error) error
	runners := map[string]runner{
		"Store.Tx": func(ctx context.Context, st *mqlite.Store, fn func(ctx context.Context, tx outbox.Execer) error) error {
			return st.Tx(ctx, func(tx *mqlite.Tx) error { return fn(tx.Context(), tx.SQL()) })
		},
		"InTx": func(ctx context.Context, st *mqlite.Store, fn func(ctx context.Context, tx outbox.Execer) error) error {
			return mqlite.InTx(ctx, st.DB().BeginTx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
		},
		"BeginTx": func(ctx context.Context, st *mqlite.Store, fn func(ctx context.Context, tx outbox.Execer) error) error {
			tx, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := fn(ctx, tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		"sqlx": func(ctx context.Context, st *mqlite.Store, fn func(ctx context.Context, tx outbox.Execer) error) error {
			dbx := sqlx.NewDb(st.DB(), "sqlite")
			return mqlite.InTx(ctx, dbx.BeginTxx, func(ctx context.Context, tx *sqlx.Tx) error { return fn(ctx, tx) })
		},
	}
	settles := map[string]func(ctx context.Context, tx outbox.Execer, l mqlite.Lock) error{
		"CompleteTx": func(ctx context.Context, tx outbox.Execer, l mqlite.Lock) error {
			return consumer.CompleteTx(ctx, tx, l)
		},
		"RejectTx": func(ctx context.Context, tx outbox.Execer, l mqlite.Lock) error {
			return consumer.RejectTx(ctx, tx, l, "bad", "refused by the test")
		},
	}
	for rn, run := range runners {
		for sn, settle := range settles {
			t.Run(rn+"/"+sn, func(t *testing.T) {
				ctx := context.Background()
				st, _ := mqlitetest.NewStore(t, mqlite.Config{})
				mustDo(t, st.CreateQueue(ctx, "in", mqlite.QueueOptions{}))
				_, err := st.DB().ExecContext(ctx, `CREATE TABLE effects (seq INTEGER)`)
				mustDo(t, err)
				_, err = outbox.Send(ctx, st, "in", outbox.Message{Body: []byte("x")})
				mustDo(t, err)
				msgs, err := st.Receive(ctx, "in", mqlite.ReceiveOptions{})
				mustDo(t, err)
				if len(msgs) != 1 {
					t.Fatalf("received %d, want 1", len(msgs))
				}
				l := msgs[0].Lock()
				body := func(ctx context.Context, tx outbox.Execer) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO effects (seq) VALUES (?)`, l.Seq); err != nil {
						return err
					}
					if _, err := outbox.SendOne(ctx, tx, "in", outbox.Message{Body: []byte("onward")}); err != nil {
						return err
					}
					return settle(ctx, tx, l)
				}
				if err := run(ctx, st, body); err != nil {
					t.Fatalf("first run: %v", err)
				}
				for i := range 3 {
					err := run(ctx, st, body)
					if !errors.Is(err, mqlite.ErrAlreadySettled) || !errors.Is(err, mqlite.ErrLockLost) {
						t.Fatalf("re-run %d: %v, want ErrAlreadySettled and ErrLockLost", i, err)
					}
				}
				var n int
				mustDo(t, st.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&n))
				if n != 1 {
					t.Fatalf("%d effect rows, want 1", n)
				}
				s, err := st.Stats(ctx, "in")
				mustDo(t, err)
				if s.Active != 1 {
					t.Fatalf("%d onward messages ready, want 1 (%+v)", s.Active, s)
				}
				if sn == "CompleteTx" {
					// The plain settlement retried answers from the receipt.
					if err := st.Complete(ctx, l); err != nil {
						t.Fatalf("plain Complete after CompleteTx: %v", err)
					}
				}
			})
		}
	}
}

// The plain Complete retried after it succeeded (a lost reply) succeeds
// again; a CompleteTx of that delivery afterwards is already settled.
func TestOutsideCompleteRetryThenCompleteTx(t *testing.T) {
	ctx := context.Background()
	st, _ := mqlitetest.NewStore(t, mqlite.Config{})
	mustDo(t, st.CreateQueue(ctx, "in", mqlite.QueueOptions{}))
	_, err := outbox.Send(ctx, st, "in", outbox.Message{Body: []byte("x")})
	mustDo(t, err)
	msgs, err := st.Receive(ctx, "in", mqlite.ReceiveOptions{})
	mustDo(t, err)
	l := msgs[0].Lock()
	for i := range 3 {
		if err := st.Complete(ctx, l); err != nil {
			t.Fatalf("Complete %d: %v", i, err)
		}
	}
	err = st.Tx(ctx, func(tx *mqlite.Tx) error { return consumer.CompleteTx(tx.Context(), tx.SQL(), l) })
	if !errors.Is(err, mqlite.ErrAlreadySettled) {
		t.Fatalf("CompleteTx after Complete: %v, want ErrAlreadySettled", err)
	}
	// A stale token (a made-up one) is ErrLockLost but not already settled.
	bad := l
	bad.Token = "00000000000000000000000000000000"
	if err := st.Complete(ctx, bad); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("Complete with another token: %v, want ErrLockLost", err)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// outsideOne is a store with queue "in", a table effects, and one claimed
// delivery.
func outsideOne(t *testing.T) (*mqlite.Store, *mqlitetest.Clock, mqlite.Lock) {
	t.Helper()
	ctx := context.Background()
	st, clock := mqlitetest.NewStore(t, mqlite.Config{})
	mustDo(t, st.CreateQueue(ctx, "in", mqlite.QueueOptions{}))
	_, err := st.DB().ExecContext(ctx, `CREATE TABLE effects (seq INTEGER)`)
	mustDo(t, err)
	_, err = outbox.Send(ctx, st, "in", outbox.Message{Body: []byte("x")})
	mustDo(t, err)
	msgs, err := st.Receive(ctx, "in", mqlite.ReceiveOptions{})
	mustDo(t, err)
	return st, clock, msgs[0].Lock()
}

func outsideEffects(t *testing.T, st *mqlite.Store) int {
	t.Helper()
	var n int
	mustDo(t, st.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM effects`).Scan(&n))
	return n
}

// Ten callers complete the same delivery with an effect at once: the store
// groups their transactions into one commit, each in a savepoint. One wins;
// the others are already settled and their effects roll back alone.
func TestOutsideCompleteTxConcurrentGroup(t *testing.T) {
	st, _, l := outsideOne(t)
	ctx := context.Background()
	errs := make([]error, 10)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			errs[i] = st.Tx(ctx, func(tx *mqlite.Tx) error {
				if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO effects (seq) VALUES (?)`, l.Seq); err != nil {
					return err
				}
				return consumer.CompleteTx(tx.Context(), tx.SQL(), l)
			})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, mqlite.ErrAlreadySettled):
			t.Errorf("caller %d: %v, want nil or ErrAlreadySettled", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d callers completed, want 1", won)
	}
	if n := outsideEffects(t, st); n != 1 {
		t.Fatalf("%d effect rows, want 1", n)
	}
}

// Odd orders of settlements around one delivery.
func TestOutsideSettleTxOddOrders(t *testing.T) {
	ctx := context.Background()
	inTx := func(st *mqlite.Store, fn func(ctx context.Context, tx *sql.Tx) error) error {
		return mqlite.InTx(ctx, st.DB().BeginTx, fn)
	}
	t.Run("twice in one transaction", func(t *testing.T) {
		st, _, l := outsideOne(t)
		err := inTx(st, func(ctx context.Context, tx *sql.Tx) error {
			if err := consumer.CompleteTx(ctx, tx, l); err != nil {
				return err
			}
			return consumer.CompleteTx(ctx, tx, l)
		})
		if !errors.Is(err, mqlite.ErrAlreadySettled) {
			t.Fatalf("a second CompleteTx in the same transaction: %v, want ErrAlreadySettled", err)
		}
		// Rolled back whole: the delivery is still the caller's.
		mustDo(t, st.Complete(ctx, l))
	})
	t.Run("rolled back then again", func(t *testing.T) {
		st, _, l := outsideOne(t)
		boom := errors.New("boom")
		err := inTx(st, func(ctx context.Context, tx *sql.Tx) error {
			if err := consumer.CompleteTx(ctx, tx, l); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		err = inTx(st, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (seq) VALUES (?)`, l.Seq); err != nil {
				return err
			}
			return consumer.CompleteTx(ctx, tx, l)
		})
		if err != nil {
			t.Fatalf("CompleteTx after a rolled-back one: %v, want nil", err)
		}
		if n := outsideEffects(t, st); n != 1 {
			t.Fatalf("%d effect rows, want 1", n)
		}
	})
	t.Run("plain Reject retried, then the Tx forms", func(t *testing.T) {
		st, _, l := outsideOne(t)
		for i := range 2 {
			if err := st.Reject(ctx, l, "bad", "d"); err != nil {
				t.Fatalf("Reject %d: %v", i, err)
			}
		}
		for name, settle := range map[string]func(ctx context.Context, tx *sql.Tx) error{
			"CompleteTx": func(ctx context.Context, tx *sql.Tx) error { return consumer.CompleteTx(ctx, tx, l) },
			"RejectTx":   func(ctx context.Context, tx *sql.Tx) error { return consumer.RejectTx(ctx, tx, l, "bad", "d") },
		} {
			err := inTx(st, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO effects (seq) VALUES (?)`, l.Seq); err != nil {
					return err
				}
				return settle(ctx, tx)
			})
			if !errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Errorf("%s after a plain Reject: %v, want ErrAlreadySettled", name, err)
			}
		}
		if n := outsideEffects(t, st); n != 0 {
			t.Fatalf("%d effect rows, want 0", n)
		}
	})
	t.Run("lease lapsed and claimed again", func(t *testing.T) {
		st, clock, l := outsideOne(t)
		clock.Advance(mqlite.DefaultLockDuration + time.Second)
		msgs, err := st.Receive(ctx, "in", mqlite.ReceiveOptions{})
		mustDo(t, err)
		if len(msgs) != 1 {
			t.Fatalf("claimed again: %d messages", len(msgs))
		}
		err = inTx(st, func(ctx context.Context, tx *sql.Tx) error { return consumer.CompleteTx(ctx, tx, l) })
		if !errors.Is(err, mqlite.ErrLockLost) || errors.Is(err, mqlite.ErrAlreadySettled) {
			t.Fatalf("the first delivery's CompleteTx: %v, want ErrLockLost, not already settled", err)
		}
		mustDo(t, inTx(st, func(ctx context.Context, tx *sql.Tx) error { return consumer.CompleteTx(ctx, tx, msgs[0].Lock()) }))
		// The old token after the new delivery completed: lost, and the
		// new one's re-run already settled.
		err = inTx(st, func(ctx context.Context, tx *sql.Tx) error { return consumer.CompleteTx(ctx, tx, l) })
		if !errors.Is(err, mqlite.ErrLockLost) {
			t.Fatalf("the first delivery's CompleteTx after the second completed: %v", err)
		}
		err = inTx(st, func(ctx context.Context, tx *sql.Tx) error { return consumer.CompleteTx(ctx, tx, msgs[0].Lock()) })
		if !errors.Is(err, mqlite.ErrAlreadySettled) {
			t.Fatalf("the second delivery's re-run: %v, want ErrAlreadySettled", err)
		}
	})
	t.Run("re-run past the receipt", func(t *testing.T) {
		st, clock, l := outsideOne(t)
		mustDo(t, inTx(st, func(ctx context.Context, tx *sql.Tx) error { return consumer.CompleteTx(ctx, tx, l) }))
		clock.Advance(2 * time.Hour)
		err := inTx(st, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (seq) VALUES (?)`, l.Seq); err != nil {
				return err
			}
			return consumer.CompleteTx(ctx, tx, l)
		})
		if !errors.Is(err, mqlite.ErrLockLost) {
			t.Fatalf("a re-run past the receipt: %v, want ErrLockLost", err)
		}
		if n := outsideEffects(t, st); n != 0 {
			t.Fatalf("%d effect rows, want 0", n)
		}
	})
}

// CompleteWith on the store: the step's rows and the completion commit
// together; run again, it is already settled and its rows roll back; a
// Store that is neither a TxStore nor a Committer is refused.
func TestOutsideCompleteWithStore(t *testing.T) {
	ctx := context.Background()
	st, _, l := outsideOne(t)
	step := func(ctx context.Context, tx consumer.Tx) error {
		s, err := consumer.SQL(tx)
		if err != nil {
			return err
		}
		_, err = s.ExecContext(ctx, `INSERT INTO effects (seq) VALUES (?)`, l.Seq)
		return err
	}
	mustDo(t, consumer.CompleteWith(ctx, st, l, step))
	for i := range 3 {
		if err := consumer.CompleteWith(ctx, st, l, step); !errors.Is(err, mqlite.ErrAlreadySettled) {
			t.Fatalf("CompleteWith again (%d): %v, want ErrAlreadySettled", i, err)
		}
	}
	if n := outsideEffects(t, st); n != 1 {
		t.Fatalf("%d effect rows, want 1", n)
	}
	if err := consumer.CompleteWith(ctx, onlyStore{st}, l, step); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("CompleteWith on a plain Store: %v, want ErrInvalidArgument", err)
	}
}

// onlyStore hides every method of the store but Store's.
type onlyStore struct{ consumer.Store }
