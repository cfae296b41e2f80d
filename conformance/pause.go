package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// Pauser pauses and resumes queues. A Store that is also a Pauser has the
// Pause area run.
type Pauser interface {
	// PauseQueue pauses a queue; see mqlite.Store.PauseQueue.
	PauseQueue(ctx context.Context, name string) error
	// ResumeQueue resumes it; see mqlite.Store.ResumeQueue.
	ResumeQueue(ctx context.Context, name string) error
	// GetQueue reads a queue; see mqlite.Store.GetQueue.
	GetQueue(ctx context.Context, name string) (mqlite.QueueInfo, error)
}

var _ Pauser = (*mqlite.Store)(nil)

// pauseTests: a paused queue accepts sends and hands out nothing, while
// what is already out can be settled; a resume hands its messages out and
// wakes a receive that waits; consumer.Loop idles through a pause without
// an error; the pause is in the data, so a restart keeps it.
var pauseTests = []subtest{
	{"SendsAcceptedNothingHandedOut", func(t *testing.T, h Harness) {
		k := open(t, h)
		p := optional[Pauser](k, "Pauser")
		k.queue("q", mqlite.QueueOptions{})
		out := k.one("q", k.sendN("q", 1)[0])
		k.must(p.PauseQueue(k.ctx, "q"), "pause")
		k.must(p.PauseQueue(k.ctx, "q"), "pause again")
		s := k.sendN("q", 2)
		k.none("q")
		k.expectNone("q", mqlite.ReceiveOptions{Max: 10, Mode: mqlite.ReceiveAndDelete})
		k.must(k.st.Complete(k.ctx, out.Lock()), "complete a delivery taken before the pause")
		if q, err := p.GetQueue(k.ctx, "q"); err != nil || !q.Paused() {
			t.Fatalf("queue while paused: %+v %v", q, err)
		}
		if st := k.stats("q"); st.Active != 2 {
			t.Fatalf("stats while paused: %+v, want 2 active", st)
		}
		k.must(p.ResumeQueue(k.ctx, "q"), "resume")
		k.must(p.ResumeQueue(k.ctx, "q"), "resume again")
		k.expect("q", mqlite.ReceiveOptions{Max: 10}, s...)
		k.wantErr(p.PauseQueue(k.ctx, "nope"), mqlite.ErrQueueNotFound, "pause an unknown queue")
	}},
	{"ResumeWakesAWaitingReceive", func(t *testing.T, h Harness) {
		k := open(t, h)
		p := optional[Pauser](k, "Pauser")
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		k.must(p.PauseQueue(k.ctx, "q"), "pause")
		ch := k.waitAsync("q", mqlite.ReceiveOptions{})
		k.waiting("q")
		k.must(p.ResumeQueue(k.ctx, "q"), "resume")
		// Nothing else commits: only the resume can wake the receive before
		// its wait (longWait) ends with nothing. The bound is shorter than
		// that wait, so a resume that wakes nothing fails here.
		r := k.await(ch, wakeBound, "receive waiting through the pause, after the resume")
		if got := seqs(r.msgs); len(got) != 1 || got[0] != seq {
			t.Fatalf("after resume: %v, want [%d]", got, seq)
		}
	}},
	{"LoopIdlesThroughAPause", func(t *testing.T, h Harness) {
		k := open(t, h)
		p := optional[Pauser](k, "Pauser")
		k.queue("q", mqlite.QueueOptions{})
		k.must(p.PauseQueue(k.ctx, "q"), "pause")
		seq := k.sendN("q", 1)[0]
		handled := make(chan int64, 1)
		lctx, cancel := context.WithCancel(k.ctx)
		done := make(chan error, 1)
		go func() {
			done <- consumer.Loop(lctx, k.st, "q", func(_ context.Context, m mqlite.Message) error {
				handled <- m.Seq
				return nil
			}, consumer.LoopConfig{})
		}()
		k.waiting("q")
		select {
		case s := <-handled:
			t.Fatalf("a paused queue's message %d was handled", s)
		case err := <-done:
			t.Fatalf("the loop ended while the queue was paused: %v", err)
		default:
		}
		k.must(p.ResumeQueue(k.ctx, "q"), "resume")
		// Within wakeBound, shorter than the wait of Loop's receive: only
		// the resume wakes it.
		select {
		case got := <-handled:
			if got != seq {
				t.Fatalf("handled %d, want %d", got, seq)
			}
		case <-time.After(wakeBound):
			t.Fatalf("the resume did not wake the loop within %v", wakeBound)
		}
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("loop: %v", err)
		}
	}},
	{"SurvivesARestart", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRestart)
		k := open(t, h)
		optional[Pauser](k, "Pauser")
		k.queue("q", mqlite.QueueOptions{})
		k.sendN("q", 1)
		k.must(k.st.(Pauser).PauseQueue(k.ctx, "q"), "pause")
		k.restart()
		k.none("q")
		p := optional[Pauser](k, "Pauser")
		k.must(p.ResumeQueue(k.ctx, "q"), "resume")
		if got := k.receive("q", mqlite.ReceiveOptions{Max: 10}); len(got) != 1 {
			t.Fatalf("after resume: %d messages", len(got))
		}
	}},
}

// waiting returns once a receive of queue waits, as the queue's receivers
// in its Stats tell; an implementation whose Stats lists no receivers
// skips the subtest.
func (k *kit) waiting(queue string) {
	k.t.Helper()
	deadline := time.Now().Add(longWait)
	for {
		st := k.stats(queue)
		n := 0
		for _, r := range st.Receivers {
			n += r.Waiting
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			k.t.Skip("the store's Stats lists no waiting receiver")
		}
		time.Sleep(time.Millisecond)
	}
}

// expectNone fails unless a Receive of queue with opts returns nothing.
func (k *kit) expectNone(queue string, opts mqlite.ReceiveOptions) {
	k.t.Helper()
	if got := k.receive(queue, opts); len(got) != 0 {
		k.t.Fatalf("receive on %s: %v, want nothing", queue, seqs(got))
	}
}
