package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/metrics"
	"github.com/mqlite/mqlite/outbox"
)

// TestCollectorOnAnEmbeddedStore runs testdb.MetricsWorkload on an
// embedded store and compares the Collector's gauges and counters with the
// exact expected exposition; the histograms count one claim per Receive
// and one settlement per settle call.
func TestCollectorOnAnEmbeddedStore(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", testdb.WorkloadQueue)
	ctx := context.Background()
	send := func(body string) {
		_, err := outbox.Send(ctx, tb.Store, "q", outbox.Message{Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
	}
	testdb.MetricsWorkload(t, tb.Store, "q", send, tb.Clock)

	c := metrics.NewCollector(tb.Store, &metrics.CollectorConfig{ConstLabels: prometheus.Labels{"store": "test"}})
	const want = `
# HELP mqlite_queue_abandoned_total Deliveries given back by Abandon, dead-lettered ones included.
# TYPE mqlite_queue_abandoned_total counter
mqlite_queue_abandoned_total{queue="q",store="test"} 2
# HELP mqlite_queue_completed_total Deliveries settled by Complete (replays not counted).
# TYPE mqlite_queue_completed_total counter
mqlite_queue_completed_total{queue="q",store="test"} 2
# HELP mqlite_queue_dead_lettered_total Messages that became dead letters, for any reason.
# TYPE mqlite_queue_dead_lettered_total counter
mqlite_queue_dead_lettered_total{queue="q",store="test"} 2
# HELP mqlite_queue_dead_letters Dead letters of the queue (the dead_lettered state of mqlite_queue_messages).
# TYPE mqlite_queue_dead_letters gauge
mqlite_queue_dead_letters{queue="q",store="test"} 2
# HELP mqlite_queue_lock_lost_total Leases that ended without a settlement and were put back (or dead-lettered).
# TYPE mqlite_queue_lock_lost_total counter
mqlite_queue_lock_lost_total{queue="q",store="test"} 1
# HELP mqlite_queue_messages Messages of the queue per state, as of the last commit.
# TYPE mqlite_queue_messages gauge
mqlite_queue_messages{queue="q",state="active",store="test"} 1
mqlite_queue_messages{queue="q",state="dead_lettered",store="test"} 2
mqlite_queue_messages{queue="q",state="deferred",store="test"} 0
mqlite_queue_messages{queue="q",state="locked",store="test"} 0
mqlite_queue_messages{queue="q",state="scheduled",store="test"} 0
# HELP mqlite_queue_received_total Deliveries: peek-lock claims (Receive, ReceiveDeferred) and receive-and-delete.
# TYPE mqlite_queue_received_total counter
mqlite_queue_received_total{queue="q",store="test"} 6
# HELP mqlite_queue_redelivered_total Deliveries of a message delivered before (delivery count above 1).
# TYPE mqlite_queue_redelivered_total counter
mqlite_queue_redelivered_total{queue="q",store="test"} 2
# HELP mqlite_queue_rejected_total Deliveries dead-lettered by Reject.
# TYPE mqlite_queue_rejected_total counter
mqlite_queue_rejected_total{queue="q",store="test"} 1
# HELP mqlite_queue_sent_total Messages written to the queue (sends and topic fan-out; collapsed resends not counted).
# TYPE mqlite_queue_sent_total counter
mqlite_queue_sent_total{queue="q",store="test"} 5
`
	names := []string{"mqlite_queue_messages", "mqlite_queue_dead_letters", "mqlite_queue_sent_total",
		"mqlite_queue_received_total", "mqlite_queue_completed_total", "mqlite_queue_abandoned_total",
		"mqlite_queue_rejected_total", "mqlite_queue_dead_lettered_total", "mqlite_queue_lock_lost_total",
		"mqlite_queue_redelivered_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		switch f.GetName() {
		case metrics.NameClaim, metrics.NameSettle:
			h := f.GetMetric()[0].GetHistogram()
			want := map[string]uint64{metrics.NameClaim: 6, metrics.NameSettle: 7}[f.GetName()]
			if h.GetSampleCount() != want || len(h.GetBucket()) != len(mqlite.DurationBuckets()) {
				t.Errorf("%s: %d samples in %d buckets, want %d in %d", f.GetName(), h.GetSampleCount(),
					len(h.GetBucket()), want, len(mqlite.DurationBuckets()))
			}
		}
	}
}

// TestCollectorFailsTheScrapeOnAClosedStore: the store's error reaches the
// registry instead of an empty, healthy-looking scrape.
func TestCollectorFailsTheScrapeOnAClosedStore(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(tb.Store, nil))
	if err := tb.Store.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), mqlite.ErrClosed.Error()) {
		t.Fatalf("Gather on a closed store: %v", err)
	}
}

// TestCollectorAgesAndBytes: the bytes gauge follows the bodies sent and
// removed, the age gauges the store's Clock, and an empty queue reports 0.
func TestCollectorAgesAndBytes(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	tb.Queue(t, "empty", mqlite.QueueOptions{})
	ctx := context.Background()
	err := tb.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "q", []outbox.Message{{Body: []byte("aaaa")}, {Body: []byte("bb")}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tb.Clock.Advance(30 * time.Second)
	msgs, err := tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	if err := tb.Store.Reject(ctx, msgs[0].Lock(), "bad", ""); err != nil {
		t.Fatal(err)
	}
	tb.Clock.Advance(60 * time.Second)
	const want = `
# HELP mqlite_queue_bytes Body bytes of the queue's messages, dead letters included, as of the last commit.
# TYPE mqlite_queue_bytes gauge
mqlite_queue_bytes{queue="empty"} 0
mqlite_queue_bytes{queue="q"} 6
# HELP mqlite_queue_oldest_active_age_seconds Age of the queue's claimable message of lowest sequence number; 0 when none.
# TYPE mqlite_queue_oldest_active_age_seconds gauge
mqlite_queue_oldest_active_age_seconds{queue="empty"} 0
mqlite_queue_oldest_active_age_seconds{queue="q"} 90
# HELP mqlite_queue_oldest_dead_letter_age_seconds Time since the queue's dead letter of lowest sequence number was dead-lettered; 0 when none.
# TYPE mqlite_queue_oldest_dead_letter_age_seconds gauge
mqlite_queue_oldest_dead_letter_age_seconds{queue="empty"} 0
mqlite_queue_oldest_dead_letter_age_seconds{queue="q"} 60
`
	c := metrics.NewCollector(tb.Store, nil)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		metrics.NameBytes, metrics.NameOldestActive, metrics.NameOldestDeadLetter); err != nil {
		t.Fatal(err)
	}
}
