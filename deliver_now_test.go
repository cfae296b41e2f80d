package mqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// TestDeliverNowTouchesOnlyItsQueue: DeliverNow on one queue makes that
// queue's scheduled messages due, all of them or the listed ones, and
// leaves the scheduled messages of every other queue as they were, also
// when their seqs are listed.
func TestDeliverNowTouchesOnlyItsQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		seqs func(mine, other []int64) []int64
		want int
	}{
		{"all", func(_, _ []int64) []int64 { return nil }, 2},
		{"listed", func(mine, other []int64) []int64 { return append(mine[:1:1], other...) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := sweepSetup(t)
			ctx := context.Background()
			b.Queue(t, "mine", mqlite.QueueOptions{})
			b.Queue(t, "other", mqlite.QueueOptions{})
			later := outbox.Message{DeliverAt: b.Clock.Now().Add(time.Hour)}
			mine := b.send("mine", later, later)
			other := b.send("other", later, later)
			n, err := b.Store.DeliverNow(ctx, "mine", mqlite.DeliverNowOptions{Seqs: tc.seqs(mine, other)})
			if err != nil || n != tc.want {
				t.Fatalf("DeliverNow: %d, %v; want %d", n, err, tc.want)
			}
			for i, seq := range mine {
				want := mqlite.StateScheduled
				if i < tc.want {
					want = mqlite.StateActive
				}
				b.wantState("mine", seq, want)
			}
			for _, seq := range other {
				b.wantState("other", seq, mqlite.StateScheduled)
			}
			if got := b.receive("other", 10); len(got) != 0 {
				t.Fatalf("received %d messages of the other queue before their moment", len(got))
			}
		})
	}
}
