package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// chanSink delivers to a channel; a body "refuse" is refused for good.
type chanSink struct{ got chan<- string }

func (s chanSink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	for i, m := range msgs {
		if string(m.Body) == "refuse" {
			out[i] = relay.Outcome{Permanent: true, Reason: "refused"}
			continue
		}
		s.got <- string(m.Body)
	}
	return out
}

// TestRelayOverClient runs the relay unchanged over the network: it
// forwards every message of a queue read through the broker, and a refused
// one is dead-lettered.
func TestRelayOverClient(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	b.send(t, outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("refuse")}, outbox.Message{Body: []byte("b")})
	got := make(chan string, 10)
	r, err := relay.New(b.src, "q", chanSink{got}, relay.Options{Concurrency: 2, MaxBatch: 10})
	must(t, err)
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.Run(rctx); err != nil {
			t.Error(err)
		}
	}()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case s := <-got:
			seen[s] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("relayed %v", seen)
		}
	}
	cancel()
	wg.Wait()
	dead, err := b.src.PeekDeadLetters(ctx, "q", mqlite.PeekOptions{})
	must(t, err)
	left, err := b.src.Peek(ctx, "q", mqlite.PeekOptions{})
	must(t, err)
	if len(dead) != 1 || dead[0].DeadLetterReason != "refused" || len(left) != 0 {
		t.Fatalf("dead %+v, left %v", dead, seqsOf(left))
	}
}
