package mqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// reopen closes b's store and opens the same file again on the same fake
// clock, with the loops off, as a restarted process would.
func (b *sweepBundle) reopen() {
	b.t.Helper()
	if err := b.Store.Close(); err != nil {
		b.t.Fatalf("close: %v", err)
	}
	st, err := mqlite.Open(context.Background(), b.Path, mqlite.Config{
		Clock: b.Clock, ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1,
	})
	if err != nil {
		b.t.Fatalf("reopen: %v", err)
	}
	b.t.Cleanup(func() { _ = st.Close() })
	b.Store = st
}

// TestRecoveryBelowTheLimit: a lease left by a process that ended goes
// back to active at Open, long before it would expire, and the next
// delivery counts on from it.
func TestRecoveryBelowTheLimit(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{MaxDeliveryCount: 3, LockDuration: time.Hour})
	seq := b.send("q", body("x"))[0]
	if got := b.receive("q", 1); len(got) != 1 || got[0].DeliveryCount != 1 {
		t.Fatalf("first receive: %+v", got)
	}
	b.reopen()
	m := b.wantState("q", seq, mqlite.StateActive)
	if m.DeliveryCount != 1 || m.DeadLetterReason != "" {
		t.Fatalf("recovered: %+v", m)
	}
	got := b.receive("q", 1)
	if len(got) != 1 || got[0].Seq != seq || got[0].DeliveryCount != 2 {
		t.Fatalf("receive after recovery: %+v, want seq %d on delivery 2", got, seq)
	}
	// The old token is dead: the lease it named is gone.
	if err := b.Store.Complete(context.Background(), got[0].Lock()); err != nil {
		t.Fatalf("complete the new delivery: %v", err)
	}
}

// TestRecoveryAtTheLimit: a process that dies holding the last allowed
// delivery leaves a dead letter, not a free extra delivery.
func TestRecoveryAtTheLimit(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{MaxDeliveryCount: 2, LockDuration: time.Hour})
	seq := b.send("q", body("x"))[0]
	first := b.receive("q", 1)
	if err := b.Store.Abandon(context.Background(), first[0].Lock(), 0); err != nil {
		t.Fatal(err)
	}
	if got := b.receive("q", 1); len(got) != 1 || got[0].DeliveryCount != 2 {
		t.Fatalf("last delivery: %+v", got)
	}
	b.Clock.Advance(time.Second)
	b.reopen()
	m := b.wantState("q", seq, mqlite.StateDeadLettered)
	if m.DeadLetterReason != mqlite.ReasonMaxDelivery || m.DeliveryCount != 2 ||
		!m.DeadLetteredAt.Equal(b.Clock.Now()) {
		t.Fatalf("recovered at the limit: %+v", m)
	}
	if got := b.receive("q", 1); len(got) != 0 {
		t.Fatalf("a crash bought a delivery: %+v", got)
	}
}

// TestRecoveryManyQueuesAndFreshFile: recovery handles every queue at once
// and writes nothing on a file without leases.
func TestRecoveryManyQueuesAndFreshFile(t *testing.T) {
	b := sweepSetup(t)
	for _, q := range []string{"a", "b", "c"} {
		b.Queue(t, q, mqlite.QueueOptions{MaxDeliveryCount: 1})
		b.send(q, body(q+"1"), body(q+"2"))
		b.receive(q, 1)
	}
	b.reopen()
	for _, q := range []string{"a", "b", "c"} {
		if n := len(b.deadSeqs(q)); n != 1 {
			t.Errorf("%s: %d dead letters, want 1", q, n)
		}
		msgs, err := b.Store.Peek(context.Background(), q, mqlite.PeekParams{})
		if err != nil || len(msgs) != 1 || msgs[0].State != mqlite.StateActive {
			t.Errorf("%s: %+v %v, want one active message", q, msgs, err)
		}
	}
	// Close checkpoints the WAL away; an Open whose recovery finds no lease
	// starts it again empty.
	b.reopen()
	if size, _ := walState(t, b.Path); size != 0 {
		t.Fatalf("an Open with nothing to recover wrote %d WAL bytes", size)
	}
}
