package metrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/metrics"
)

// event is one call of consumer.Observer.
type event func(o consumer.Observer, m mqlite.Message)

var (
	completed = func(o consumer.Observer, m mqlite.Message) { o.Completed(m, 10*time.Millisecond) }
	abandoned = func(o consumer.Observer, m mqlite.Message) {
		o.Abandoned(m, 20*time.Millisecond, time.Second, errors.New("boom"))
	}
	released = func(o consumer.Observer, m mqlite.Message) { o.Abandoned(m, 0, 0, nil) } // at shutdown, never handled
	rejected = func(o consumer.Observer, m mqlite.Message) { o.Rejected(m, 30*time.Millisecond, errors.New("bad")) }
	lockLost = func(o consumer.Observer, m mqlite.Message) { o.LockLost(m, mqlite.ErrLockLost) }
	failed   = func(o consumer.Observer, m mqlite.Message) { o.SettleFailed(m, mqlite.ErrClosed) }
)

// TestObserver: every Loop event lands in its outcome counter, and the
// handler histogram counts the handlers that ran.
func TestObserver(t *testing.T) {
	t.Parallel()
	o := metrics.NewObserver(nil)
	m := mqlite.Message{Queue: "q", Seq: 1}
	o.Received("q", 7)
	for _, e := range []event{completed, completed, abandoned, released, rejected, lockLost, failed} {
		e(o, m)
	}
	const want = `
# HELP mqlite_loop_outcomes_total Deliveries consumer.Loop ended, by outcome: completed, abandoned, rejected, lock_lost, settle_failed.
# TYPE mqlite_loop_outcomes_total counter
mqlite_loop_outcomes_total{outcome="abandoned",queue="q"} 2
mqlite_loop_outcomes_total{outcome="completed",queue="q"} 2
mqlite_loop_outcomes_total{outcome="lock_lost",queue="q"} 1
mqlite_loop_outcomes_total{outcome="rejected",queue="q"} 1
mqlite_loop_outcomes_total{outcome="settle_failed",queue="q"} 1
# HELP mqlite_loop_received_total Messages consumer.Loop claimed.
# TYPE mqlite_loop_received_total counter
mqlite_loop_received_total{queue="q"} 7
`
	if err := testutil.CollectAndCompare(o, strings.NewReader(want), "mqlite_loop_outcomes_total", "mqlite_loop_received_total"); err != nil {
		t.Fatal(err)
	}
	// Handlers that ran: 2 completed, 1 abandoned (the released one never ran), 1 rejected.
	if n := testutil.CollectAndCount(o, "mqlite_handler_duration_seconds"); n != 3 {
		t.Fatalf("%d handler series, want 3 (completed, abandoned, rejected)", n)
	}
}

// TestRelayObserver: each sink's outcomes are counted under its own label.
func TestRelayObserver(t *testing.T) {
	t.Parallel()
	ro := metrics.NewRelayObserver(&metrics.ObserverConfig{Buckets: []float64{0.01, 0.1}})
	m := mqlite.Message{Queue: "out", Seq: 1}
	for _, c := range []struct {
		sink   string
		events []event
	}{
		{"webhook", []event{completed, completed, abandoned, rejected}},
		{"nats", []event{completed, lockLost, failed, released}},
	} {
		obs := ro.Sink(c.sink)
		for _, e := range c.events {
			e(obs, m)
		}
	}
	const want = `
# HELP mqlite_relay_outcomes_total Messages a relay handed to its sink, by outcome: delivered, retried, dead_lettered, lock_lost, settle_failed.
# TYPE mqlite_relay_outcomes_total counter
mqlite_relay_outcomes_total{outcome="dead_lettered",queue="out",sink="webhook"} 1
mqlite_relay_outcomes_total{outcome="delivered",queue="out",sink="nats"} 1
mqlite_relay_outcomes_total{outcome="delivered",queue="out",sink="webhook"} 2
mqlite_relay_outcomes_total{outcome="lock_lost",queue="out",sink="nats"} 1
mqlite_relay_outcomes_total{outcome="retried",queue="out",sink="nats"} 1
mqlite_relay_outcomes_total{outcome="retried",queue="out",sink="webhook"} 1
mqlite_relay_outcomes_total{outcome="settle_failed",queue="out",sink="nats"} 1
`
	if err := testutil.CollectAndCompare(ro, strings.NewReader(want), "mqlite_relay_outcomes_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(ro, "mqlite_relay_send_duration_seconds"); n != 2 {
		t.Fatalf("%d send-duration series, want 2 (one per sink)", n)
	}
}
