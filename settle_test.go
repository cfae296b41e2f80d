package mqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// TestCompleteBatchGivesEachLockItsOwnResult: one slot's failure (a stale
// token) fails that slot only; a slot already completed, in an earlier
// call or earlier in the batch, replays by its receipt; a lapsed lease
// settles nothing.
func TestCompleteBatchGivesEachLockItsOwnResult(t *testing.T) {
	b := openQueue(t)
	ctx := context.Background()
	b.Send(t, "q", outbox.Message{}, outbox.Message{}, outbox.Message{}, outbox.Message{})
	msgs, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 4})
	if err != nil || len(msgs) != 4 {
		t.Fatalf("received %d, %v", len(msgs), err)
	}
	if err := b.Store.Complete(ctx, msgs[1].Lock()); err != nil {
		t.Fatal(err)
	}
	stale := msgs[2].Lock()
	stale.Token = "00000000000000000000000000000000"
	res, err := b.Store.CompleteBatch(ctx, []mqlite.Lock{msgs[0].Lock(), msgs[1].Lock(), stale, msgs[3].Lock(), msgs[0].Lock()})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, nil, mqlite.ErrLockLost, nil, nil} {
		if !errors.Is(res[i], want) || (want == nil && res[i] != nil) {
			t.Errorf("slot %d: %v, want %v", i, res[i], want)
		}
	}
	// Every completed slot left a receipt: the same batch replays.
	if res, err = b.Store.CompleteBatch(ctx, []mqlite.Lock{msgs[0].Lock(), msgs[3].Lock()}); err != nil || res[0] != nil || res[1] != nil {
		t.Fatalf("replay: %v, %v", res, err)
	}
	// Only the stale slot's message is left; once its lease lapses nothing
	// may settle it.
	b.Clock.Advance(30 * time.Second)
	if res, err = b.Store.CompleteBatch(ctx, []mqlite.Lock{msgs[2].Lock()}); err != nil || !errors.Is(res[0], mqlite.ErrLockLost) {
		t.Fatalf("after the lease: %v, %v; want ErrLockLost", res, err)
	}
	left, err := b.Store.Peek(ctx, "q", mqlite.PeekParams{})
	if err != nil || len(left) != 1 || left[0].Seq != msgs[2].Seq {
		t.Fatalf("left %v, %v; want [%d]", left, err, msgs[2].Seq)
	}
}
