package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// recoveryTests: a restart after a crash releases every lease the dead
// process held at once (back to active, or to the dead letters on the last
// allowed delivery) and keeps everything else.
var recoveryTests = []subtest{
	{"LeasesReleasedAtOpen", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRestart)
		skipWithout(t, h.Features.WithoutReleaseAtOpen)
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{LockDuration: time.Hour})
		seq := k.sendN("q", 1)[0]
		old := k.one("q", seq)
		k.restart()
		m := k.one("q", seq) // at once: not when the old lease would end
		if m.DeliveryCount != 2 {
			t.Fatalf("count after recovery %d, want 2", m.DeliveryCount)
		}
		k.wantErr(k.st.Complete(k.ctx, old.Lock()), mqlite.ErrLockLost, "complete by the crashed holder")
		k.must(k.st.Complete(k.ctx, m.Lock()), "complete")
	}},
	{"EverythingElseSurvives", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRestart)
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.send("q", outbox.Message{MessageID: "kept"}, outbox.Message{}, outbox.Message{},
			outbox.Message{DeliverAt: k.clock.Now().Add(time.Minute)})
		msgs := k.expect("q", mqlite.ReceiveOptions{Max: 2}, s[0], s[1])
		k.must(k.st.Defer(k.ctx, msgs[0].Lock()), "defer")
		k.must(k.st.Reject(k.ctx, msgs[1].Lock(), "r", "d"), "reject")
		k.restart()
		k.wantDuplicate(k.sendOne("q", outbox.Message{Body: msgs[0].Body, MessageID: "kept"}), s[0], "resend after restart")
		k.wantDeadLetter("q", s[1], "r", 1)
		m := k.expect("q", max10, s[2])
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		k.advance(time.Minute)
		k.expect("q", max10, s[3])
		if _, err := k.st.ReceiveDeferred(k.ctx, "q", s[0]); err != nil {
			t.Fatalf("receive deferred after restart: %v", err)
		}
	}},
}
