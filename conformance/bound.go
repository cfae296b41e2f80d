package conformance

import (
	"testing"

	"github.com/mqlite/mqlite"
)

// wantDeadLetter fails unless seq is a dead letter of queue with reason
// and delivery count.
func (k *kit) wantDeadLetter(queue string, seq int64, reason string, count int) {
	k.t.Helper()
	for _, m := range k.deadLetters(queue) {
		if m.Seq == seq {
			if m.DeadLetterReason != reason || m.DeliveryCount != count {
				k.t.Fatalf("dead letter %d: reason %q count %d, want %q and %d",
					seq, m.DeadLetterReason, m.DeliveryCount, reason, count)
			}
			return
		}
	}
	k.t.Fatalf("seq %d is not a dead letter of %s", seq, queue)
}

// neverBeyond receives from queue and fails if a message comes with a
// delivery count above limit.
func (k *kit) neverBeyond(queue string, limit int) {
	k.t.Helper()
	for _, m := range k.receive(queue, max10) {
		if m.DeliveryCount > limit {
			k.t.Fatalf("seq %d handed out for delivery %d, the limit is %d", m.Seq, m.DeliveryCount, limit)
		}
	}
}

// deliverTimes claims seq of queue n times, abandoning each delivery.
func (k *kit) deliverTimes(queue string, seq int64, n int) {
	k.t.Helper()
	for range n {
		m := k.one(queue, seq)
		k.must(k.st.Abandon(k.ctx, m.Lock(), 0), "abandon")
	}
}

// boundTests: delivery_count grows inside the claim; no path hands a
// message out beyond MaxDeliveryCount (docs/conformance.md, "The delivery
// bound").
var boundTests = []subtest{
	{"AbandonOnLastDeliveryDeadLetters", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 2})
		seq := k.sendN("q", 1)[0]
		k.deliverTimes("q", seq, 2)
		k.none("q")
		k.wantDeadLetter("q", seq, mqlite.ReasonMaxDelivery, 2)
	}},
	{"LeaseEndOnLastDeliveryDeadLetters", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 2})
		seq := k.sendN("q", 1)[0]
		k.one("q", seq)
		k.advance(lease)
		k.one("q", seq)
		k.advance(lease)
		k.none("q")
		k.wantDeadLetter("q", seq, mqlite.ReasonMaxDelivery, 2)
	}},
	// A crash on the last allowed delivery dead-letters the message when
	// the store opens again (or, where leases lapse instead, when its lease
	// ends): a crash and a recovery buy no extra delivery.
	{"CrashBuysNoExtraDelivery", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRestart)
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 2})
		seq := k.sendN("q", 1)[0]
		k.one("q", seq)
		k.restart()
		if h.Features.WithoutReleaseAtOpen != "" {
			k.advance(lease) // the dead process's lease lapses instead
		}
		if m := k.one("q", seq); m.DeliveryCount != 2 {
			t.Fatalf("after the first crash: count %d, want 2", m.DeliveryCount)
		}
		k.restart()
		if h.Features.WithoutReleaseAtOpen != "" {
			k.advance(lease)
		}
		k.none("q")
		k.advance(2 * lease)
		k.none("q")
		k.wantDeadLetter("q", seq, mqlite.ReasonMaxDelivery, 2)
	}},
	// Lowering MaxDeliveryCount below the deliveries an active message
	// already had never hands it out again, and never loses it.
	{"LoweredLimitActive", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 5})
		seq := k.sendN("q", 1)[0]
		k.deliverTimes("q", seq, 3)
		k.update("q", mqlite.QueueOptions{MaxDeliveryCount: 2})
		k.neverBeyond("q", 2)
		k.advance(2 * lease)
		k.neverBeyond("q", 2)
		if len(k.peek("q"))+len(k.deadLetters("q")) != 1 {
			t.Fatal("the message over the lowered limit was lost")
		}
	}},
	// A message locked when the limit is lowered under its count is dead-
	// lettered when that delivery ends, not handed out again.
	{"LoweredLimitLocked", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 5})
		seq := k.sendN("q", 1)[0]
		k.deliverTimes("q", seq, 2)
		m := k.one("q", seq)
		k.update("q", mqlite.QueueOptions{MaxDeliveryCount: 2})
		k.must(k.st.Abandon(k.ctx, m.Lock(), 0), "abandon")
		k.neverBeyond("q", 2)
		k.wantDeadLetter("q", seq, mqlite.ReasonMaxDelivery, 3)
	}},
	// A deferred message whose count reached the (lowered) limit is dead-
	// lettered by ReceiveDeferred, which reports it not found.
	{"LoweredLimitDeferred", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 5})
		seq := k.sendN("q", 1)[0]
		k.deliverTimes("q", seq, 2)
		m := k.one("q", seq)
		k.must(k.st.Defer(k.ctx, m.Lock()), "defer")
		k.update("q", mqlite.QueueOptions{MaxDeliveryCount: 2})
		_, err := k.st.ReceiveDeferred(k.ctx, "q", seq)
		k.wantErr(err, mqlite.ErrMessageNotFound, "receive deferred over the limit")
		k.wantDeadLetter("q", seq, mqlite.ReasonMaxDelivery, 3)
	}},
	// A message deferred on its last allowed delivery is never handed
	// out again.
	{"DeferredOnLastDelivery", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 1})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		k.must(k.st.Defer(k.ctx, m.Lock()), "defer")
		_, err := k.st.ReceiveDeferred(k.ctx, "q", seq)
		k.wantErr(err, mqlite.ErrMessageNotFound, "receive deferred on the last delivery")
		k.wantDeadLetter("q", seq, mqlite.ReasonMaxDelivery, 1)
	}},
}
