package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// The Handoff area: a Receive that waits when a send commits gets the
// message from that commit, at once, with the clock standing still and no
// sweep running (the embedded store claims for it inside the send's
// transaction and hands the claim over after the commit; an
// implementation may instead wake it to claim), and the claim it gets is
// a Receive's claim: the lease from the store's clock, the first
// delivery, a token that settles, the queue's pause, group order and the
// Receive's Max. A send that rolls back, or a commit that fails, hands
// nothing to anyone. Each subtest starts the Receive and waits until the
// store lists it as waiting (Stats' Receivers) before the send commits;
// what it checks holds also when the Receive looks after the commit.

// handWait starts a Receive of queue with opts (Wait defaults to longWait)
// and returns once the store lists a receiver waiting on queue.
func (k *kit) handWait(queue string, opts mqlite.ReceiveOptions) <-chan received {
	k.t.Helper()
	ch := k.waitAsync(queue, opts)
	k.waiting(queue)
	return ch
}

// wantHanded fails unless msgs are the messages want, each on its first
// delivery, locked for lease from the store's (still) clock under tokens
// of their own.
func (k *kit) wantHanded(msgs []mqlite.Message, want ...int64) {
	k.t.Helper()
	if len(msgs) != len(want) {
		k.t.Fatalf("handed %d messages %v, want %v", len(msgs), seqs(msgs), want)
	}
	tokens := map[string]bool{}
	for i, m := range msgs {
		switch {
		case m.Seq != want[i]:
			k.t.Fatalf("handed %v, want %v", seqs(msgs), want)
		case m.DeliveryCount != 1:
			k.t.Fatalf("message %d handed on delivery %d, want its first", m.Seq, m.DeliveryCount)
		case !m.LockedUntil.Equal(k.clock.Now().Add(lease)):
			k.t.Fatalf("message %d locked until %v, want the lease from the store's clock, %v", m.Seq, m.LockedUntil, k.clock.Now().Add(lease))
		case m.LockToken == "" || tokens[m.LockToken]:
			k.t.Fatalf("message %d handed with token %q, want one of its own", m.Seq, m.LockToken)
		}
		tokens[m.LockToken] = true
	}
}

var handoffTests = []subtest{
	// A Receive waiting when three messages commit in one transaction
	// gets the three, promptly, with the fake clock standing still; nobody
	// else can claim them, and they settle with the tokens it got.
	{"WaiterGetsTheCommit", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		ch := k.handWait("q", mqlite.ReceiveOptions{Max: 10})
		sent := k.sendN("q", 3)
		r := k.await(ch, wakeBound, "waiting receive after the commit")
		k.wantHanded(r.msgs, sent...)
		k.none("q")
		for _, m := range r.msgs {
			k.must(k.st.Complete(k.ctx, m.Lock()), "complete a handed message")
		}
		if s := k.stats("q"); s.Active+s.Locked != 0 {
			t.Fatalf("after the completions: %+v, want empty", s)
		}
	}},
	// A send that rolls back hands nothing: the file holds nothing of it,
	// the Receive goes on waiting and gets the next committed send alone.
	{"RollbackHandsNothing", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRollback)
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		ch := k.handWait("q", mqlite.ReceiveOptions{Max: 10})
		err := k.in.Tx(k.ctx, func(send SendFunc) error {
			if _, err := send("q", outbox.Message{Body: []byte("rolled back")}); err != nil {
				return err
			}
			return errRollback
		})
		k.wantErr(err, errRollback, "Tx")
		if s := k.stats("q"); s.Active+s.Locked != 0 {
			t.Fatalf("after the rollback: %+v, want nothing", s)
		}
		select {
		case r := <-ch:
			t.Fatalf("the waiting receive returned after a rollback: %v %v", seqs(r.msgs), r.err)
		default:
		}
		seq := k.send("q", outbox.Message{Body: []byte("committed")})[0]
		r := k.await(ch, wakeBound, "waiting receive after the committed send")
		k.wantHanded(r.msgs, seq)
		if string(r.msgs[0].Body) != "committed" {
			t.Fatalf("handed %q, want the committed message", r.msgs[0].Body)
		}
	}},
	// The hand-off claims no more than the waiting Receive's Max: of
	// three messages committed together it gets two, the third stays for
	// the next Receive.
	{"KeepsMax", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		ch := k.handWait("q", mqlite.ReceiveOptions{Max: 2})
		sent := k.sendN("q", 3)
		k.wantHanded(k.await(ch, wakeBound, "waiting receive").msgs, sent[:2]...)
		if s := k.stats("q"); s.Active != 1 || s.Locked != 2 {
			t.Fatalf("stats %+v, want 2 locked, 1 active", s)
		}
		k.one("q", sent[2])
	}},
	// The hand-off keeps group order: while a message of group g is out,
	// a Receive waiting when the next of g and one without a group commit
	// together gets only the one without; the next of g goes out once the
	// first is settled.
	{"KeepsGroupOrder", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		first := k.one("q", k.send("q", outbox.Message{GroupID: "g"})[0])
		ch := k.handWait("q", mqlite.ReceiveOptions{Max: 10})
		sent := k.send("q", outbox.Message{GroupID: "g"}, outbox.Message{})
		k.wantHanded(k.await(ch, wakeBound, "waiting receive").msgs, sent[1])
		k.none("q")
		k.must(k.st.Complete(k.ctx, first.Lock()), "complete the first of g")
		k.one("q", sent[0])
	}},
	// A paused queue hands nothing to a waiting Receive: its wait ends
	// empty, the message stays active; after the resume it goes out on
	// its first delivery.
	{"PausedQueueHandsNothing", func(t *testing.T, h Harness) {
		k := open(t, h)
		p := optional[Pauser](k, "Pauser")
		k.queue("q", mqlite.QueueOptions{})
		k.must(p.PauseQueue(k.ctx, "q"), "pause")
		ch := k.handWait("q", mqlite.ReceiveOptions{Max: 10, Wait: 200 * time.Millisecond})
		seq := k.sendN("q", 1)[0]
		if r := k.await(ch, wakeBound, "waiting receive of a paused queue"); len(r.msgs) != 0 {
			t.Fatalf("a paused queue handed %v", seqs(r.msgs))
		}
		if s := k.stats("q"); s.Active != 1 || s.Locked != 0 {
			t.Fatalf("stats while paused: %+v, want 1 active", s)
		}
		k.must(p.ResumeQueue(k.ctx, "q"), "resume")
		k.wantHanded(k.receive("q", mqlite.ReceiveOptions{}), seq)
	}},
}
