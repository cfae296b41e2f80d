package metrics_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/metrics"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// fakeSink delivers every message but those whose body is "bad", which it
// refuses for good.
type fakeSink struct{}

func (fakeSink) Send(_ context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	for i, m := range msgs {
		if string(m.Body) == "bad" {
			out[i] = relay.DeadLetter("fake: refused", "")
		}
	}
	return out
}

// signalling passes each settled outcome on, then signals it.
type signalling struct {
	consumer.Observer
	done chan<- struct{}
}

func (s signalling) Completed(m mqlite.Message, took time.Duration) {
	s.Observer.Completed(m, took)
	s.done <- struct{}{}
}

func (s signalling) Rejected(m mqlite.Message, took time.Duration, cause error) {
	s.Observer.Rejected(m, took, cause)
	s.done <- struct{}{}
}

// send sends msgs to queue "out" of st in one transaction.
func send(t *testing.T, st *mqlite.Store, msgs ...outbox.Message) {
	t.Helper()
	err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "out", msgs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRelayObserverOnARelay runs a relay over an embedded store into a
// fake sink and counts its outcomes under the sink's name.
func TestRelayObserverOnARelay(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "out", mqlite.QueueOptions{})
	ctx := context.Background()
	send(t, tb.Store, outbox.Message{Body: []byte("ok1")}, outbox.Message{Body: []byte("bad")}, outbox.Message{Body: []byte("ok2")})
	ro := metrics.NewRelayObserver(nil)
	done := make(chan struct{})
	r, err := relay.New(tb.Store, "out", fakeSink{}, relay.Config{Concurrency: 1,
		Observer: signalling{Observer: ro.Sink("fake"), done: done}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	timeout := time.After(10 * time.Second)
	for range 3 {
		select {
		case <-done:
		case <-timeout:
			t.Fatal("the relay did not settle 3 messages in 10s")
		}
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP mqlite_relay_outcomes_total Messages a relay handed to its sink, by outcome: delivered, retried, dead_lettered, lock_lost, settle_failed.
# TYPE mqlite_relay_outcomes_total counter
mqlite_relay_outcomes_total{outcome="dead_lettered",queue="out",sink="fake"} 1
mqlite_relay_outcomes_total{outcome="delivered",queue="out",sink="fake"} 2
`
	if err := testutil.CollectAndCompare(ro, strings.NewReader(want), "mqlite_relay_outcomes_total"); err != nil {
		t.Fatal(err)
	}
}

// holdingSink holds every message (the far side has no stream for it) for
// its first holds Sends, then delivers.
type holdingSink struct{ holds *atomic.Int32 }

func (s holdingSink) Send(_ context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	if s.holds.Add(-1) >= 0 {
		for i := range out {
			out[i] = relay.Hold("no_stream", errors.New("fake: no stream"))
		}
	}
	return out
}

// signallingHolds is signalling that passes holds on too.
type signallingHolds struct {
	signalling
	held relay.HoldObserver
}

func (s signallingHolds) Held(m mqlite.Message, reason string, cause error) {
	s.held.Held(m, reason, cause)
}

// TestRelayObserverCountsHolds: a sink that holds a message twice before
// it delivers it shows two holds under the sink's name and reason, and one
// delivery.
func TestRelayObserverCountsHolds(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "out", mqlite.QueueOptions{})
	ctx := context.Background()
	send(t, tb.Store, outbox.Message{Body: []byte("a")})
	ro := metrics.NewRelayObserver(nil)
	done := make(chan struct{}, 1)
	obs, ok := ro.Sink("fake").(relay.HoldObserver)
	if !ok {
		t.Fatal("the sink observer is no relay.HoldObserver")
	}
	holds := &atomic.Int32{}
	holds.Store(2)
	r, err := relay.New(tb.Store, "out", holdingSink{holds: holds}, relay.Config{Concurrency: 1,
		HoldBackoff: consumer.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
		Observer:    signallingHolds{signalling: signalling{Observer: ro.Sink("fake"), done: done}, held: obs}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the relay did not deliver the message in a minute")
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP mqlite_relay_holds_total Times a relay's sink held a message because the far side had no place for it, by reason: no_stream, no_topic, no_exchange, unroutable, template (a route template that renders no valid destination).
# TYPE mqlite_relay_holds_total counter
mqlite_relay_holds_total{queue="out",reason="no_stream",sink="fake"} 2
# HELP mqlite_relay_outcomes_total Messages a relay handed to its sink, by outcome: delivered, retried, dead_lettered, lock_lost, settle_failed.
# TYPE mqlite_relay_outcomes_total counter
mqlite_relay_outcomes_total{outcome="delivered",queue="out",sink="fake"} 1
`
	if err := testutil.CollectAndCompare(ro, strings.NewReader(want), "mqlite_relay_holds_total", "mqlite_relay_outcomes_total"); err != nil {
		t.Fatal(err)
	}
}
