package conformance

import (
	"slices"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// prio is a message of priority p with a unique body.
func prio(p int) outbox.Message { return outbox.Message{Priority: p} }

// priorityTests: a claim takes the highest priority first and, within a
// priority, the lowest seq, whether the messages came one by one or in a
// batch; a group keeps its order whatever its members' priorities; a
// priority out of range is refused with nothing written; the priority is
// shown by Peek and kept through an abandon, a dead letter and its
// redrive; a topic's copies keep it.
var priorityTests = []subtest{
	{"HighestFirstThenSeq", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		batch := k.send("q", prio(0), prio(5), prio(mqlite.MaxPriority), prio(5))
		one := k.send("q", prio(mqlite.MaxPriority))[0]
		low := k.send("q", prio(0))[0]
		want := []int64{batch[2], one, batch[1], batch[3], batch[0], low}
		got := k.expect("q", mqlite.ReceiveOptions{Max: 2}, want[:2]...)
		if got[0].Priority != mqlite.MaxPriority || got[1].Priority != mqlite.MaxPriority {
			t.Fatalf("priorities %d and %d, want %d", got[0].Priority, got[1].Priority, mqlite.MaxPriority)
		}
		for _, seq := range want[2:] {
			k.one("q", seq)
		}
		k.none("q")
	}},
	{"NewerHigherOvertakes", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		old := k.sendN("q", 3)
		urgent := k.send("q", prio(1))[0]
		k.expect("q", mqlite.ReceiveOptions{Max: 10}, append([]int64{urgent}, old...)...)
	}},
	{"GroupKeepsItsOrder", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		front := k.send("q", outbox.Message{GroupID: "g", Priority: 0})[0]
		later := k.send("q", outbox.Message{GroupID: "g", Priority: mqlite.MaxPriority})[0]
		free := k.send("q", prio(5))[0]
		// The group's later member waits behind its front, whatever its
		// priority: the claim sees only the front.
		got := k.expect("q", mqlite.ReceiveOptions{Max: 10}, free, front)
		k.none("q")
		k.must(k.st.Complete(k.ctx, got[1].Lock()), "complete the group's front")
		if m := k.one("q", later); m.Priority != mqlite.MaxPriority {
			t.Fatalf("the later member's priority %d, want %d", m.Priority, mqlite.MaxPriority)
		}
	}},
	{"FIFOQueueKeepsItsOrder", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("f", mqlite.QueueOptions{Ordering: mqlite.FIFO})
		s := k.send("f", prio(0), prio(mqlite.MaxPriority), prio(3))
		for _, seq := range s {
			m := k.one("f", seq)
			k.none("f")
			k.must(k.st.Complete(k.ctx, m.Lock()), "complete")
		}
	}},
	{"OutOfRangeRefused", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		for _, bad := range []int{-1, mqlite.MaxPriority + 1, 1 << 20} {
			_, err := k.sendAll("q", prio(1), prio(bad))
			k.wantErr(err, mqlite.ErrInvalidMessage, "send a batch with a priority out of range")
			k.wantErr(err, mqlite.ErrInvalidArgument, "send a batch with a priority out of range")
			_, err = k.sendAll("q", prio(bad))
			k.wantErr(err, mqlite.ErrInvalidMessage, "send a priority out of range")
		}
		if p := k.peek("q"); len(p) != 0 {
			t.Fatalf("the refused sends wrote %d messages", len(p))
		}
		k.none("q")
	}},
	{"KeptThroughRedelivery", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 2})
		seq := k.send("q", prio(7))[0]
		if p := k.peek("q"); len(p) != 1 || p[0].Priority != 7 {
			t.Fatalf("peek: %+v, want seq %d of priority 7", p, seq)
		}
		m := k.one("q", seq)
		if m.Priority != 7 {
			t.Fatalf("first delivery's priority %d, want 7", m.Priority)
		}
		k.must(k.st.Abandon(k.ctx, m.Lock(), 0), "abandon")
		m = k.one("q", seq)
		if m.Priority != 7 {
			t.Fatalf("redelivery's priority %d, want 7", m.Priority)
		}
		k.must(k.st.Abandon(k.ctx, m.Lock(), 0), "abandon the last delivery")
		if d := k.deadLetters("q"); len(d) != 1 || d[0].Priority != 7 {
			t.Fatalf("dead letters: %+v, want seq %d of priority 7", d, seq)
		}
		n, err := k.st.Redrive(k.ctx, "q", mqlite.RedriveOptions{})
		if err != nil || n != 1 {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		other := k.send("q", prio(6))[0]
		if m := k.one("q", seq); m.Priority != 7 {
			t.Fatalf("the redriven message's priority %d, want 7", m.Priority)
		}
		k.one("q", other)
	}},
	{"TopicCopiesKeepIt", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.topic("t", map[string]mqlite.SubscriptionOptions{"a": {}, "b": {}})
		res, err := k.sendAll("t", prio(0), prio(4))
		if err != nil || len(res) != 2 {
			t.Fatalf("publish: %v", err)
		}
		for _, q := range []string{"a", "b"} {
			msgs := k.receive(q, mqlite.ReceiveOptions{Max: 10})
			got := make([]int, len(msgs))
			for i, m := range msgs {
				got[i] = m.Priority
			}
			if !slices.Equal(got, []int{4, 0}) {
				t.Fatalf("subscription %s: priorities %v, want [4 0]", q, got)
			}
		}
	}},
}
