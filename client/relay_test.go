package client_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// chanSink delivers to a channel; a body "refuse" is refused for good.
type chanSink struct{ got chan<- string }

func (s chanSink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	for i, m := range msgs {
		if string(m.Body) == "refuse" {
			out[i] = relay.Outcome{DeadLetter: true, Reason: "refused"}
			continue
		}
		s.got <- string(m.Body)
	}
	return out
}

// settledSink reports each message the relay settled: "completed a" once
// its Complete went through, "rejected refuse" once it is dead-lettered.
type settledSink struct {
	consumer.NopObserver
	settled chan<- string
}

func (o settledSink) Completed(m mqlite.Message, _ time.Duration) {
	o.settled <- "completed " + string(m.Body)
}

func (o settledSink) Rejected(m mqlite.Message, _ time.Duration, _ error) {
	o.settled <- "rejected " + string(m.Body)
}

// TestRelayOverClient runs the relay unchanged over the network: it
// forwards every message of a queue read through the broker, and a refused
// one is dead-lettered.
func TestRelayOverClient(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	b.Send(t, "q", outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("refuse")}, outbox.Message{Body: []byte("b")})
	got, settled := make(chan string, 10), make(chan string, 10)
	r, err := relay.New(b.src, "q", chanSink{got}, relay.Config{Concurrency: 2, MaxBatch: 10, Observer: settledSink{settled: settled}})
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
	// Stop the relay once every message is settled: the sink seeing a and
	// b is not enough, since their Completes and the Reject of "refuse"
	// go to the broker after Send returns, and a relay stopped in between
	// leaves them to come again.
	seen, done := map[string]bool{}, map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(seen) < 2 || len(done) < 3 {
		select {
		case s := <-got:
			seen[s] = true
		case s := <-settled:
			done[s] = true
		case <-timeout:
			t.Fatalf("relayed %v, settled %v", seen, done)
		}
	}
	if want := map[string]bool{"completed a": true, "completed b": true, "rejected refuse": true}; !maps.Equal(done, want) {
		t.Errorf("settled %v, want %v", done, want)
	}
	cancel()
	wg.Wait()
	dead, err := b.src.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	left, err := b.src.Peek(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(dead) != 1 || dead[0].DeadLetterReason != "refused" || len(left) != 0 {
		t.Fatalf("dead %+v, left %v", dead, testdb.Seqs(left))
	}
}
