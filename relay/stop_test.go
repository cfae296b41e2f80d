package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
)

// TestHeldMessageStaysWhenRunStops: a message the sink holds (the far side
// has no place for it) when Run stops is given back, not completed: it is
// still in the queue, claimable, and the next Run delivers it. The drain
// is off, so that the stop cancels the wait for the next attempt at once.
func TestHeldMessageStaysWhenRunStops(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	seqs := relaytest.Send(t, b.Store, outbox.Message{Body: []byte("held")})
	held := make(chan struct{})
	first := relaytest.NewObserver()
	r, err := relay.New(b.Store, relaytest.Queue, sinkFunc(func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
		out := make([]relay.Outcome, len(msgs))
		for i := range out {
			out[i] = relay.Hold("no_stream", errors.New("no stream matches subject"))
		}
		select {
		case held <- struct{}{}:
		default:
		}
		return out
	}), relay.Config{
		Concurrency: 1, Observer: first, Logger: slog.New(slog.DiscardHandler),
		HoldBackoff: consumer.Backoff{Initial: time.Hour, Max: time.Hour}, DrainTimeout: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := relaytest.Start(t, r)
	select {
	case <-held:
	case <-time.After(relaytest.Timeout):
		t.Fatal("the sink was never asked")
	}
	stop() // while the message is held, waiting out the hold backoff
	if c := first.Counts(); c.Completed != 0 || c.Rejected != 0 {
		t.Fatalf("the stopped run settled the held message: %+v", c)
	}
	msgs, err := b.Store.Peek(context.Background(), relaytest.Queue, mqlite.PeekParams{})
	if err != nil || len(msgs) != 1 || msgs[0].Seq != seqs[0] || msgs[0].State != mqlite.StateActive {
		t.Fatalf("after the run stopped: %+v, %v; want seq %d active", msgs, err, seqs[0])
	}
	delivered := make(chan string, 1)
	obs := start(t, b.Store, sinkFunc(func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
		for _, m := range msgs {
			delivered <- string(m.Body)
		}
		return make([]relay.Outcome, len(msgs))
	}), relay.Config{Concurrency: 1})
	obs.WaitFor(t, "the held message delivered by the next run", func(c relaytest.Counts) bool { return c.Completed == 1 })
	if got := <-delivered; got != "held" {
		t.Fatalf("the next run delivered %q, want %q", got, "held")
	}
	relaytest.Empty(t, b.Store)
}
