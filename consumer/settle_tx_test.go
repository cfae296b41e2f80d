package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// The settlements inside the caller's transaction: what they leave behind
// when it commits, and that nothing of them stays when it rolls back.

// txBundle is a store with queue "q" and the application's table effects.
type txBundle struct {
	*bundle
}

func setupTx(t *testing.T) txBundle {
	t.Helper()
	b := setup(t, mqlite.QueueOptions{})
	// No key on seq: an effect committed twice shows as two rows.
	_, err := b.Store.DB().ExecContext(ctx, `CREATE TABLE effects (seq INTEGER)`)
	must(t, err)
	return txBundle{b}
}

// claim sends one message to "q" and receives it.
func (b txBundle) claim(t *testing.T) mqlite.Message {
	t.Helper()
	b.Send(t, "q", outbox.Message{})
	msgs, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
	must(t, err)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

// effects is how many effect rows message seq left.
func (b txBundle) effects(t *testing.T, seq int64) int64 {
	t.Helper()
	return testdb.Int(t, b.Store.DB(), `SELECT count(*) FROM effects WHERE seq = ?`, seq)
}

// state is the state of message seq of "q" as Peek sees it, "" when gone.
func (b txBundle) state(t *testing.T, seq int64) mqlite.State {
	t.Helper()
	msgs, err := b.Store.Peek(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	for _, m := range msgs {
		if m.Seq == seq {
			return m.State
		}
	}
	dead, err := b.Store.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	for _, m := range dead {
		if m.Seq == seq {
			return m.State
		}
	}
	return ""
}

// counters returns the Completed and Rejected counts of "q" and the locks
// its receivers hold, from Metrics.
func (b txBundle) counters(t *testing.T) (completed, rejected, locks int64) {
	t.Helper()
	ms, err := b.Store.Metrics(ctx)
	must(t, err)
	for _, m := range ms {
		if m.Queue == "q" {
			return m.Counters.Completed, m.Counters.Rejected, m.Locks
		}
	}
	t.Fatal("no metrics of q")
	return 0, 0, 0
}

// settleIn runs the effect of m and settle in one transaction of the
// store, committing unless rollback is set.
func (b txBundle) settleIn(t *testing.T, m mqlite.Message, settle func(ctx context.Context, tx *sql.Tx) error, rollback bool) error {
	t.Helper()
	errRollback := errors.New("rolled back by the test")
	err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO effects (seq) VALUES (?)`, m.Seq); err != nil {
			return err
		}
		if err := settle(tx.Context(), tx.SQL()); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	if errors.Is(err, errRollback) {
		return nil
	}
	return err
}

// settlements are the two in-transaction settlements, with what each
// leaves: the message's state after the commit, and which counter grows.
var settlements = []struct {
	name     string
	settle   func(ctx context.Context, tx *sql.Tx, l mqlite.Lock) error
	after    mqlite.State
	rejected bool
}{
	{"complete", func(ctx context.Context, tx *sql.Tx, l mqlite.Lock) error {
		return consumer.CompleteTx(ctx, tx, l)
	}, "", false},
	{"reject", func(ctx context.Context, tx *sql.Tx, l mqlite.Lock) error {
		return consumer.RejectTx(ctx, tx, l, "bad", "refused in the transaction")
	}, mqlite.StateDeadLettered, true},
}

func TestSettleTxCommitsWithTheEffect(t *testing.T) {
	t.Parallel()
	for _, tc := range settlements {
		t.Run(tc.name, func(t *testing.T) {
			b := setupTx(t)
			m := b.claim(t)
			if _, _, locks := b.counters(t); locks != 1 {
				t.Fatalf("before: %d locks held, want 1", locks)
			}
			must(t, b.settleIn(t, m, func(ctx context.Context, tx *sql.Tx) error { return tc.settle(ctx, tx, m.Lock()) }, false))
			if got := b.effects(t, m.Seq); got != 1 {
				t.Fatalf("%d effect rows, want 1", got)
			}
			if got := b.state(t, m.Seq); got != tc.after {
				t.Fatalf("state %q, want %q", got, tc.after)
			}
			completed, rejected, locks := b.counters(t)
			if want := map[bool]int64{false: 1, true: 0}[tc.rejected]; completed != want || rejected != 1-want {
				t.Fatalf("counters completed %d rejected %d, want %d and %d", completed, rejected, want, 1-want)
			}
			if locks != 0 {
				t.Fatalf("%d locks held after the commit, want 0", locks)
			}
			// The same settlement again inside a transaction does not
			// replay: the delivery is already settled.
			err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error { return tc.settle(tx.Context(), tx.SQL(), m.Lock()) })
			if !errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Fatalf("the same settlement again: %v, want ErrAlreadySettled", err)
			}
		})
	}
}

// TestSettleTxReRunFindsItSettled: a caller that runs its transaction
// again after the first run committed (say, after an ambiguous commit
// error) gets ErrAlreadySettled from the settlement, which matches
// ErrLockLost, and its effect rows do not commit a second time: at once,
// past the lease, inside one transaction, through mqlite.InTx, and after
// another settlement of the delivery took it (a plain one, or the other
// in-transaction one). Past the receipts' window nothing shows the
// delivery settled: the error is a plain lost lock, still with nothing
// committed.
func TestSettleTxReRunFindsItSettled(t *testing.T) {
	t.Parallel()
	for _, tc := range settlements {
		t.Run(tc.name, func(t *testing.T) {
			b := setupTx(t)
			settle := func(m mqlite.Message) func(ctx context.Context, tx *sql.Tx) error {
				return func(ctx context.Context, tx *sql.Tx) error { return tc.settle(ctx, tx, m.Lock()) }
			}
			// rerun runs m's transaction again and wants it refused, with
			// m's one effect row left.
			rerun := func(what string, m mqlite.Message, want error) {
				t.Helper()
				err := b.settleIn(t, m, settle(m), false)
				if !errors.Is(err, want) || !errors.Is(err, mqlite.ErrLockLost) {
					t.Fatalf("%s: %v, want %v (matching ErrLockLost)", what, err, want)
				}
				if got := b.effects(t, m.Seq); got != 1 {
					t.Fatalf("%s: %d effect rows, want the first run's 1", what, got)
				}
			}

			m := b.claim(t)
			must(t, b.settleIn(t, m, settle(m), false))
			rerun("run again at once", m, mqlite.ErrAlreadySettled)
			b.Clock.Advance(2 * lease)
			rerun("run again past the lease", m, mqlite.ErrAlreadySettled)

			// Twice in one transaction: the second finds the first.
			m = b.claim(t)
			err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
				if err := b.settleEffect(tx, m); err != nil {
					return err
				}
				must(t, tc.settle(tx.Context(), tx.SQL(), m.Lock()))
				if err := b.settleEffect(tx, m); err != nil {
					return err
				}
				return tc.settle(tx.Context(), tx.SQL(), m.Lock())
			})
			if !errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Fatalf("settled twice in one transaction: %v, want ErrAlreadySettled", err)
			}
			if got := b.effects(t, m.Seq); got != 0 {
				t.Fatalf("%d effect rows of the rolled-back transaction, want 0", got)
			}
			if got := b.state(t, m.Seq); got != mqlite.StateLocked {
				t.Fatalf("state %q after the rollback, want locked", got)
			}

			// Through mqlite.InTx on a transaction begun on Store.DB().
			must(t, b.settleIn(t, m, settle(m), false))
			err = mqlite.InTx(ctx, b.Store.DB().BeginTx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO effects (seq) VALUES (?)`, m.Seq); err != nil {
					return err
				}
				return tc.settle(ctx, tx, m.Lock())
			})
			if !errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Fatalf("run again through InTx: %v, want ErrAlreadySettled", err)
			}
			if got := b.effects(t, m.Seq); got != 1 {
				t.Fatalf("InTx: %d effect rows, want the first run's 1", got)
			}

			// Settled by another settlement, plain or in a transaction.
			m = b.claim(t)
			must(t, b.Store.Abandon(ctx, m.Lock(), time.Hour))
			err = b.settleIn(t, m, settle(m), false)
			if !errors.Is(err, mqlite.ErrAlreadySettled) || b.effects(t, m.Seq) != 0 {
				t.Fatalf("after a plain abandon: %v and %d effect rows, want ErrAlreadySettled and none", err, b.effects(t, m.Seq))
			}
			m = b.claim(t)
			other := settlements[0]
			if other.name == tc.name {
				other = settlements[1]
			}
			must(t, b.Store.Tx(ctx, func(tx *mqlite.Tx) error { return other.settle(tx.Context(), tx.SQL(), m.Lock()) }))
			err = b.settleIn(t, m, settle(m), false)
			if !errors.Is(err, mqlite.ErrAlreadySettled) || b.effects(t, m.Seq) != 0 {
				t.Fatalf("after %s in a transaction: %v and %d effect rows, want ErrAlreadySettled and none", other.name, err, b.effects(t, m.Seq))
			}

			// Past the window no receipt is left to tell.
			m = b.claim(t)
			must(t, b.settleIn(t, m, settle(m), false))
			b.Clock.Advance(receiptWindow + time.Second)
			err = b.settleIn(t, m, settle(m), false)
			if !errors.Is(err, mqlite.ErrLockLost) || errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Fatalf("run again past the receipts' window: %v, want a plain ErrLockLost", err)
			}
			if got := b.effects(t, m.Seq); got != 1 {
				t.Fatalf("past the window: %d effect rows, want the first run's 1", got)
			}
		})
	}
}

