package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// The wake-up subtests measure wall time. A waiting Receive is given
// longWait; what must wake it has to do so within wakeBound, far shorter,
// and a due moment within dueSlack after a timer of the test's own for the
// same moment fired: less than the one second tick of the background
// sweeps, so an implementation that waits for a sweep fails (the harness
// runs with the sweeps off anyway), and measured from the test's timer, so
// that a busy machine, which delays both alike, does not fail it.
const (
	longWait  = time.Minute
	wakeBound = 10 * time.Second
	dueSlack  = 700 * time.Millisecond
	dueIn     = 300 * time.Millisecond
)

type received struct {
	msgs []mqlite.Message
	err  error
	at   time.Time
}

// waitAsync starts a Receive of queue with opts (Wait defaults to
// longWait) and returns where its outcome arrives.
func (k *kit) waitAsync(queue string, opts mqlite.ReceiveOptions) <-chan received {
	if opts.Wait == 0 {
		opts.Wait = longWait
	}
	out := make(chan received, 1)
	go func() {
		msgs, err := k.st.Receive(k.ctx, queue, opts)
		out <- received{msgs, err, time.Now()}
	}()
	return out
}

// await returns the outcome of a waiting Receive, failing when it takes
// longer than bound.
func (k *kit) await(ch <-chan received, bound time.Duration, what string) received {
	k.t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			k.t.Fatalf("%s: %v", what, r.err)
		}
		return r
	case <-time.After(bound):
		k.t.Fatalf("%s: no return within %v", what, bound)
		return received{}
	}
}

// wakeTests: a waiting Receive returns at once when a commit makes a
// message of its queue claimable, never because of a rollback or another
// queue's commit, and at the moment a message falls due (DeliverAt, an
// Abandon delay, a lease end) with no sweep running. They never race: a
// receiver that has not started waiting yet finds the message when it
// looks, and the rollback subtests only pass when the receiver returns
// the later committed message.
var wakeTests = []subtest{
	{"CommitWakesWaiter", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		ch := k.waitAsync("q", mqlite.ReceiveOptions{})
		seq := k.sendN("q", 1)[0]
		if r := k.await(ch, wakeBound, "waiting receive after a commit"); len(r.msgs) != 1 || r.msgs[0].Seq != seq {
			t.Fatalf("got %v, want [%d]", seqs(r.msgs), seq)
		}
	}},
	{"RollbackWakesNothing", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRollback)
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		ch := k.waitAsync("q", mqlite.ReceiveOptions{Max: 10})
		err := k.in.Tx(k.ctx, func(send SendFunc) error {
			if _, err := send("q", outbox.Message{Body: []byte("rolled back")}); err != nil {
				return err
			}
			return errRollback
		})
		k.wantErr(err, errRollback, "Tx")
		select {
		case r := <-ch:
			t.Fatalf("the waiting receive returned after a rollback: %v %v", seqs(r.msgs), r.err)
		default:
		}
		seq := k.send("q", outbox.Message{Body: []byte("committed")})[0]
		r := k.await(ch, wakeBound, "waiting receive after the committed send")
		if len(r.msgs) != 1 || r.msgs[0].Seq != seq {
			t.Fatalf("got %v, want only the committed [%d]", seqs(r.msgs), seq)
		}
	}},
	{"OtherQueueWakesNothing", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("a", mqlite.QueueOptions{})
		k.queue("b", mqlite.QueueOptions{})
		ch := k.waitAsync("a", mqlite.ReceiveOptions{Max: 10})
		k.sendN("b", 1)
		select {
		case r := <-ch:
			t.Fatalf("a commit to b returned a waiting receive of a: %v %v", seqs(r.msgs), r.err)
		default:
		}
		seq := k.sendN("a", 1)[0]
		if r := k.await(ch, wakeBound, "waiting receive of a"); len(r.msgs) != 1 || r.msgs[0].Seq != seq {
			t.Fatalf("got %v, want [%d]", seqs(r.msgs), seq)
		}
	}},
	{"WaitEndsEmpty", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		start := time.Now()
		msgs := k.receive("q", mqlite.ReceiveOptions{Wait: 100 * time.Millisecond})
		if len(msgs) != 0 || time.Since(start) < 100*time.Millisecond {
			t.Fatalf("got %v after %v, want nothing after the Wait", seqs(msgs), time.Since(start))
		}
	}},
	{"ContextEndsWait", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		ctx, cancel := context.WithTimeout(k.ctx, 50*time.Millisecond)
		defer cancel()
		_, err := k.st.Receive(ctx, "q", mqlite.ReceiveOptions{Wait: longWait})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the context's error", err)
		}
	}},
	{"DueDeliverAt", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutWallClock)
		k := openWith(t, h, Config{WallClock: true})
		k.queue("q", mqlite.QueueOptions{})
		due := time.Now().Add(dueIn)
		seq := k.send("q", outbox.Message{DeliverAt: due})[0]
		k.wantAtDue(k.waitAsync("q", mqlite.ReceiveOptions{}), seq, due)
	}},
	{"DueLeaseEnd", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutWallClock)
		k := openWith(t, h, Config{WallClock: true})
		k.queue("q", mqlite.QueueOptions{LockDuration: dueIn})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		k.wantAtDue(k.waitAsync("q", mqlite.ReceiveOptions{}), seq, m.LockedUntil)
	}},
	// The Abandon is committed after the receiver started waiting (most
	// runs: while it sleeps planning to wake at its Wait's end, since the
	// lease outlasts the Wait); its delay must bring the wake-up forward.
	{"DueAbandonDelay", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutWallClock)
		k := openWith(t, h, Config{WallClock: true})
		k.queue("q", mqlite.QueueOptions{LockDuration: time.Hour})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		ch := k.waitAsync("q", mqlite.ReceiveOptions{})
		due := time.Now().Add(dueIn)
		k.must(k.st.Abandon(k.ctx, m.Lock(), dueIn), "abandon with a delay")
		k.wantAtDue(ch, seq, due)
	}},
}

// wantAtDue fails unless the waiting Receive ch returns seq no earlier
// than due and at most dueSlack after it.
func (k *kit) wantAtDue(ch <-chan received, seq int64, due time.Time) {
	k.t.Helper()
	// A timer of the test's own for the due moment: on a busy machine it
	// fires late as the Receive's own wake-up does, so lateness is
	// measured from it and not from the moment the clock passed due.
	fired := make(chan time.Time, 1)
	timer := time.AfterFunc(time.Until(due), func() { fired <- time.Now() })
	defer timer.Stop()
	r := k.await(ch, dueIn+wakeBound, "waiting receive of a due message")
	if len(r.msgs) != 1 || r.msgs[0].Seq != seq {
		k.t.Fatalf("got %v, want [%d]", seqs(r.msgs), seq)
	}
	// Timestamps are whole milliseconds: allow the one being rounded.
	if early := due.Sub(r.at); early > time.Millisecond {
		k.t.Fatalf("returned %v before the due moment", early)
	}
	ref := due
	select {
	case ref = <-fired:
	case <-time.After(wakeBound):
		k.t.Fatal("the test's own timer for the due moment never fired")
	}
	if late := r.at.Sub(ref); late > dueSlack {
		k.t.Fatalf("returned %v after a timer for the due moment fired (%v after the moment), want at most %v",
			late, r.at.Sub(due), dueSlack)
	}
}
