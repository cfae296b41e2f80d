package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// ttlTests: a message is never handed out at or after the end of its time
// to live (its own TTL, or the queue's DefaultTTL), whether or not a sweep
// has run.
var ttlTests = []subtest{
	{"NeverDeliveredAtDeadline", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.send("q", outbox.Message{TTL: 10 * time.Second}, outbox.Message{TTL: 10 * time.Second})
		k.advance(10*time.Second - time.Millisecond)
		m := k.one("q", s[0])
		if !m.ExpiresAt.Equal(k.clock.Now().Add(time.Millisecond)) {
			t.Fatalf("ExpiresAt %v, want %v", m.ExpiresAt, k.clock.Now().Add(time.Millisecond))
		}
		k.advance(time.Millisecond)
		k.none("q")
	}},
	{"QueueDefaultTTL", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{DefaultTTL: time.Minute})
		s := k.send("q", outbox.Message{}, outbox.Message{TTL: time.Hour})
		k.advance(time.Minute)
		k.expect("q", max10, s[1])
	}},
	{"ExpiredDeferredNotReceivable", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.send("q", outbox.Message{TTL: time.Minute})[0]
		m := k.one("q", seq)
		k.must(k.st.Defer(k.ctx, m.Lock()), "defer")
		k.advance(time.Minute)
		_, err := k.st.ReceiveDeferred(k.ctx, "q", seq)
		k.wantErr(err, mqlite.ErrMessageNotFound, "receive deferred past its TTL")
	}},
}

// scheduleTests: a scheduled message (DeliverAt, or Abandon with a delay)
// is never handed out before its moment and is handed out from it, with no
// sweep having run; it holds back no ungrouped message.
var scheduleTests = []subtest{
	{"DeliverAt", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		at := k.clock.Now().Add(time.Minute)
		seq := k.send("q", outbox.Message{DeliverAt: at})[0]
		if p := k.peek("q"); len(p) != 1 || p[0].State != mqlite.StateScheduled || !p[0].VisibleAt.Equal(at) {
			t.Fatalf("peek: %+v, want scheduled for %v", p, at)
		}
		k.advance(time.Minute - time.Millisecond)
		k.none("q")
		k.advance(time.Millisecond)
		k.one("q", seq)
	}},
	{"DeliverAtInThePastIsNow", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.send("q", outbox.Message{DeliverAt: k.clock.Now().Add(-time.Hour)})[0]
		k.one("q", seq)
	}},
	{"AbandonDelay", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		k.must(k.st.Abandon(k.ctx, m.Lock(), time.Minute), "abandon")
		if s := k.stats("q"); s.Scheduled != 1 {
			t.Fatalf("stats after abandon with a delay: %+v, want one scheduled", s)
		}
		k.advance(time.Minute - time.Millisecond)
		k.none("q")
		k.advance(time.Millisecond)
		k.one("q", seq)
	}},
	// DeliverAt and Abandon's delay are at most mqlite.MaxDelay ahead;
	// past it the call is refused and changes nothing.
	{"DelaysAreBounded", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		at := k.clock.Now().Add(mqlite.MaxDelay)
		_, err := k.sendAll("q", outbox.Message{}, outbox.Message{DeliverAt: at.Add(time.Millisecond)})
		k.wantErr(err, mqlite.ErrInvalidMessage, "send with a DeliverAt past MaxDelay")
		k.wantErr(err, mqlite.ErrInvalidArgument, "send with a DeliverAt past MaxDelay")
		if st := k.stats("q"); st.Total() != 0 {
			t.Fatalf("the refused batch wrote %d messages", st.Total())
		}
		s := k.send("q", outbox.Message{DeliverAt: at}, outbox.Message{})
		m := k.one("q", s[1])
		err = k.st.Abandon(k.ctx, m.Lock(), mqlite.MaxDelay+time.Millisecond)
		k.wantErr(err, mqlite.ErrInvalidArgument, "abandon with a delay past MaxDelay")
		k.must(k.st.Abandon(k.ctx, m.Lock(), mqlite.MaxDelay), "abandon with MaxDelay, the lock still held")
		k.advance(mqlite.MaxDelay - time.Millisecond)
		k.none("q")
		k.advance(time.Millisecond)
		k.expect("q", max10, s[0], s[1])
	}},
	// DeliverNow makes the listed scheduled messages (or all) due now,
	// whether sent with a DeliverAt or abandoned with a delay, skips what
	// is not scheduled, and keeps a group's order.
	{"DeliverNowMakesDue", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		later := k.clock.Now().Add(time.Hour)
		s := k.send("q", outbox.Message{DeliverAt: later, GroupID: "g"}, outbox.Message{GroupID: "g"},
			outbox.Message{DeliverAt: later}, outbox.Message{})
		m := k.one("q", s[3])
		k.must(k.st.Abandon(k.ctx, m.Lock(), time.Hour), "abandon with a delay")
		n, err := k.st.DeliverNow(k.ctx, "q", mqlite.DeliverNowOptions{Seqs: []int64{s[0], s[1], 999}})
		k.must(err, "deliver now")
		if n != 1 {
			t.Fatalf("DeliverNow of one scheduled seq, one active, one unknown: %d, want 1", n)
		}
		g := k.expect("q", max10, s[0]) // s[1] waits behind it in its group
		k.must(k.st.Complete(k.ctx, g[0].Lock()), "complete")
		n, err = k.st.DeliverNow(k.ctx, "q", mqlite.DeliverNowOptions{})
		k.must(err, "deliver every scheduled message now")
		if n != 2 {
			t.Fatalf("DeliverNow of the queue: %d, want 2 (a DeliverAt and an Abandon delay)", n)
		}
		k.expect("q", max10, s[1], s[2], s[3])
		_, err = k.st.DeliverNow(k.ctx, "missing", mqlite.DeliverNowOptions{})
		k.wantErr(err, mqlite.ErrQueueNotFound, "deliver now on a missing queue")
	}},
	{"HoldsNoUngroupedMessage", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.send("q", outbox.Message{DeliverAt: k.clock.Now().Add(time.Minute)}, outbox.Message{})
		m := k.expect("q", max10, s[1])
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		k.advance(time.Minute)
		k.expect("q", max10, s[0])
	}},
}
