package mqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/mqlitetest"
	"github.com/mqlite/mqlite/outbox"
)

// TestReleaseGivesBackUncounted: Release puts a delivery back at once with
// its delivery count as before the claim, even on the last allowed
// delivery (no dead letter); it keeps a FIFO group's order; it is fenced
// like Abandon (a stale token or a lapsed lease: ErrLockLost, nothing
// changed); a retry of the same Release replays from its receipt.
func TestReleaseGivesBackUncounted(t *testing.T) {
	ctx := context.Background()
	st, clock := mqlitetest.NewStore(t, mqlite.Config{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateQueue(ctx, "q", mqlite.QueueOptions{Ordering: mqlite.FIFO, MaxDeliveryCount: 1, LockDuration: time.Minute}))
	_, err := outbox.Send(ctx, st, "q", outbox.Message{Body: []byte("1"), GroupID: "g"}, outbox.Message{Body: []byte("2"), GroupID: "g"})
	must(err)
	receive := func() mqlite.Message {
		t.Helper()
		msgs, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10})
		must(err)
		if len(msgs) != 1 || string(msgs[0].Body) != "1" {
			t.Fatalf("received %d messages (%v), want the group's head alone", len(msgs), msgs)
		}
		if msgs[0].DeliveryCount != 1 {
			t.Fatalf("delivery count %d at the claim, want 1", msgs[0].DeliveryCount)
		}
		return msgs[0]
	}
	// Released on its only allowed delivery, again and again: never a dead
	// letter, and the group's head each time.
	for range 3 {
		m := receive()
		must(st.Release(ctx, m.Lock()))
		must(st.Release(ctx, m.Lock())) // the same request again: its receipt answers
		if err := st.Abandon(ctx, m.Lock(), 0); !errors.Is(err, mqlite.ErrLockLost) {
			t.Fatalf("Abandon after Release: %v, want ErrLockLost", err)
		}
	}
	left, err := st.Peek(ctx, "q", mqlite.PeekParams{})
	must(err)
	if len(left) != 2 || left[0].State != mqlite.StateActive || left[0].DeliveryCount != 0 {
		t.Fatalf("after the releases: %+v, want 2 messages, the head active with no delivery", left)
	}
	if dead, err := st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{}); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters %d (%v), want none", len(dead), err)
	}

	// The tally counts each release as an Abandon (the replays not again),
	// and the message as active.
	ms, err := st.Metrics(ctx)
	must(err)
	for _, q := range ms {
		if q.Queue == "q" && (q.Counters.Abandoned != 3 || q.Counters.DeadLettered != 0 || q.Active != 2 || q.Locked != 0) {
			t.Fatalf("metrics after the releases: %+v, want 3 abandoned, none dead-lettered, 2 active", q)
		}
	}

	// Fenced: a stale token, then a lapsed lease, change nothing.
	m := receive()
	stale := m.Lock()
	stale.Token = "00000000000000000000000000000000"
	if err := st.Release(ctx, stale); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("Release with a stale token: %v, want ErrLockLost", err)
	}
	clock.Advance(time.Minute) // the lease ends (equal is expired)
	if err := st.Release(ctx, m.Lock()); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("Release of a lapsed lease: %v, want ErrLockLost", err)
	}
	// The lapsed lease was the message's only delivery: the lease's end,
	// not the release, decides (a dead letter once the reaper sees it).
	got, err := st.Peek(ctx, "q", mqlite.PeekParams{})
	must(err)
	for _, g := range got {
		if g.Seq == m.Seq && (g.State != mqlite.StateLocked || g.DeliveryCount != 1) {
			t.Fatalf("after the refused releases: %v with %d deliveries, want still locked with 1", g.State, g.DeliveryCount)
		}
	}
	if err := st.Release(ctx, mqlite.Lock{Queue: "q"}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("Release of an empty lock: %v, want ErrInvalidArgument", err)
	}
}
