package mqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestHandoffFailedCommitHandsNothing: a group whose COMMIT fails (the
// store closes inside it: the commit is refused) hands the claim it made
// for a sleeping Receive to nobody: the claim was rolled back with the
// rest, and a Receive given it would hold a lock the file never had. The
// Receive stays registered, and nothing of the send is in the file.
func TestHandoffFailedCommitHandsNothing(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{BusyTimeout: 10 * time.Millisecond})
	b.Queue(t, "q", mqlite.QueueOptions{LockDuration: handoffLease})
	st := b.Store
	leave := mqlite.WaitHandoff(st, "q", mqlite.ReceiveOptions{Max: 10})
	err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
		if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("never committed")}); err != nil {
			return err
		}
		_ = st.Close() // the connection is the group's: Close returns after BusyTimeout, the commit is refused
		return nil
	})
	if !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("Tx: %v, want ErrClosed (the refused commit)", err)
	}
	if n := mqlite.HandoffWaiters(st); n != 1 {
		t.Errorf("%d Receives registered after the failed commit, want 1 still sleeping", n)
	}
	if got := leave(); len(got) != 0 {
		t.Errorf("the failed commit handed %d messages (seq %d, %s) to the sleeping Receive, want none", len(got), got[0].Seq, got[0].State)
	}
	st2 := testdb.OpenPath(t, b.Path, mqlite.Config{}).Store
	if n := testdb.Int(t, st2.DB(), `SELECT count(*) FROM mqlite_messages`); n != 0 {
		t.Errorf("%d messages in the file after the refused commit, want 0", n)
	}
}

// TestInTxWaitHonoursDeadline: while a transaction of Store.Tx holds the
// store's connection, InTx (on st.DB() and on sqlx) with a short deadline
// returns context.DeadlineExceeded while the holder still holds it, and
// its fn never runs; the holder then commits.
func TestInTxWaitHonoursDeadline(t *testing.T) {
	t.Parallel()
	for name, run := range txRunners {
		if name == "Store.Tx" {
			continue // TestStoreCallWaitHonoursDeadline
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, ctx := txBundle(t).Store, context.Background()
			holding, release := make(chan struct{}), make(chan struct{})
			held := make(chan error, 1)
			go func() {
				held <- st.Tx(ctx, func(*mqlite.Tx) error {
					close(holding)
					<-release
					return nil
				})
			}()
			<-holding
			callCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			ran := false
			done := make(chan error, 1)
			go func() {
				done <- run(callCtx, st, func(context.Context, *sql.Tx) error { ran = true; return nil })
			}()
			var err error
			late := false
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				late = true
				close(release) // InTx waits past its deadline: let go so it ends
				err = <-done
			}
			if !late {
				close(release)
			}
			if late || !errors.Is(err, context.DeadlineExceeded) || ran {
				t.Errorf("InTx while Store.Tx holds the connection: %v (waited past its deadline until the holder let go: %v, fn ran: %v), want context.DeadlineExceeded at once", err, late, ran)
			}
			if err := <-held; err != nil {
				t.Fatalf("holder: %v", err)
			}
		})
	}
}

// TestStoreCallInsideAnotherStoresTx: a store call made with the context
// of another store's Store.Tx callback is not refused (that transaction
// holds the other store's connection, not this one's) and works; the
// control, the same call with the context of this store's own Tx, is
// refused with ErrInsideTx.
func TestStoreCallInsideAnotherStoresTx(t *testing.T) {
	t.Parallel()
	st, other := testdb.OpenQueue(t, "q", mqlite.QueueOptions{}).Store, testdb.Open(t, mqlite.Config{}).Store
	ctx := context.Background()
	err := other.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := st.GetQueue(tx.Context(), "q"); err != nil {
			return err
		}
		_, err := outbox.Send(tx.Context(), st, "q", outbox.Message{Body: []byte("from inside another store's Tx")})
		return err
	})
	if err != nil {
		t.Fatalf("calls on st inside a Tx of another store: %v, want them to work", err)
	}
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM mqlite_messages WHERE queue = 'q'`); n != 1 {
		t.Errorf("%d messages on st, want the 1 sent", n)
	}
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := st.GetQueue(tx.Context(), "q")
		return err
	})
	if !errors.Is(err, mqlite.ErrInsideTx) {
		t.Errorf("control: a call on st inside st's own Tx: %v, want ErrInsideTx", err)
	}
}

// TestReceiversIgnoreRolledBackCallerTx: a settlement made inside the
// caller's own transaction (DB().BeginTx, sqlx) that rolls back leaves the
// delivery held in Store.Receivers, also after the store's next commit
// (which must not apply what the rolled-back transaction recorded); the
// control commits the same settlement, and the registry forgets the lock.
func TestReceiversIgnoreRolledBackCallerTx(t *testing.T) {
	t.Parallel()
	begins := map[string]func(st *mqlite.Store) func(ctx context.Context) (*sql.Tx, func() error, func() error, error){
		"DB().BeginTx": func(st *mqlite.Store) func(ctx context.Context) (*sql.Tx, func() error, func() error, error) {
			return func(ctx context.Context) (*sql.Tx, func() error, func() error, error) {
				tx, err := st.DB().BeginTx(ctx, nil)
				if err != nil {
					return nil, nil, nil, err
				}
				return tx, tx.Commit, tx.Rollback, nil
			}
		},
		"sqlx": func(st *mqlite.Store) func(ctx context.Context) (*sql.Tx, func() error, func() error, error) {
			return func(ctx context.Context) (*sql.Tx, func() error, func() error, error) {
				tx, err := sqlx.NewDb(st.DB(), "sqlite").BeginTxx(ctx, nil)
				if err != nil {
					return nil, nil, nil, err
				}
				return tx.Tx, tx.Commit, tx.Rollback, nil
			}
		},
	}
	for name, begin := range begins {
		for _, commit := range []bool{false, true} {
			t.Run(name+map[bool]string{false: " rolled back", true: " control: committed"}[commit], func(t *testing.T) {
				t.Parallel()
				st, ctx := testdb.OpenQueue(t, "q", mqlite.QueueOptions{LockDuration: time.Minute}).Store, context.Background()
				sendCommitted(t, st, "q", outbox.Message{Body: []byte("a")})
				got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{})
				if err != nil || len(got) != 1 {
					t.Fatalf("receive: %d, %v", len(got), err)
				}
				tx, commitTx, rollbackTx, err := begin(st)(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := consumer.CompleteTx(ctx, tx, got[0].Lock()); err != nil {
					_ = rollbackTx()
					t.Fatalf("CompleteTx: %v", err)
				}
				end := rollbackTx
				if commit {
					end = commitTx
				}
				if err := end(); err != nil {
					t.Fatalf("end the transaction: %v", err)
				}
				// The store's next commit must not apply the rolled-back settlement.
				sendCommitted(t, st, "q", outbox.Message{Body: []byte("b")})
				want := 1
				if commit {
					want = 0
				}
				if _, locks := mqlite.ReceiversKept(st); locks != want {
					t.Errorf("registry holds %d locks, want %d", locks, want)
				}
				rs, err := st.Receivers(ctx)
				if err != nil || len(rs) != 1 || rs[0].Locks != want {
					t.Errorf("Receivers: %+v, %v; want one receiver holding %d locks", rs, err, want)
				}
			})
		}
	}
}