// receiptWindow is how long a settlement's receipt tells that it was made.
const receiptWindow = 30 * time.Minute

// settleEffect writes m's effect row in tx.
func (b txBundle) settleEffect(tx *mqlite.Tx, m mqlite.Message) error {
	_, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO effects (seq) VALUES (?)`, m.Seq)
	return err
}

func TestSettleTxRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range settlements {
		t.Run(tc.name, func(t *testing.T) {
			b := setupTx(t)
			m := b.claim(t)
			must(t, b.settleIn(t, m, func(ctx context.Context, tx *sql.Tx) error { return tc.settle(ctx, tx, m.Lock()) }, true))
			if got := b.effects(t, m.Seq); got != 0 {
				t.Fatalf("%d effect rows after the rollback, want 0", got)
			}
			if got := b.state(t, m.Seq); got != mqlite.StateLocked {
				t.Fatalf("state %q after the rollback, want locked", got)
			}
			completed, rejected, locks := b.counters(t)
			if completed != 0 || rejected != 0 || locks != 1 {
				t.Fatalf("after the rollback: completed %d rejected %d locks %d, want 0, 0, 1", completed, rejected, locks)
			}
			// The delivery is still held: the store's own Complete takes it.
			must(t, b.Store.Complete(ctx, m.Lock()))
		})
	}
}

func TestSettleTxLockLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// spoil makes m's lock lost and returns the lock to settle with.
		spoil func(t *testing.T, b txBundle, m mqlite.Message) mqlite.Lock
		// state is m's state after the failed settlement.
		state mqlite.State
	}{
		{"lease lapsed", func(t *testing.T, b txBundle, m mqlite.Message) mqlite.Lock {
			b.Clock.Advance(lease)
			return m.Lock()
		}, mqlite.StateActive}, // Peek sees the lapsed lease as over
		{"stale token", func(t *testing.T, b txBundle, m mqlite.Message) mqlite.Lock {
			b.Clock.Advance(lease)
			again, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
			must(t, err)
			if len(again) != 1 || again[0].LockToken == m.LockToken {
				t.Fatalf("second delivery %+v, want one with a new token", again)
			}
			return m.Lock()
		}, mqlite.StateLocked},
	}
	for _, tc := range tests {
		for _, s := range settlements {
			t.Run(tc.name+"/"+s.name, func(t *testing.T) {
				b := setupTx(t)
				m := b.claim(t)
				l := tc.spoil(t, b, m)
				err := b.settleIn(t, m, func(ctx context.Context, tx *sql.Tx) error { return s.settle(ctx, tx, l) }, false)
				if !errors.Is(err, mqlite.ErrLockLost) {
					t.Fatalf("settle: %v, want ErrLockLost", err)
				}
				if got := b.effects(t, m.Seq); got != 0 {
					t.Fatalf("%d effect rows committed, want 0", got)
				}
				if got := b.state(t, m.Seq); got != tc.state {
					t.Fatalf("state %q, want %q", got, tc.state)
				}
			})
		}
	}
}

func TestSettleTxRefusesBadInput(t *testing.T) {
	b := setupTx(t)
	m := b.claim(t)
	other, err := sql.Open("sqlite", b.Path)
	must(t, err)
	defer other.Close()
	foreign := func(ctx context.Context, settle func(tx *sql.Tx) error) error {
		tx, err := other.BeginTx(ctx, nil)
		must(t, err)
		defer tx.Rollback()
		return settle(tx)
	}
	inStore := func(ctx context.Context, settle func(tx *sql.Tx) error) error {
		return b.Store.Tx(ctx, func(tx *mqlite.Tx) error { return settle(tx.SQL()) })
	}
	tests := []struct {
		name string
		in   func(ctx context.Context, settle func(tx *sql.Tx) error) error
		call func(tx *sql.Tx) error
		want error
	}{
		{"complete on another handle", foreign, func(tx *sql.Tx) error { return consumer.CompleteTx(ctx, tx, m.Lock()) }, mqlite.ErrNotAStore},
		{"reject on another handle", foreign, func(tx *sql.Tx) error { return consumer.RejectTx(ctx, tx, m.Lock(), "r", "") }, mqlite.ErrNotAStore},
		{"nil transaction", inStore, func(*sql.Tx) error { return consumer.CompleteTx(ctx, nil, m.Lock()) }, mqlite.ErrNilTx},
		{"nil *sql.Tx", inStore, func(*sql.Tx) error { return consumer.CompleteTx(ctx, (*sql.Tx)(nil), m.Lock()) }, mqlite.ErrNilTx},
		{"no token", inStore, func(tx *sql.Tx) error {
			return consumer.CompleteTx(ctx, tx, mqlite.Lock{Queue: "q", Seq: m.Seq})
		}, mqlite.ErrInvalidArgument},
		{"bad queue name", inStore, func(tx *sql.Tx) error {
			return consumer.CompleteTx(ctx, tx, mqlite.Lock{Queue: "", Seq: m.Seq, Token: m.LockToken})
		}, mqlite.ErrInvalidArgument},
		{"reason not UTF-8", inStore, func(tx *sql.Tx) error {
			return consumer.RejectTx(ctx, tx, m.Lock(), "\xff", "")
		}, mqlite.ErrInvalidArgument},
		{"description too long", inStore, func(tx *sql.Tx) error {
			return consumer.RejectTx(ctx, tx, m.Lock(), "r", string(make([]byte, mqlite.MaxDescriptionLen+1)))
		}, mqlite.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.in(ctx, tc.call); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if got := b.state(t, m.Seq); got != mqlite.StateLocked {
				t.Fatalf("state %q, want locked: nothing written", got)
			}
		})
	}
	// The lock was left alone by every refusal.
	must(t, b.Store.Complete(ctx, m.Lock()))
}

// TestSettleTxWakesTheGroupsNextOnCommitOnly: a receiver waiting on a
// FIFO queue whose head is held gets the next message at once when the
// head's completion inside a transaction commits, and nothing when it
// rolls back.
func TestSettleTxWakesTheGroupsNextOnCommitOnly(t *testing.T) {
	bubble(t, mqlite.QueueOptions{Ordering: mqlite.FIFO}, func(t *testing.T, e *loopEnv) {
		seqs := e.send("head", "next")
		head, err := e.st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
		must(t, err)
		if len(head) != 1 || head[0].Seq != seqs[0] {
			t.Fatalf("received %+v, want the head", head)
		}
		got := make(chan []mqlite.Message, 1)
		go func() {
			msgs, err := e.st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1, Wait: time.Minute})
			if err != nil {
				t.Error(err)
			}
			got <- msgs
		}()
		synctest.Wait() // the receiver waits: the group is held by the head
		errRollback := errors.New("rolled back by the test")
		err = e.st.Tx(ctx, func(tx *mqlite.Tx) error {
			if err := consumer.CompleteTx(tx.Context(), tx.SQL(), head[0].Lock()); err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case msgs := <-got:
			t.Fatalf("a rolled-back completion woke the receiver with %+v", msgs)
		default:
		}
		begin := time.Now()
		must(t, e.st.Tx(ctx, func(tx *mqlite.Tx) error {
			return consumer.CompleteTx(tx.Context(), tx.SQL(), head[0].Lock())
		}))
		synctest.Wait()
		select {
		case msgs := <-got:
			if len(msgs) != 1 || msgs[0].Seq != seqs[1] || time.Since(begin) != 0 {
				t.Fatalf("woke with %+v after %v, want the next at once", msgs, time.Since(begin))
			}
		default:
			t.Fatal("the committed completion did not wake the receiver")
		}
	})
}
