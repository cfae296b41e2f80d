package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestCompleteBatchGivesEachLockItsOwnResult: one slot's failure (a stale
// token) fails that slot only; a slot already completed, in an earlier
// call or earlier in the batch, replays by its receipt; a lapsed lease
// settles nothing. A small batch leaves completed rows and a large one deletes
// its rows and writes receipts: both replay the same way, to a batch and
// to Complete.
func TestCompleteBatchGivesEachLockItsOwnResult(t *testing.T) {
	for _, extra := range []int{0, 12, 120} {
		t.Run(fmt.Sprintf("%d more", extra), func(t *testing.T) {
			b := openQueue(t)
			ctx := context.Background()
			b.Send(t, "q", make([]outbox.Message, 4+extra)...)
			msgs, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 4 + extra})
			if err != nil || len(msgs) != 4+extra {
				t.Fatalf("received %d, %v", len(msgs), err)
			}
			if err := b.Store.Complete(ctx, msgs[1].Lock()); err != nil {
				t.Fatal(err)
			}
			stale := msgs[2].Lock()
			stale.Token = "00000000000000000000000000000000"
			batch := []mqlite.Lock{msgs[0].Lock(), msgs[1].Lock(), stale, msgs[3].Lock(), msgs[0].Lock()}
			for _, m := range msgs[4:] {
				batch = append(batch, m.Lock())
			}
			res, err := b.Store.CompleteBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				want := error(nil)
				if i == 2 {
					want = mqlite.ErrLockLost
				}
				if !errors.Is(r, want) || (want == nil && r != nil) {
					t.Errorf("slot %d: %v, want %v", i, r, want)
				}
			}
			// A small batch leaves completed rows (with msgs[1]'s, completed
			// alone: 3); a batch of 12 or more deletes its rows (1 left).
			wantCompleted := int64(3)
			if len(batch) >= 12 {
				wantCompleted = 1
			}
			if n := testdb.Int(t, b.Store.DB(), `SELECT count(*) FROM mqlite_messages WHERE state = 'completed'`); n != wantCompleted {
				t.Errorf("%d completed rows after a batch of %d, want %d", n, len(batch), wantCompleted)
			}
			// Every completed slot left a receipt: the same batch replays,
			// and so does each of its completions alone.
			replay := append([]mqlite.Lock{msgs[0].Lock(), msgs[3].Lock()}, batch[5:]...)
			if res, err = b.Store.CompleteBatch(ctx, replay); err != nil {
				t.Fatalf("replay: %v", err)
			}
			for i, r := range res {
				if r != nil {
					t.Errorf("replay slot %d: %v", i, r)
				}
			}
			for _, l := range replay {
				if err := b.Store.Complete(ctx, l); err != nil {
					t.Errorf("replay of %d alone: %v", l.Seq, err)
				}
			}
			// Only the stale slot's message is left; once its lease lapses
			// nothing may settle it.
			b.Clock.Advance(30 * time.Second)
			if res, err = b.Store.CompleteBatch(ctx, []mqlite.Lock{msgs[2].Lock()}); err != nil || !errors.Is(res[0], mqlite.ErrLockLost) {
				t.Fatalf("after the lease: %v, %v; want ErrLockLost", res, err)
			}
			left, err := b.Store.Peek(ctx, "q", mqlite.PeekParams{Max: 1000})
			if err != nil || len(left) != 1 || left[0].Seq != msgs[2].Seq {
				t.Fatalf("left %v, %v; want [%d]", left, err, msgs[2].Seq)
			}
		})
	}
}

// TestCompleteReplayEndsWithItsWindow: a plain Complete retried after it
// succeeded replays from its receipt up to 30 minutes after the
// completion, not a millisecond more, wherever the receipt is: the
// completed row (a completed row), the receipt row the janitor turned it into
// (its window still counted from the completion, not from the janitor's
// pass), or the receipt of a large CompleteBatch, which deletes its rows.
// Inside a transaction (consumer.CompleteTx) the same receipt never
// replays: ErrAlreadySettled while it lives, a plain ErrLockLost after.
func TestCompleteReplayEndsWithItsWindow(t *testing.T) {
	const window = 30 * time.Minute
	ctx := context.Background()
	for _, path := range []string{"completed-row", "janitor", "batch"} {
		t.Run(path, func(t *testing.T) {
			b := openQueue(t)
			b.Send(t, "q", make([]outbox.Message, 12)...)
			msgs, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 12})
			if err != nil || len(msgs) != 12 {
				t.Fatalf("received %d, %v", len(msgs), err)
			}
			m := msgs[0]
			if path == "batch" {
				locks := make([]mqlite.Lock, len(msgs))
				for i, m := range msgs {
					locks[i] = m.Lock()
				}
				res, err := b.Store.CompleteBatch(ctx, locks)
				if err != nil || errors.Join(res...) != nil {
					t.Fatalf("complete batch: %v %v", res, err)
				}
			} else if err := b.Store.Complete(ctx, m.Lock()); err != nil {
				t.Fatal(err)
			}
			var elapsed time.Duration // since the completion
			if path == "janitor" {
				elapsed = window / 2
				b.Clock.Advance(elapsed)
				if _, err := mqlite.RunSweeps(ctx, b.Store); err != nil {
					t.Fatal(err)
				}
			}
			completed := testdb.Int(t, b.Store.DB(), `SELECT count(*) FROM mqlite_messages WHERE state = 'completed'`)
			receipts := testdb.Int(t, b.Store.DB(), `SELECT count(*) FROM mqlite_settlement_receipts WHERE seq = ?`, m.Seq)
			if wantRow := path == "completed-row"; (completed == 1) != wantRow || (receipts == 1) == wantRow {
				t.Fatalf("%d completed rows and %d receipt rows of seq %d, want the receipt in the %s", completed, receipts, m.Seq, path)
			}
			inTx := func() error {
				return b.Store.Tx(ctx, func(tx *mqlite.Tx) error { return consumer.CompleteTx(tx.Context(), tx.SQL(), m.Lock()) })
			}
			b.Clock.Advance(window - elapsed - time.Millisecond)
			if err := b.Store.Complete(ctx, m.Lock()); err != nil {
				t.Fatalf("replay 1 ms before the window ends: %v", err)
			}
			if err := inTx(); !errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Fatalf("CompleteTx 1 ms before the window ends: %v, want ErrAlreadySettled", err)
			}
			b.Clock.Advance(time.Millisecond)
			if err := b.Store.Complete(ctx, m.Lock()); !errors.Is(err, mqlite.ErrLockLost) {
				t.Fatalf("replay when the window ends: %v, want ErrLockLost", err)
			}
			if err := inTx(); !errors.Is(err, mqlite.ErrLockLost) || errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Fatalf("CompleteTx when the window ends: %v, want a plain ErrLockLost", err)
			}
		})
	}
}
