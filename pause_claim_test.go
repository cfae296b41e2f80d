package mqlite_test

import (
	"context"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestCompleteAndReceiveClaimsNothingOnAPausedQueue: on a paused queue,
// CompleteAndReceive (the claim of the broker's stream) still completes
// its locks but claims nothing, with or without locks; once the queue is
// resumed it claims again (the control).
func TestCompleteAndReceiveClaimsNothingOnAPausedQueue(t *testing.T) {
	b := openQueue(t)
	ctx := context.Background()
	locks := sendAndReceive(t, b, 2)
	seqs := b.Send(t, "q", make([]outbox.Message, 3)...)
	if err := b.Store.PauseQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	for _, ls := range [][]mqlite.Lock{locks, nil} {
		res, msgs, err := b.Store.CompleteAndReceive(ctx, "q", ls, mqlite.ReceiveOptions{Max: 10})
		if err != nil || len(msgs) != 0 {
			t.Fatalf("with %d locks on a paused queue: claimed %d, %v; want none", len(ls), len(msgs), err)
		}
		for i, r := range res {
			if r != nil {
				t.Fatalf("completion %d on a paused queue: %v", i, r)
			}
		}
	}
	if tombs, _ := completedRowCounts(t, b); tombs != 2 {
		t.Fatalf("%d completions committed, want 2", tombs)
	}
	for _, seq := range seqs {
		if m := peekSeq(t, b.Store, "q", seq); m.State != mqlite.StateActive || m.DeliveryCount != 0 {
			t.Fatalf("seq %d: %s after %d deliveries, want active and never delivered", seq, m.State, m.DeliveryCount)
		}
	}
	if err := b.Store.ResumeQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, msgs, err := b.Store.CompleteAndReceive(ctx, "q", nil, mqlite.ReceiveOptions{Max: 10}); err != nil || len(testdb.Seqs(msgs)) != len(seqs) {
		t.Fatalf("after resume: claimed %d, %v; want %d", len(msgs), err, len(seqs))
	}
}
