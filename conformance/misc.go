package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

var rad = mqlite.ReceiveOptions{Mode: mqlite.ReceiveAndDelete}

// receiveAndDeleteTests: receive-and-delete removes what it hands out in
// the same transaction, never more than Max and never a row it does not
// return; it grants no lease and keeps group order.
var receiveAndDeleteTests = []subtest{
	{"NeverMoreThanMaxNeverLoses", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 5)
		o := rad
		o.Max = 2
		k.expect("q", o, s[0], s[1])
		if st := k.stats("q"); st.Total() != 3 || st.Active != 3 {
			t.Fatalf("after taking 2 of 5: %+v, want 3 active", st)
		}
		o.Max = 1
		k.expect("q", o, s[2])
		o.Max = 10
		k.expect("q", o, s[3], s[4])
		if st := k.stats("q"); st.Total() != 0 {
			t.Fatalf("left: %+v", st)
		}
	}},
	{"GrantsNoLease", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		m := k.expect("q", rad, seq)[0]
		if m.LockToken != "" || !m.LockedUntil.IsZero() || m.DeliveryCount != 1 {
			t.Fatalf("receive-and-delete: token %q until %v count %d, want none, zero, 1",
				m.LockToken, m.LockedUntil, m.DeliveryCount)
		}
		k.advance(2 * lease)
		k.none("q")
	}},
	{"KeepsGroupOrder", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 2)
		o := rad
		o.Max = 10
		k.expect("q", o, g[0])
		k.expect("q", o, g[1])
	}},
}

// renewTests: Renew extends a running lease by LockDuration from now and
// never revives one that ended; each lock of RenewBatch has its own result.
var renewTests = []subtest{
	{"ExtendsFromNow", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 2)
		msgs := k.expect("q", mqlite.ReceiveOptions{Max: 2}, s...)
		k.advance(10 * time.Second)
		until, err := k.st.Renew(k.ctx, msgs[0].Lock())
		k.must(err, "renew")
		if want := k.clock.Now().Add(lease); !until.Equal(want) {
			t.Fatalf("renewed until %v, want %v", until, want)
		}
		k.advance(lease - 10*time.Second) // the first lease's end
		k.must(k.st.Complete(k.ctx, msgs[0].Lock()), "complete past the first lease's end")
		k.wantErr(k.st.Complete(k.ctx, msgs[1].Lock()), mqlite.ErrLockLost, "complete of the unrenewed lease")
	}},
	{"ExpiredNeverRevived", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		k.advance(lease + time.Second)
		_, err := k.st.Renew(k.ctx, m.Lock())
		k.wantErr(err, mqlite.ErrLockLost, "renew of an ended lease")
		k.wantErr(k.st.Complete(k.ctx, m.Lock()), mqlite.ErrLockLost, "complete after a refused renew")
		if m2 := k.one("q", seq); m2.DeliveryCount != 2 {
			t.Fatalf("redelivery count %d, want 2", m2.DeliveryCount)
		}
	}},
	{"BatchEachOwnResult", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 2)
		msgs := k.expect("q", mqlite.ReceiveOptions{Max: 2}, s...)
		k.must(k.st.Complete(k.ctx, msgs[1].Lock()), "complete")
		k.advance(time.Second)
		res, err := k.st.RenewBatch(k.ctx, []mqlite.Lock{msgs[0].Lock(), msgs[1].Lock()})
		k.must(err, "renew batch")
		if len(res) != 2 || res[0].Err != nil || !res[0].LockedUntil.Equal(k.clock.Now().Add(lease)) {
			t.Fatalf("live lock: %+v", res)
		}
		k.wantErr(res[1].Err, mqlite.ErrLockLost, "renew of a settled lock")
	}},
}

