package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
)

// sinkFunc is a Sink from a function.
type sinkFunc func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome

func (f sinkFunc) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	return f(ctx, msgs)
}

func start(t *testing.T, src consumer.Store, sink relay.Sink, opts relay.Config) *relaytest.Observer {
	t.Helper()
	return relaytest.Relay(t, src, sink, opts)
}

func TestID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m    mqlite.Message
		want string
	}{
		{mqlite.Message{Queue: "orders", Seq: 42}, "orders:42"},
		{mqlite.Message{Queue: "orders", Seq: 42, MessageID: "order-7"}, "order-7"},
	} {
		if got := relay.ID(tc.m); got != tc.want {
			t.Errorf("ID(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}

func TestOutcomesSettle(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	seqs := relaytest.Send(t, b.Store,
		outbox.Message{Body: []byte("deliver")},
		outbox.Message{Body: []byte("retry")},
		outbox.Message{Body: []byte("later")},
		outbox.Message{Body: []byte("refuse")})
	obs := start(t, b.Store, sinkFunc(func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
		out := make([]relay.Outcome, len(msgs))
		for i, m := range msgs {
			switch string(m.Body) {
			case "deliver":
				out[i] = relay.Delivered()
			case "retry":
				out[i] = relay.RetryAfter(relaytest.ErrInjected, 0)
			case "later":
				out[i] = relay.RetryAfter(relaytest.ErrInjected, time.Minute)
			case "refuse":
				out[i] = relay.DeadLetter("far side: refused", "422: no such customer")
			}
		}
		return out
	}), relay.Config{Backoff: consumer.Backoff{Initial: 5 * time.Second, Jitter: -1}})
	obs.WaitFor(t, "every outcome", func(c relaytest.Counts) bool { return c.Completed+c.Abandoned+c.Rejected == 4 })
	msgs, err := b.Store.Peek(context.Background(), relaytest.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]time.Duration{seqs[1]: 5 * time.Second, seqs[2]: time.Minute}
	if len(msgs) != 2 {
		t.Fatalf("queue holds %d messages, want the 2 retried", len(msgs))
	}
	for _, m := range msgs {
		if m.State != mqlite.StateScheduled || !m.VisibleAt.Equal(b.Clock.Now().Add(want[m.Seq])) {
			t.Errorf("message %d: %s at %v, want scheduled after %v", m.Seq, m.State, m.VisibleAt, want[m.Seq])
		}
		// The sink's error is kept with the message as its last error.
		if !strings.Contains(m.LastError, relaytest.ErrInjected.Error()) {
			t.Errorf("message %d: last error %q, want the sink's %q", m.Seq, m.LastError, relaytest.ErrInjected)
		}
	}
	dead, err := b.Store.PeekDeadLetters(context.Background(), relaytest.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Seq != seqs[3] || dead[0].DeadLetterReason != "far side: refused" || dead[0].DeadLetterDescription != "422: no such customer" {
		t.Fatalf("dead letters %+v", dead)
	}
}

func TestWrongNumberOfOutcomesRetries(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a")})
	obs := start(t, b.Store, sinkFunc(func(context.Context, []mqlite.Message) []relay.Outcome { return nil }), relay.Config{})
	c := obs.WaitFor(t, "the abandon", func(c relaytest.Counts) bool { return c.Abandoned == 1 })
	if c.Completed != 0 {
		t.Fatalf("counts %+v", c)
	}
}

// twoOfAGroup hands out two messages of one group at once, as a store that
// broke its group promise (a redrive) would.
type twoOfAGroup struct{ consumer.Store }

func (s twoOfAGroup) Receive(ctx context.Context, q string, o mqlite.ReceiveOptions) ([]mqlite.Message, error) {
	msgs, err := s.Store.Receive(ctx, q, o)
	for i := range msgs {
		msgs[i].GroupID = "g"
	}
	return msgs, err
}

func TestNeverTwoOfAGroupInFlight(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("b")})
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight, calls := 0, 0
	obs := start(t, twoOfAGroup{b.Store}, sinkFunc(func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
		mu.Lock()
		inFlight++
		calls++
		first := calls == 1
		if inFlight > 1 {
			t.Errorf("two messages of a group in flight")
		}
		mu.Unlock()
		if first {
			<-release // hold the group while the other message comes
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return make([]relay.Outcome, len(msgs))
	}), relay.Config{Concurrency: 2, MaxBatch: 1, Backoff: consumer.Backoff{Initial: -1}})
	c := obs.WaitFor(t, "the busy group's abandon", func(c relaytest.Counts) bool { return c.Abandoned > 0 })
	if !errors.Is(c.Causes[0], relay.ErrGroupBusy) {
		t.Fatalf("cause %v, want ErrGroupBusy", c.Causes[0])
	}
	close(release)
	obs.WaitFor(t, "both deliveries", func(c relaytest.Counts) bool { return c.Completed == 2 })
	relaytest.Empty(t, b.Store)
}

// TestHoldKeepsTheMessages: a sink whose far side has no place for the
// messages (Hold) makes the relay keep them: no delivery is counted, no
// message is abandoned or dead-lettered, the cause is logged once, and the
// messages go out, on their first delivery, once the far side takes them.
func TestHoldKeepsTheMessages(t *testing.T) {
	t.Parallel()
	const n, holds = 30, 5
	b := relaytest.Open(t, mqlite.QueueOptions{MaxDeliveryCount: 2})
	relaytest.Send(t, b.Store, relaytest.Bodies(n, 16, false)...)
	var mu sync.Mutex
	calls, counts := 0, map[int]int{}
	logs := &relaytest.Logs{}
	obs := start(t, b.Store, sinkFunc(func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
		mu.Lock()
		defer mu.Unlock()
		calls++
		out := make([]relay.Outcome, len(msgs))
		for i, m := range msgs {
			if calls <= holds {
				out[i] = relay.Hold("no_stream", errors.New("nats: no stream matches subject"))
				continue
			}
			counts[m.DeliveryCount]++
		}
		return out
	}), relay.Config{Concurrency: 1, HoldBackoff: consumer.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}, Logger: logs.Logger()})
	c := obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
	if c.Abandoned != 0 || c.Rejected != 0 {
		t.Fatalf("counts %+v: a held message was abandoned or dead-lettered", c)
	}
	relaytest.Empty(t, b.Store)
	mu.Lock()
	defer mu.Unlock()
	if counts[1] != n {
		t.Fatalf("delivery counts %v, want all %d on their first delivery", counts, n)
	}
	if got := logs.Messages(); len(got) != 1 || !strings.Contains(got[0], "holding") {
		t.Fatalf("logs %q, want one warning of the hold", got)
	}
}

