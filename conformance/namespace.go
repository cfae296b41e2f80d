package conformance

import (
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

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
