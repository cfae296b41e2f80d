package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mqlite/mqlite"
)

// Store is what NewCollector reads: *mqlite.Store satisfies it.
type Store interface {
	// Metrics returns every queue's counts; see mqlite.Store.Metrics.
	Metrics(ctx context.Context) ([]mqlite.QueueMetrics, error)
}

var _ Store = (*mqlite.Store)(nil)

// AgeStore is what a Store may add for the age gauges: *mqlite.Store
// satisfies it. A Store without it has no age gauges.
type AgeStore interface {
	// Ages returns every queue's oldest ages; see mqlite.Store.Ages.
	Ages(ctx context.Context) ([]mqlite.QueueAges, error)
}

var _ AgeStore = (*mqlite.Store)(nil)

// ageTimeout bounds the wait of a scrape's Ages for the store's
// connection.
const ageTimeout = 5 * time.Second

// CollectorConfig configures NewCollector. A nil *CollectorConfig means the
// defaults.
type CollectorConfig struct {
	// ConstLabels are added to every metric, to tell two stores of one
	// process apart (e.g. {"store": "billing"}). Defaults to none.
	ConstLabels prometheus.Labels
}

// The metric names of Collector; docs/operations.md describes each.
const (
	NameMessages         = "mqlite_queue_messages"
	NameDeadLetters      = "mqlite_queue_dead_letters"
	NameBytes            = "mqlite_queue_bytes"
	NameOldestActive     = "mqlite_queue_oldest_active_age_seconds"
	NameOldestDeadLetter = "mqlite_queue_oldest_dead_letter_age_seconds"
	NameConsumers        = "mqlite_queue_consumers"
	NameWaiting          = "mqlite_queue_waiting_receives"
	NamePaused           = "mqlite_queue_paused"
	NameClaim            = "mqlite_claim_duration_seconds"
	NameSettle           = "mqlite_settle_duration_seconds"
)

// counterNames are the event counters, in the order of counterValues.
var counterNames = [...]struct{ name, help string }{
	{"mqlite_queue_sent_total", "Messages written to the queue (sends and topic fan-out; collapsed resends not counted)."},
	{"mqlite_queue_received_total", "Deliveries: peek-lock claims (Receive, ReceiveDeferred) and receive-and-delete."},
	{"mqlite_queue_completed_total", "Deliveries settled by Complete (replays not counted)."},
	{"mqlite_queue_abandoned_total", "Deliveries given back by Abandon, dead-lettered ones included."},
	{"mqlite_queue_rejected_total", "Deliveries dead-lettered by Reject."},
	{"mqlite_queue_dead_lettered_total", "Messages that became dead letters, for any reason."},
	{"mqlite_queue_lock_lost_total", "Leases that ended without a settlement and were put back (or dead-lettered)."},
	{"mqlite_queue_redelivered_total", "Deliveries of a message delivered before (delivery count above 1)."},
}

func counterValues(c mqlite.QueueCounters) [len(counterNames)]int64 {
	return [...]int64{c.Sent, c.Received, c.Completed, c.Abandoned, c.Rejected, c.DeadLettered, c.LockLost, c.Redelivered}
}