// gateFunc is a Gate from a function.
type gateFunc func(ctx context.Context, msgs []mqlite.Message) error

func (f gateFunc) Wait(ctx context.Context, msgs []mqlite.Message) error { return f(ctx, msgs) }

// TestGateHoldsBatchesBack: nothing reaches the sink before the gate lets
// its batch go.
func TestGateHoldsBatchesBack(t *testing.T) {
	t.Parallel()
	const n = 10
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, relaytest.Bodies(n, 16, false)...)
	open := make(chan struct{})
	waited := make(chan struct{}, 1)
	var opened atomic.Bool
	obs := start(t, b.Store, sinkFunc(func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
		if !opened.Load() {
			t.Errorf("the sink got %d messages before the gate opened", len(msgs))
		}
		return make([]relay.Outcome, len(msgs))
	}), relay.Config{Gate: gateFunc(func(ctx context.Context, msgs []mqlite.Message) error {
		select {
		case waited <- struct{}{}:
		default:
		}
		select {
		case <-open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})})
	select {
	case <-waited:
	case <-time.After(relaytest.Timeout):
		t.Fatal("the relay never waited on its gate")
	}
	if c := obs.Counts(); c.Completed != 0 {
		t.Fatalf("counts %+v before the gate opened", c)
	}
	opened.Store(true)
	close(open)
	obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
}

func TestRunStopsAndReportsAMissingQueue(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	r, err := relay.New(b.Store, "nope", sinkFunc(nil), relay.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("Run = %v, want ErrQueueNotFound", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	sink := sinkFunc(nil)
	for _, tc := range []struct {
		name  string
		src   consumer.Store
		queue string
		sink  relay.Sink
		opts  relay.Config
	}{
		{"nil store", nil, "q", sink, relay.Config{}},
		{"nil sink", b.Store, "q", nil, relay.Config{}},
		{"no queue", b.Store, "", sink, relay.Config{}},
		{"negative concurrency", b.Store, "q", sink, relay.Config{Concurrency: -1}},
		{"huge batch", b.Store, "q", sink, relay.Config{MaxBatch: mqlite.MaxReceiveBatch + 1}},
	} {
		if _, err := relay.New(tc.src, tc.queue, tc.sink, tc.opts); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("%s: New = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}
