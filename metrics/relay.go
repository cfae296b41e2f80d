package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/relay"
)

// The outcomes a RelayObserver counts beyond the lost lock and the failed
// settlement, as label values: what the Sink said of each message.
const (
	OutcomeDelivered    = "delivered"
	OutcomeRetried      = "retried"
	OutcomeDeadLettered = "dead_lettered"
)

// RelayObserver counts the relays' outcomes per sink and times their
// Sends, and is the prometheus.Collector of those metrics:
// mqlite_relay_outcomes_total{queue, sink, outcome} (delivered, retried,
// dead_lettered, lock_lost, settle_failed),
// mqlite_relay_holds_total{queue, sink, reason} (the times a sink answered
// relay.Hold for a message: the far side had no stream, topic, exchange or
// bound queue for it) and mqlite_relay_send_duration_seconds{queue, sink};
// for the intakes (relay.Intake, through Source):
// mqlite_relay_intake_total{queue, source, outcome} (taken, duplicate: a
// message the queue had already), mqlite_relay_intake_holds_total{queue,
// source, reason} and mqlite_relay_intake_lag_seconds{queue, source} (how
// long before its intake the far side stored the last message taken).
// It is safe for concurrent use.
type RelayObserver struct {
	outcomes *prometheus.CounterVec
	holds    *prometheus.CounterVec
	sends    *prometheus.HistogramVec
	taken    *prometheus.CounterVec
	inHolds  *prometheus.CounterVec
	lag      *prometheus.GaugeVec
}

// The outcomes of an intake's messages, as label values.
const (
	OutcomeTaken     = "taken"
	OutcomeDuplicate = "duplicate"
)

var _ prometheus.Collector = (*RelayObserver)(nil)

// NewRelayObserver returns a RelayObserver. Register it, and give each
// relay the observer of its sink: relay.Config{Observer: ro.Sink("webhook")}.
func NewRelayObserver(opts *ObserverConfig) *RelayObserver {
	o := opts.orDefaults()
	return &RelayObserver{
		outcomes: o.counterVec("mqlite_relay_outcomes_total",
			"Messages a relay handed to its sink, by outcome: delivered, retried, dead_lettered, lock_lost, settle_failed.",
			"queue", "sink", "outcome"),
		holds: o.counterVec("mqlite_relay_holds_total",
			"Times a relay's sink held a message because the far side had no place for it, by reason: no_stream, no_topic, no_exchange, unroutable, template (a route template that renders no valid destination).",
			"queue", "sink", "reason"),
		sends: o.histogramVec("mqlite_relay_send_duration_seconds",
			"How long the Sink.Send that carried each message took.", "queue", "sink"),
		taken: o.counterVec("mqlite_relay_intake_total",
			"Messages an intake committed from its source, by outcome: taken, duplicate (the queue had it already: a delivery again).",
			"queue", "source", "outcome"),
		inHolds: o.counterVec("mqlite_relay_intake_holds_total",
			"Times an intake held: its source gone (no_stream, no_queue, no_topic), or a message the queue refused, held aside in the hold queue (refused).",
			"queue", "source", "reason"),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mqlite_relay_intake_lag_seconds",
			Help:        "How long before its intake the far side stored the last message an intake took.",
			ConstLabels: o.ConstLabels}, []string{"queue", "source"}),
	}
}

// Describe sends the descriptors of r's metrics.
func (r *RelayObserver) Describe(ch chan<- *prometheus.Desc) {
	r.outcomes.Describe(ch)
	r.holds.Describe(ch)
	r.sends.Describe(ch)
	r.taken.Describe(ch)
	r.inHolds.Describe(ch)
	r.lag.Describe(ch)
}

// Collect sends r's metrics.
func (r *RelayObserver) Collect(ch chan<- prometheus.Metric) {
	r.outcomes.Collect(ch)
	r.holds.Collect(ch)
	r.sends.Collect(ch)
	r.taken.Collect(ch)
	r.inHolds.Collect(ch)
	r.lag.Collect(ch)
}

// Source returns the relay.IntakeObserver of the intakes from the source
// named name (a label value: "nats", "amqp", "kafka"), for
// relay.IntakeConfig.Observer.
func (r *RelayObserver) Source(name string) relay.IntakeObserver {
	return sourceObserver{r: r, source: name}
}

// sourceObserver is one source's view of a RelayObserver.
type sourceObserver struct {
	r      *RelayObserver
	source string
}

// Taken counts m and sets the lag from its time.
func (s sourceObserver) Taken(queue string, m relay.Inbound, duplicate bool) {
	outcome := OutcomeTaken
	if duplicate {
		outcome = OutcomeDuplicate
	}
	s.r.taken.WithLabelValues(queue, s.source, outcome).Inc()
	if !m.Time.IsZero() {
		s.r.lag.WithLabelValues(queue, s.source).Set(max(0, time.Since(m.Time).Seconds()))
	}
}

// Held counts a hold under reason.
func (s sourceObserver) Held(queue, reason string, _ error) {
	s.r.inHolds.WithLabelValues(queue, s.source, reason).Inc()
}

// Sink returns the consumer.Observer of the relays to the sink named name
// (a label value: "webhook", "nats", "orders-rabbit"), for
// relay.Config.Observer. It is a relay.HoldObserver too, so the relay
// counts its holds.
func (r *RelayObserver) Sink(name string) consumer.Observer { return sinkObserver{r: r, sink: name} }

var _ relay.HoldObserver = sinkObserver{}

// sinkObserver is one sink's view of a RelayObserver.
type sinkObserver struct {
	consumer.NopObserver
	r    *RelayObserver
	sink string
}

func (s sinkObserver) done(m mqlite.Message, outcome string, took time.Duration, sent bool) {
	s.r.outcomes.WithLabelValues(m.Queue, s.sink, outcome).Inc()
	if sent {
		s.r.sends.WithLabelValues(m.Queue, s.sink).Observe(took.Seconds())
	}
}

// Completed counts a message the sink delivered.
func (s sinkObserver) Completed(m mqlite.Message, took time.Duration) {
	s.done(m, OutcomeDelivered, took, true)
}

// Abandoned counts a message to be sent again.
func (s sinkObserver) Abandoned(m mqlite.Message, took, _ time.Duration, cause error) {
	s.done(m, OutcomeRetried, took, cause != nil || took > 0)
}

// Rejected counts a message the sink refused for good (dead-lettered).
func (s sinkObserver) Rejected(m mqlite.Message, took time.Duration, _ error) {
	s.done(m, OutcomeDeadLettered, took, true)
}

// LockLost counts a message whose lease was lost while the sink had it.
func (s sinkObserver) LockLost(m mqlite.Message, _ error) { s.done(m, OutcomeLockLost, 0, false) }

// Held counts a hold of m, under reason.
func (s sinkObserver) Held(m mqlite.Message, reason string, _ error) {
	s.r.holds.WithLabelValues(m.Queue, s.sink, reason).Inc()
}

// SettleFailed counts a message whose settlement failed.
func (s sinkObserver) SettleFailed(m mqlite.Message, _ error) {
	s.done(m, OutcomeSettleFailed, 0, false)
}