// Collector is a prometheus.Collector over a store's per-queue counts. It
// is safe for concurrent use; a scrape calls Store.Metrics once and never
// blocks on the store's connection.
type Collector struct {
	src                   Store
	messages, deadLetters *prometheus.Desc
	bytes                 *prometheus.Desc
	oldest, oldestDead    *prometheus.Desc
	consumers, waiting    *prometheus.Desc
	paused                *prometheus.Desc
	counters              [len(counterNames)]*prometheus.Desc
	claim, settle         *prometheus.Desc
	upperBounds           []float64
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector of src's counts. Register it:
// prometheus.MustRegister(metrics.NewCollector(store, nil)).
func NewCollector(src Store, opts *CollectorConfig) *Collector {
	if opts == nil {
		opts = &CollectorConfig{}
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"queue"}, labels...), opts.ConstLabels)
	}
	c := &Collector{
		src:         src,
		messages:    desc(NameMessages, "Messages of the queue per state, as of the last commit.", "state"),
		deadLetters: desc(NameDeadLetters, "Dead letters of the queue (the dead_lettered state of mqlite_queue_messages)."),
		bytes:       desc(NameBytes, "Body bytes of the queue's messages, dead letters included, as of the last commit."),
		consumers:   desc(NameConsumers, "Live receivers of the queue: in-process loops and the broker's remote receivers (mqlite.Store.Receivers)."),
		paused:      desc(NamePaused, "1 while the queue is paused (receives claim nothing), else 0."),
		waiting:     desc(NameWaiting, "Receive calls of the queue running now (long-polls waiting included)."),
		oldest:      desc(NameOldestActive, "Age of the queue's claimable message of lowest sequence number; 0 when none."),
		oldestDead:  desc(NameOldestDeadLetter, "Time since the queue's dead letter of lowest sequence number was dead-lettered; 0 when none."),
		claim:       desc(NameClaim, "Duration of the claim transactions of Receive, empty ones included."),
		settle:      desc(NameSettle, "Duration of each settlement (Complete, Abandon, Reject, Defer; each lock of a batch)."),
	}
	for i, n := range counterNames {
		c.counters[i] = desc(n.name, n.help)
	}
	for _, b := range mqlite.DurationBuckets() {
		c.upperBounds = append(c.upperBounds, b.Seconds())
	}
	return c
}

// Describe sends the descriptors of every metric of c.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.messages
	ch <- c.deadLetters
	ch <- c.bytes
	ch <- c.consumers
	ch <- c.waiting
	ch <- c.paused
	if _, ok := c.src.(AgeStore); ok {
		ch <- c.oldest
		ch <- c.oldestDead
	}
	for _, d := range c.counters {
		ch <- d
	}
	ch <- c.claim
	ch <- c.settle
}

// states are the label values of mqlite_queue_messages, dead letters first.
var states = [...]mqlite.State{mqlite.StateDeadLettered, mqlite.StateActive, mqlite.StateScheduled,
	mqlite.StateLocked, mqlite.StateDeferred}

// Collect reads the store's counts once and sends every metric. An error
// of the store (it closed) is sent as an invalid metric, which fails the
// scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	all, err := c.src.Metrics(context.Background())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.messages, err)
		return
	}
	for _, q := range all {
		per := [...]int64{q.DeadLettered, q.Active, q.Scheduled, q.Locked, q.Deferred}
		for i, s := range states {
			ch <- prometheus.MustNewConstMetric(c.messages, prometheus.GaugeValue, float64(per[i]), q.Queue, string(s))
		}
		ch <- prometheus.MustNewConstMetric(c.deadLetters, prometheus.GaugeValue, float64(q.DeadLettered), q.Queue)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(q.Bytes), q.Queue)
		ch <- prometheus.MustNewConstMetric(c.consumers, prometheus.GaugeValue, float64(q.Consumers), q.Queue)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(q.Waiting), q.Queue)
		paused := 0.0
		if q.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, paused, q.Queue)
		for i, v := range counterValues(q.Counters) {
			ch <- prometheus.MustNewConstMetric(c.counters[i], prometheus.CounterValue, float64(v), q.Queue)
		}
		ch <- c.histogram(c.claim, q.Queue, q.Claim)
		ch <- c.histogram(c.settle, q.Queue, q.Settle)
	}
	c.collectAges(ch)
}

// collectAges sends the age gauges of an AgeStore: two index seeks per
// queue on the store's connection, waited for at most ageTimeout.
func (c *Collector) collectAges(ch chan<- prometheus.Metric) {
	as, ok := c.src.(AgeStore)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ageTimeout)
	defer cancel()
	ages, err := as.Ages(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.oldest, err)
		return
	}
	for _, a := range ages {
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, a.OldestActive.Seconds(), a.Queue)
		ch <- prometheus.MustNewConstMetric(c.oldestDead, prometheus.GaugeValue, a.OldestDeadLetter.Seconds(), a.Queue)
	}
}

func (c *Collector) histogram(d *prometheus.Desc, queue string, h mqlite.DurationHistogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(c.upperBounds))
	for i, ub := range c.upperBounds {
		if i < len(h.Buckets) {
			buckets[ub] = h.Buckets[i]
		}
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, queue)
}
