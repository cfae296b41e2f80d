package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// receiptWindow is how long a completion replays: about 30 minutes from
// the moment it completed (Store.Complete).
const receiptWindow = 30 * time.Minute

// completedRowCounts returns the completed rows (completed rows) and the
// settlement receipts in b's file.
func completedRowCounts(t *testing.T, b *testdb.Bundle) (completed, receipts int64) {
	t.Helper()
	db := b.Store.DB()
	return testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE state = 'completed'`),
		testdb.Int(t, db, `SELECT count(*) FROM mqlite_settlement_receipts`)
}

// sendAndReceive sends n messages to q and receives them all.
func sendAndReceive(t *testing.T, b *testdb.Bundle, n int) []mqlite.Lock {
	t.Helper()
	b.Send(t, "q", make([]outbox.Message, n)...)
	msgs, err := b.Store.Receive(context.Background(), "q", mqlite.ReceiveOptions{Max: n})
	if err != nil || len(msgs) != n {
		t.Fatalf("received %d of %d: %v", len(msgs), n, err)
	}
	locks := make([]mqlite.Lock, n)
	for i, m := range msgs {
		locks[i] = m.Lock()
	}
	return locks
}

// completeAllInBatch completes locks with one CompleteBatch and returns
// its error or the first slot's.
func completeAllInBatch(t *testing.T, st *mqlite.Store, locks []mqlite.Lock) error {
	t.Helper()
	res, err := st.CompleteBatch(context.Background(), locks)
	if err != nil {
		return err
	}
	for i, r := range res {
		if r != nil {
			return fmt.Errorf("slot %d: %w", i, r)
		}
	}
	return nil
}

// TestCompleteBatchDeletesItsRowsFromTwelve pins the boundary of the bulk
// completion: a batch of 11 leaves 11 completed rows, a batch of 12 or 13
// deletes its rows and writes as many receipts.
func TestCompleteBatchDeletesItsRowsFromTwelve(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n                   int
		completed, receipts int64
	}{
		{11, 11, 0},
		{12, 0, 12},
		{13, 0, 13},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			b := openQueue(t)
			locks := sendAndReceive(t, b, tc.n)
			if err := completeAllInBatch(t, b.Store, locks); err != nil {
				t.Fatal(err)
			}
			tombs, receipts := completedRowCounts(t, b)
			if tombs != tc.completed || receipts != tc.receipts {
				t.Fatalf("a batch of %d left %d completed rows and %d receipts, want %d and %d",
					tc.n, tombs, receipts, tc.completed, tc.receipts)
			}
			if n := testdb.Int(t, b.Store.DB(), `SELECT count(*) FROM mqlite_messages`); n != tc.completed {
				t.Fatalf("%d rows left, want only the %d completed rows", n, tc.completed)
			}
		})
	}
}

// TestCompletionReplaysForItsWindowFromTheCompletion: a completion replays
// until receiptWindow after the moment it completed, not after its lease
// would have ended, whether it left a completed row (Complete, a small batch)
// or a receipt (a batch of 12). The lease here is 10 minutes and the
// completion comes 5 minutes into it.
func TestCompletionReplaysForItsWindowFromTheCompletion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		n        int
		complete func(*testing.T, *mqlite.Store, []mqlite.Lock) error
	}{
		{"Complete", 1, func(t *testing.T, st *mqlite.Store, locks []mqlite.Lock) error {
			return st.Complete(context.Background(), locks[0])
		}},
		{"CompleteBatch of 1", 1, completeAllInBatch},
		{"CompleteBatch of 11", 11, completeAllInBatch},
		{"CompleteBatch of 12", 12, completeAllInBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testdb.OpenQueue(t, "q", mqlite.QueueOptions{LockDuration: 10 * time.Minute})
			locks := sendAndReceive(t, b, tc.n)
			b.Clock.Advance(5 * time.Minute)
			if err := tc.complete(t, b.Store, locks); err != nil {
				t.Fatal(err)
			}
			b.Clock.Advance(receiptWindow - time.Millisecond)
			if err := tc.complete(t, b.Store, locks); err != nil {
				t.Fatalf("replay a millisecond before the window ends: %v", err)
			}
			b.Clock.Advance(time.Millisecond)
			if err := tc.complete(t, b.Store, locks); !errors.Is(err, mqlite.ErrLockLost) {
				t.Fatalf("replay at the end of the window: %v, want ErrLockLost", err)
			}
		})
	}
}

// TestJanitorKeepsTheReplayWindowOfACompletedRow: the receipt the janitor
// turns a completed row into replays until receiptWindow after the completion,
// not after the janitor's pass.
func TestJanitorKeepsTheReplayWindowOfACompletedRow(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{})
	ctx := context.Background()
	locks := sendAndReceive(t, b.Bundle, 1)
	if err := b.Store.Complete(ctx, locks[0]); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(20 * time.Minute)
	b.sweepNow()
	if tombs, receipts := completedRowCounts(t, b.Bundle); tombs != 0 || receipts != 1 {
		t.Fatalf("after the janitor: %d completed rows, %d receipts; want the completed row turned into a receipt", tombs, receipts)
	}
	b.Clock.Advance(receiptWindow - 20*time.Minute - time.Millisecond)
	if err := b.Store.Complete(ctx, locks[0]); err != nil {
		t.Fatalf("replay a millisecond before the window ends: %v", err)
	}
	b.Clock.Advance(time.Millisecond)
	if err := b.Store.Complete(ctx, locks[0]); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("replay at the end of the window from the completion: %v, want ErrLockLost", err)
	}
}

// TestCompletedRowsDoNotBlockAnOrderingChange: a queue whose only rows are
// completed ones holds no messages, so its ordering may change; a message
// still held refuses the change (the control).
func TestCompletedRowsDoNotBlockAnOrderingChange(t *testing.T) {
	b := openQueue(t)
	ctx := context.Background()
	locks := sendAndReceive(t, b, 3)
	if err := b.Store.Complete(ctx, locks[0]); err != nil {
		t.Fatal(err)
	}
	if err := completeAllInBatch(t, b.Store, locks[1:]); err != nil {
		t.Fatal(err)
	}
	if tombs, _ := completedRowCounts(t, b); tombs != 3 {
		t.Fatalf("%d completed rows, want 3", tombs)
	}
	if err := b.Store.UpdateQueue(ctx, "q", mqlite.QueueOptions{Ordering: mqlite.FIFO}); err != nil {
		t.Fatalf("FIFO on a queue of completed rows: %v", err)
	}
	if got := getQueue(t, b.Store, "q").Options.Ordering; got != mqlite.FIFO {
		t.Fatalf("ordering %v, want fifo", got)
	}
	// The completions still replay under the new ordering.
	if err := b.Store.Complete(ctx, locks[0]); err != nil {
		t.Fatalf("replay after the ordering change: %v", err)
	}
	b.Send(t, "q", outbox.Message{})
	if err := b.Store.UpdateQueue(ctx, "q", mqlite.QueueOptions{}); !errors.Is(err, mqlite.ErrInvalidOrdering) {
		t.Fatalf("ordering change with a message held: %v, want ErrInvalidOrdering", err)
	}
}
