package metrics_test

import (
	"context"
	"strings"
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
			out[i] = relay.Permanent("fake: refused", "")
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

// TestRelayObserverOnARelay runs a relay over an embedded store into a
// fake sink and counts its outcomes under the sink's name.
func TestRelayObserverOnARelay(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "out", mqlite.QueueOptions{})
	ctx := context.Background()
	err := tb.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "out", []outbox.Message{
			{Body: []byte("ok1")}, {Body: []byte("bad")}, {Body: []byte("ok2")}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
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
