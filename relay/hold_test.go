package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
)

// routeSink routes each message by a template, as the NATS, AMQP and Kafka
// sinks do: a message the template renders no route for is Unrenderable,
// and the routes it does render are recorded as delivered.
type routeSink struct {
	tmpl   *relay.Template
	routed chan string // each route rendered, while it has room
}

func (s *routeSink) Send(_ context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	for i, m := range msgs {
		route, err := s.tmpl.Render(m)
		if err == nil && (route == "" || strings.HasSuffix(route, ".")) {
			err = errors.New("not a valid subject: " + route)
		}
		if err != nil {
			out[i] = relay.Unrenderable(err)
			continue
		}
		select {
		case s.routed <- route:
		default:
		}
	}
	return out
}

// wait waits until n messages were routed, failing the test after
// relaytest.Timeout.
func (s *routeSink) wait(t *testing.T, n int) {
	t.Helper()
	timer := time.NewTimer(relaytest.Timeout)
	defer timer.Stop()
	for range n {
		select {
		case <-s.routed:
		case <-timer.C:
			t.Fatalf("fewer than %d messages routed", n)
		}
	}
}

func newRouteSink(t *testing.T, text string) *routeSink {
	t.Helper()
	tmpl, err := relay.ParseTemplate(text)
	if err != nil {
		t.Fatal(err)
	}
	return &routeSink{tmpl: tmpl, routed: make(chan string, 100)}
}

// TestTemplateHoldKeepsTheMessage: a message the route template renders
// no valid route for is held, never dead-lettered, though the queue allows
// two deliveries and the holds go on and on; it is said once, though the messages the template
// renders go on between the holds; and a relay with a template that
// renders it, started after, delivers it.
func TestTemplateHoldKeepsTheMessage(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{MaxDeliveryCount: 2})
	var msgs []outbox.Message
	for i := range 6 {
		m := outbox.Message{Body: []byte{'a' + byte(i)}}
		if i%2 == 0 {
			m.Subject = "paid"
		}
		msgs = append(msgs, m)
	}
	relaytest.Send(t, b.Store, msgs...)
	logs := &relaytest.Logs{}
	sink := newRouteSink(t, "orders.{{.Subject}}")
	obs := relaytest.NewObserver()
	// Each held message keeps its Send (its slot of Concurrency) until the
	// relay stops, as every hold does: three slots for three holds.
	r, err := relay.New(b.Store, relaytest.Queue, sink, relay.Config{Concurrency: 3, MaxBatch: 2, Observer: obs, Logger: logs.Logger(),
		HoldBackoff: consumer.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	stop := relaytest.Start(t, r)
	obs.WaitFor(t, "the others held again and again", func(c relaytest.Counts) bool { return c.Held >= 9 })
	sink.wait(t, 3)
	if c := obs.Counts(); c.Rejected != 0 || c.Abandoned != 0 {
		t.Fatalf("counts %+v: a message the template cannot route was given up", c)
	}
	dead, err := b.Store.PeekDeadLetters(context.Background(), relaytest.Queue, mqlite.PeekParams{})
	if err != nil || len(dead) != 0 {
		t.Fatalf("dead letters %+v (%v), want none", dead, err)
	}
	stop() // gives the held ones back, on their first delivery of two
	if c := obs.Counts(); c.Completed != 3 || c.Abandoned != 3 || c.Rejected != 0 {
		t.Fatalf("counts after the stop %+v, want 3 completed and 3 given back", c)
	}
	got := logs.Messages()
	if len(got) != 1 || !strings.Contains(got[0], "template") {
		t.Fatalf("%d warnings (the first: %q), want the template's fault said once", len(got), got[:min(len(got), 1)])
	}
	// The log says how the hold counts deliveries, and the count agrees:
	// one for the run that held them, none for the holds.
	if !strings.Contains(got[0], "each run of the relay that holds a message counts one delivery") {
		t.Errorf("the hold's log line does not say the run counted a delivery: %q", got[0])
	}
	left, err := b.Store.Peek(context.Background(), relaytest.Queue, mqlite.PeekParams{})
	if err != nil || len(left) != 3 {
		t.Fatalf("after the stop: %d messages, %v", len(left), err)
	}
	for _, m := range left {
		if m.DeliveryCount != 1 {
			t.Errorf("seq %d: delivery count %d after a run that held it many times, want 1", m.Seq, m.DeliveryCount)
		}
	}

	// The operator fixes the template and starts the relay again.
	fixed := newRouteSink(t, `orders.{{or .Subject "none"}}`)
	obs = relaytest.Relay(t, b.Store, fixed, relay.Config{})
	obs.WaitFor(t, "the held ones delivered", func(c relaytest.Counts) bool { return c.Completed == 3 })
	relaytest.Empty(t, b.Store)
}

// TestStopEndsAHold: cancelling Run ends a hold's wait at once, whatever
// the hold backoff and the drain timeout (an hour each here, so only the
// cancel can end it), and gives the held message back.
func TestStopEndsAHold(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a")})
	spy := relaytest.HoldSpy{Sink: sinkFunc(func(_ context.Context, msgs []mqlite.Message) []relay.Outcome {
		out := make([]relay.Outcome, len(msgs))
		for i := range out {
			out[i] = relay.Hold("no_stream", errors.New("no stream matches the subject"))
		}
		return out
	}), Held: make(chan error, 1)}
	obs := relaytest.NewObserver()
	logs := &relaytest.Logs{}
	r, err := relay.New(b.Store, relaytest.Queue, spy, relay.Config{Observer: obs, Logger: logs.Logger(),
		HoldBackoff: consumer.Backoff{Initial: time.Hour, Max: time.Hour}, DrainTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-spy.Held:
	case <-time.After(relaytest.Timeout):
		t.Fatal("no hold")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(relaytest.Timeout):
		t.Fatal("Run still waits out the hold after its ctx was cancelled")
	}
	if c := obs.Counts(); c.Abandoned != 1 || c.Rejected != 0 {
		t.Fatalf("counts %+v, want the held message given back", c)
	}
	// Given back claimable at once (the fake clock does not move): a hold
	// is not the message's failure, so no backoff delays it.
	msgs, err := b.Store.Peek(context.Background(), relaytest.Queue, mqlite.PeekParams{})
	if err != nil || len(msgs) != 1 || msgs[0].State != mqlite.StateActive {
		t.Fatalf("after the stop: %+v, %v; want the message active", msgs, err)
	}
}