// namespaceTests: two queues never see each other's messages, receipts,
// attempts or dedup keys, and an operator call on one leaves the other
// alone.
var namespaceTests = []subtest{
	{"MessagesDisjoint", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("a", mqlite.QueueOptions{})
		k.queue("b", mqlite.QueueOptions{})
		s := k.sendN("a", 2)
		k.none("b")
		if p := k.peek("b"); len(p) != 0 {
			t.Fatalf("peek b: %+v", p)
		}
		if st := k.stats("b"); st.Total() != 0 {
			t.Fatalf("stats b: %+v", st)
		}
		msgs := k.expect("a", max10, s...)
		k.must(k.st.Defer(k.ctx, msgs[0].Lock()), "defer on a")
		_, err := k.st.ReceiveDeferred(k.ctx, "b", s[0])
		k.wantErr(err, mqlite.ErrMessageNotFound, "receive deferred of a's message on b")
		if _, err := k.st.ReceiveDeferred(k.ctx, "a", s[0]); err != nil {
			t.Fatalf("receive deferred on a: %v", err)
		}
	}},
	{"ReceiptsDisjoint", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("a", mqlite.QueueOptions{})
		k.queue("b", mqlite.QueueOptions{})
		m := k.one("a", k.sendN("a", 1)[0])
		k.must(k.st.Complete(k.ctx, m.Lock()), "complete")
		l := m.Lock()
		l.Queue = "b"
		k.wantErr(k.st.Complete(k.ctx, l), mqlite.ErrLockLost, "replay of a's receipt on b")
	}},
	{"AttemptsDisjoint", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("a", mqlite.QueueOptions{})
		k.queue("b", mqlite.QueueOptions{})
		sa := k.sendN("a", 1)
		sb := k.sendN("b", 1)
		k.expect("a", mqlite.ReceiveOptions{AttemptID: "x"}, sa[0])
		// Other options under the same id: a conflict on a, not on b.
		k.expect("b", mqlite.ReceiveOptions{AttemptID: "x", Max: 2, Mode: mqlite.ReceiveAndDelete}, sb[0])
	}},
	{"DedupKeysDisjoint", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("a", mqlite.QueueOptions{})
		k.queue("b", mqlite.QueueOptions{})
		for _, m := range []outbox.Message{{Body: []byte("x"), MessageID: "id"}, {Body: []byte("y")}} {
			k.wantNew(k.sendOne("a", m), "send to a")
			k.wantNew(k.sendOne("b", m), "the same message to b")
		}
		k.wantNew(k.sendOne("b", outbox.Message{Body: []byte("z"), MessageID: "id2"}), "send to b")
		k.wantNew(k.sendOne("a", outbox.Message{Body: []byte("other"), MessageID: "id2"}), "same id, other body, on a")
	}},
	{"OperatorCallsDisjoint", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("a", mqlite.QueueOptions{})
		k.queue("b", mqlite.QueueOptions{})
		k.sendN("a", 1)
		k.sendN("b", 1)
		k.rejectAll("a")
		k.rejectAll("b")
		if dl := k.deadLetters("b"); len(dl) != 1 {
			t.Fatalf("dead letters of b: %v", seqs(dl))
		}
		n, err := k.st.Redrive(k.ctx, "a", mqlite.RedriveOptions{})
		if err != nil || n != 1 {
			t.Fatalf("redrive a: %d, %v", n, err)
		}
		if dl := k.deadLetters("b"); len(dl) != 1 {
			t.Fatal("redrive of a touched b")
		}
		k.sendN("b", 1)
		n, err = k.st.Purge(k.ctx, "a", mqlite.PurgeOptions{State: mqlite.StateActive})
		if err != nil || n != 1 {
			t.Fatalf("purge a: %d, %v", n, err)
		}
		if st := k.stats("b"); st.Total() != 2 || st.DeadLettered != 1 || st.Active != 1 {
			t.Fatalf("purge of a touched b: %+v", st)
		}
	}},
}

// recoveryTests: a restart after a crash releases every lease the dead
// process held at once (back to active, or to the dead letters on the last
// allowed delivery) and keeps everything else.
var recoveryTests = []subtest{
	{"LeasesReleasedAtOpen", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRestart)
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
