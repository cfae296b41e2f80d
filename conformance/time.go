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
