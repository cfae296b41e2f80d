package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// rejectAll receives every message of queue and rejects it.
func (k *kit) rejectAll(queue string) {
	k.t.Helper()
	for _, m := range k.receive(queue, mqlite.ReceiveOptions{Max: 100}) {
		k.must(k.st.Reject(k.ctx, m.Lock(), "r", "d"), "reject")
	}
}

// deadLetterTests: Reject, the delivery bound and TTL (on queues that ask)
// move a message to the dead letters, which keep why and when; Redrive puts
// them back with a fresh count; Purge removes a state; Stats counts them.
var deadLetterTests = []subtest{
	{"RejectKeepsReasonAndDescription", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		k.advance(time.Second)
		k.must(k.st.Reject(k.ctx, m.Lock(), "bad input", "field x is missing"), "reject")
		dl := k.deadLetters("q")
		if len(dl) != 1 || dl[0].Seq != seq || dl[0].DeadLetterReason != "bad input" ||
			dl[0].DeadLetterDescription != "field x is missing" || dl[0].DeliveryCount != 1 ||
			!dl[0].DeadLetteredAt.Equal(k.clock.Now()) || dl[0].State != mqlite.StateDeadLettered {
			t.Fatalf("dead letters: %+v", dl)
		}
		if p := k.peek("q"); len(p) != 0 {
			t.Fatalf("Peek shows a dead letter: %+v", p)
		}
		if s := k.stats("q"); s.DeadLettered != 1 || s.Total() != 1 {
			t.Fatalf("stats: %+v", s)
		}
		k.none("q")
	}},
	{"RedriveResetsCountAndFields", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 1})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		k.must(k.st.Abandon(k.ctx, m.Lock(), 0), "abandon on the last delivery")
		k.none("q")
		n, err := k.st.Redrive(k.ctx, "q", mqlite.RedriveOptions{})
		if err != nil || n != 1 {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		if len(k.deadLetters("q")) != 0 {
			t.Fatal("the redriven message is still a dead letter")
		}
		m = k.one("q", seq)
		if m.DeliveryCount != 1 || m.DeadLetterReason != "" {
			t.Fatalf("redriven delivery: count %d reason %q, want 1 and none", m.DeliveryCount, m.DeadLetterReason)
		}
		k.must(k.st.Complete(k.ctx, m.Lock()), "complete")
	}},
	{"RedriveSelectedSeqs", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 3)
		k.rejectAll("q")
		active := k.sendN("q", 1)[0]
		n, err := k.st.Redrive(k.ctx, "q", mqlite.RedriveOptions{Seqs: []int64{s[0], s[2], active, 1 << 40}})
		if err != nil || n != 2 {
			t.Fatalf("redrive: %d, %v, want 2", n, err)
		}
		if dl := k.deadLetters("q"); len(dl) != 1 || dl[0].Seq != s[1] {
			t.Fatalf("dead letters left: %v, want [%d]", seqs(dl), s[1])
		}
		k.expect("q", max10, s[0], s[2], active)
	}},
	{"RedriveDropsPassedTTL", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.send("q", outbox.Message{TTL: 10 * time.Second})[0]
		k.rejectAll("q")
		k.advance(time.Minute)
		_, err := k.st.Redrive(k.ctx, "q", mqlite.RedriveOptions{})
		k.must(err, "redrive")
		if m := k.one("q", seq); !m.ExpiresAt.IsZero() {
			t.Fatalf("redriven past its TTL with ExpiresAt %v, want none", m.ExpiresAt)
		}
	}},
	{"PurgeByState", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		k.sendN("q", 2)
		k.rejectAll("q")
		k.sendN("q", 3)
		k.send("q", outbox.Message{DeliverAt: k.clock.Now().Add(time.Hour)})
		n, err := k.st.Purge(k.ctx, "q", mqlite.PurgeOptions{State: mqlite.StateDeadLettered})
		if err != nil || n != 2 {
			t.Fatalf("purge dead letters: %d, %v, want 2", n, err)
		}
		n, err = k.st.Purge(k.ctx, "q", mqlite.PurgeOptions{State: mqlite.StateActive})
		if err != nil || n != 3 {
			t.Fatalf("purge active: %d, %v, want 3", n, err)
		}
		if s := k.stats("q"); s.Total() != 1 || s.Scheduled != 1 {
			t.Fatalf("stats after the purges: %+v, want the scheduled one", s)
		}
		_, err = k.st.Purge(k.ctx, "q", mqlite.PurgeOptions{State: "completed"})
		k.wantErr(err, mqlite.ErrInvalidArgument, "purge of an unknown state")
		_, err = k.st.Purge(k.ctx, "missing", mqlite.PurgeOptions{State: mqlite.StateActive})
		k.wantErr(err, mqlite.ErrQueueNotFound, "purge of a missing queue")
	}},
	// Purging locked messages takes them from their holders, whose
	// settlements then fail, and releases their groups.
	{"PurgeLockedFencesHolder", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 2)
		m := k.expect("q", max10, g[0])
		n, err := k.st.Purge(k.ctx, "q", mqlite.PurgeOptions{State: mqlite.StateLocked})
		if err != nil || n != 1 {
			t.Fatalf("purge locked: %d, %v, want 1", n, err)
		}
		k.wantErr(k.st.Complete(k.ctx, m[0].Lock()), mqlite.ErrLockLost, "complete of a purged delivery")
		k.expect("q", max10, g[1])
	}},
	{"StatsPerState", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 4)
		k.send("q", outbox.Message{DeliverAt: k.clock.Now().Add(time.Hour)})
		msgs := k.expect("q", mqlite.ReceiveOptions{Max: 3}, s[0], s[1], s[2])
		k.must(k.st.Defer(k.ctx, msgs[1].Lock()), "defer")
		k.must(k.st.Reject(k.ctx, msgs[2].Lock(), "r", ""), "reject")
		st := k.stats("q")
		if st.Active != 1 || st.Scheduled != 1 || st.Locked != 1 || st.Deferred != 1 || st.DeadLettered != 1 {
			t.Fatalf("stats: %+v, want one in each state", st)
		}
	}},
	{"StatsCounters", func(t *testing.T, h Harness) {
		// Each event counts once: a replayed Complete does not count
		// again, a lapsed lease counts as lost when it is put back.
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 3, LockDuration: time.Second})
		s := k.sendN("q", 3)
		one := mqlite.ReceiveOptions{Max: 1}
		m := k.expect("q", one, s[0])
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete replay")
		m = k.expect("q", one, s[1])
		k.must(k.st.Abandon(k.ctx, m[0].Lock(), 0), "abandon")
		m = k.expect("q", one, s[1])
		k.must(k.st.Reject(k.ctx, m[0].Lock(), "r", ""), "reject")
		m = k.expect("q", one, s[2])
		k.advance(2 * time.Second)
		k.wantErr(k.st.Complete(k.ctx, m[0].Lock()), mqlite.ErrLockLost, "late complete")
		k.expect("q", one, s[2])
		want := mqlite.QueueCounters{Sent: 3, Received: 5, Completed: 1, Abandoned: 1, Rejected: 1,
			DeadLettered: 1, LockLost: 1, Redelivered: 2}
		if got := k.stats("q").Counters; got != want {
			t.Fatalf("counters %+v, want %+v", got, want)
		}
	}},
}
