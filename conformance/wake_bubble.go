package conformance

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// inBubble runs f on an implementation opened on the wall clock inside a
// testing/synctest bubble: there synctest.Wait returns once the waiting
// Receive is durably asleep, and time moves only when every goroutine of
// the bubble waits, so a wake-up is measured exactly.
func inBubble(t *testing.T, h Harness, f func(t *testing.T, k *kit)) {
	t.Helper()
	skipWithout(t, h.Features.WithoutBubble)
	skipWithout(t, h.Features.WithoutWallClock)
	synctest.Test(t, func(t *testing.T) {
		f(t, openWith(t, h, Config{WallClock: true}))
	})
}

// wantAfter fails unless the waiting Receive ch returns seq after exactly d
// of the bubble's time from start.
func (k *kit) wantAfter(ch <-chan received, seq int64, start time.Time, d time.Duration) {
	k.t.Helper()
	r := <-ch
	if r.err != nil || len(r.msgs) != 1 || r.msgs[0].Seq != seq {
		k.t.Fatalf("got %v, %v, want [%d]", seqs(r.msgs), r.err, seq)
	}
	// Timestamps are whole milliseconds: allow the one being rounded.
	if took := r.at.Sub(start); took < d-time.Millisecond || took > d+time.Millisecond {
		k.t.Fatalf("returned after %v, want %v", took, d)
	}
}

// wakeBubbleTests: the wake-up promises with the receiver known to be
// waiting before the commit that must (or must not) wake it.
var wakeBubbleTests = []subtest{
	{"CommitWakesWaiter", func(t *testing.T, h Harness) {
		inBubble(t, h, func(t *testing.T, k *kit) {
			k.queue("q", mqlite.QueueOptions{})
			ch := k.waitAsync("q", mqlite.ReceiveOptions{})
			synctest.Wait() // the receiver sleeps
			start := time.Now()
			seq := k.sendN("q", 1)[0]
			k.wantAfter(ch, seq, start, 0)
		})
	}},
	{"RollbackWakesNothing", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRollback)
		inBubble(t, h, func(t *testing.T, k *kit) {
			k.queue("q", mqlite.QueueOptions{})
			ch := k.waitAsync("q", mqlite.ReceiveOptions{Max: 10})
			synctest.Wait()
			err := k.in.Tx(k.ctx, func(send SendFunc) error {
				if _, err := send("q", outbox.Message{Body: []byte("rolled back")}); err != nil {
					return err
				}
				return errRollback
			})
			k.wantErr(err, errRollback, "Tx")
			synctest.Wait() // whatever the rollback woke is asleep again
			select {
			case r := <-ch:
				t.Fatalf("a rollback returned the waiting receive: %v %v", seqs(r.msgs), r.err)
			default:
			}
			start := time.Now()
			seq := k.send("q", outbox.Message{Body: []byte("committed")})[0]
			k.wantAfter(ch, seq, start, 0)
		})
	}},
	{"OtherQueueWakesNothing", func(t *testing.T, h Harness) {
		inBubble(t, h, func(t *testing.T, k *kit) {
			k.queue("a", mqlite.QueueOptions{})
			k.queue("b", mqlite.QueueOptions{})
			ch := k.waitAsync("a", mqlite.ReceiveOptions{Max: 10})
			synctest.Wait()
			k.sendN("b", 1)
			synctest.Wait()
			select {
			case r := <-ch:
				t.Fatalf("a commit to b returned a waiting receive of a: %v %v", seqs(r.msgs), r.err)
			default:
			}
			start := time.Now()
			seq := k.sendN("a", 1)[0]
			k.wantAfter(ch, seq, start, 0)
		})
	}},
	{"DueDeliverAt", func(t *testing.T, h Harness) {
		inBubble(t, h, func(t *testing.T, k *kit) {
			k.queue("q", mqlite.QueueOptions{})
			start := time.Now()
			seq := k.send("q", outbox.Message{DeliverAt: start.Add(dueIn)})[0]
			k.wantAfter(k.waitAsync("q", mqlite.ReceiveOptions{}), seq, start, dueIn)
		})
	}},
	{"DueLeaseEnd", func(t *testing.T, h Harness) {
		inBubble(t, h, func(t *testing.T, k *kit) {
			k.queue("q", mqlite.QueueOptions{LockDuration: dueIn})
			start := time.Now()
			seq := k.sendN("q", 1)[0]
			k.one("q", seq)
			k.wantAfter(k.waitAsync("q", mqlite.ReceiveOptions{}), seq, start, dueIn)
		})
	}},
	// The receiver sleeps planning to wake at its Wait's end (the lease
	// outlasts it); the Abandon's delay, committed then, must bring the
	// wake-up forward to its moment.
	{"AbandonDelayCommittedWhileWaiting", func(t *testing.T, h Harness) {
		inBubble(t, h, func(t *testing.T, k *kit) {
			k.queue("q", mqlite.QueueOptions{LockDuration: time.Hour})
			seq := k.sendN("q", 1)[0]
			m := k.one("q", seq)
			ch := k.waitAsync("q", mqlite.ReceiveOptions{})
			synctest.Wait()
			start := time.Now()
			k.must(k.st.Abandon(k.ctx, m.Lock(), dueIn), "abandon with a delay")
			k.wantAfter(ch, seq, start, dueIn)
		})
	}},
	// A send scheduled earlier than the moment the receiver planned to
	// wake brings the wake-up forward too.
	{"EarlierDeliverAtCommittedWhileWaiting", func(t *testing.T, h Harness) {
		inBubble(t, h, func(t *testing.T, k *kit) {
			k.queue("q", mqlite.QueueOptions{})
			k.send("q", outbox.Message{DeliverAt: time.Now().Add(time.Hour)})
			ch := k.waitAsync("q", mqlite.ReceiveOptions{})
			synctest.Wait()
			start := time.Now()
			seq := k.send("q", outbox.Message{DeliverAt: start.Add(dueIn)})[0]
			k.wantAfter(ch, seq, start, dueIn)
		})
	}},
}
