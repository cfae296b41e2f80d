package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// lastErrorTests: the reason an abandon gives is kept with the message
// (the next delivery, Peek, the dead letters), a retry of the same abandon
// replays, a bad reason is refused with nothing changed, and consumer.Loop
// records its handler's error there.
var lastErrorTests = []subtest{
	{"KeptWithTheMessage", func(t *testing.T, h Harness) {
		k := open(t, h)
		ra := k.st
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 3})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		if m.LastError != "" {
			t.Fatalf("first delivery's last error %q, want none", m.LastError)
		}
		k.must(ra.AbandonWithReason(k.ctx, m.Lock(), 0, "db down: é"), "abandon with a reason")
		k.must(ra.AbandonWithReason(k.ctx, m.Lock(), 0, "db down: é"), "the same abandon, retried")
		if p := k.peek("q"); len(p) != 1 || p[0].LastError != "db down: é" {
			t.Fatalf("peek: %+v", p)
		}
		m = k.one("q", seq)
		if m.LastError != "db down: é" {
			t.Fatalf("second delivery's last error %q", m.LastError)
		}
		k.must(k.st.Abandon(k.ctx, m.Lock(), 0), "abandon without a reason")
		m = k.one("q", seq)
		if m.LastError != "db down: é" {
			t.Fatalf("an abandon without a reason changed the last error to %q", m.LastError)
		}
		k.must(ra.AbandonWithReason(k.ctx, m.Lock(), 0, "still down"), "abandon the last delivery")
		if d := k.deadLetters("q"); len(d) != 1 || d[0].LastError != "still down" {
			t.Fatalf("dead letters: %+v", d)
		}
	}},
	{"BadReasonRefused", func(t *testing.T, h Harness) {
		k := open(t, h)
		ra := k.st
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		for _, bad := range []string{"\xff\xfe", strings.Repeat("x", mqlite.MaxLastErrorLen+1)} {
			k.wantErr(ra.AbandonWithReason(k.ctx, m.Lock(), 0, bad), mqlite.ErrInvalidArgument, "abandon with a bad reason")
		}
		k.must(k.st.Complete(k.ctx, m.Lock()), "complete: the refused abandons changed nothing")
		k.none("q")
	}},
	{"LoopRecordsTheHandlersError", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		failed := make(chan struct{})
		lctx, cancel := context.WithCancel(k.ctx)
		done := make(chan error, 1)
		go func() {
			done <- consumer.Loop(lctx, k.st, "q", func(context.Context, mqlite.Message) error {
				select {
				case <-failed:
				default:
					close(failed)
				}
				return errors.New("payment service said 503")
			}, consumer.LoopConfig{})
		}()
		k.within(failed, loopBound, func() string { return "the loop never called its handler" })
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("loop: %v", err)
		}
		p := k.peek("q")
		if len(p) != 1 || p[0].Seq != seq || p[0].LastError != "payment service said 503" {
			t.Fatalf("after the failing handler: %+v", p)
		}
	}},
}
