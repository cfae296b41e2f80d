package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/metrics"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// scriptSource answers its Fetches from a script (a batch or an error),
// then blocks until ctx ends; idle is closed then.
type scriptSource struct {
	script []any
	idle   chan struct{}
}

func (s *scriptSource) Fetch(ctx context.Context, _ int) ([]relay.Inbound, error) {
	if len(s.script) == 0 {
		close(s.idle)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	next := s.script[0]
	s.script = s.script[1:]
	if err, ok := next.(error); ok {
		return nil, err
	}
	return next.([]relay.Inbound), nil
}

func (s *scriptSource) Ack(context.Context, []relay.Inbound) error  { return nil }
func (s *scriptSource) Nack(context.Context, []relay.Inbound) error { return nil }
func (s *scriptSource) Redelivery() time.Duration                   { return time.Second }

func TestRelayObserverCountsAnIntake(t *testing.T) {
	t.Parallel()
	b := testdb.OpenQueue(t, "in", mqlite.QueueOptions{DedupWindow: 2 * time.Hour})
	msg := func(id string) relay.Inbound {
		return relay.Inbound{Message: outbox.Message{MessageID: id, Body: []byte(id)}}
	}
	src := &scriptSource{idle: make(chan struct{}), script: []any{
		[]relay.Inbound{msg("a"), msg("b")},
		relay.Gone("no_stream", errors.New("stream not found")),
		[]relay.Inbound{msg("b"), {Message: outbox.Message{MessageID: "c", Body: []byte("c")}, Time: time.Now().Add(-time.Hour)}},
	}}
	ro := metrics.NewRelayObserver(nil)
	in, err := relay.NewIntake(b.Store, "in", src, relay.IntakeConfig{
		Observer: ro.Source("nats"), HoldBackoff: consumer.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	<-src.idle
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := `
# HELP mqlite_relay_intake_holds_total Times an intake held: its source gone (no_stream, no_queue, no_topic), or a message the queue refused, held aside in the hold queue (refused).
# TYPE mqlite_relay_intake_holds_total counter
mqlite_relay_intake_holds_total{queue="in",reason="no_stream",source="nats"} 1
# HELP mqlite_relay_intake_total Messages an intake committed from its source, by outcome: taken, duplicate (the queue had it already: a delivery again).
# TYPE mqlite_relay_intake_total counter
mqlite_relay_intake_total{outcome="duplicate",queue="in",source="nats"} 1
mqlite_relay_intake_total{outcome="taken",queue="in",source="nats"} 3
`
	if err := testutil.CollectAndCompare(ro, strings.NewReader(want), "mqlite_relay_intake_total", "mqlite_relay_intake_holds_total"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ro)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	lag := -1.0
	for _, f := range families {
		if f.GetName() == "mqlite_relay_intake_lag_seconds" {
			lag = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if lag < 3600 || lag > 4000 {
		t.Errorf("lag %v s, want the hour since c was stored", lag)
	}
}
