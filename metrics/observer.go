package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// ObserverConfig configures NewObserver and NewRelayObserver. A nil
// *ObserverConfig means the defaults.
type ObserverConfig struct {
	// Buckets are the upper bounds, in seconds, of the duration
	// histograms. Defaults to prometheus.DefBuckets (5ms to 10s).
	Buckets []float64
	// ConstLabels are added to every metric. Defaults to none.
	ConstLabels prometheus.Labels
}

func (o *ObserverConfig) orDefaults() ObserverConfig {
	var out ObserverConfig
	if o != nil {
		out = *o
	}
	if out.Buckets == nil {
		out.Buckets = prometheus.DefBuckets
	}
	return out
}

// The outcomes an Observer or a RelayObserver counts, as label values.
const (
	OutcomeCompleted    = "completed"
	OutcomeAbandoned    = "abandoned"
	OutcomeRejected     = "rejected"
	OutcomeLockLost     = "lock_lost"
	OutcomeSettleFailed = "settle_failed"
)

// Observer is a consumer.Observer that counts consumer.Loop's events and
// times its handlers, and the prometheus.Collector of those metrics:
// mqlite_loop_received_total{queue}, mqlite_loop_outcomes_total{queue,
// outcome} and mqlite_handler_duration_seconds{queue, outcome}. One
// Observer may serve many loops. It is safe for concurrent use.
type Observer struct {
	received *prometheus.CounterVec
	outcomes *prometheus.CounterVec
	handler  *prometheus.HistogramVec
}

var (
	_ consumer.Observer    = (*Observer)(nil)
	_ prometheus.Collector = (*Observer)(nil)
)

// NewObserver returns an Observer. Register it, and give it to the loops:
// consumer.LoopConfig{Observer: obs}.
func NewObserver(opts *ObserverConfig) *Observer {
	o := opts.orDefaults()
	return &Observer{
		received: o.counterVec("mqlite_loop_received_total", "Messages consumer.Loop claimed.", "queue"),
		outcomes: o.counterVec("mqlite_loop_outcomes_total",
			"Deliveries consumer.Loop ended, by outcome: completed, abandoned, rejected, lock_lost, settle_failed.",
			"queue", "outcome"),
		handler: o.histogramVec("mqlite_handler_duration_seconds",
			"How long consumer.Loop's handler ran, by the outcome it led to: completed, abandoned, rejected.",
			"queue", "outcome"),
	}
}

func (o ObserverConfig) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: o.ConstLabels}, labels)
}

func (o ObserverConfig) histogramVec(name, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: o.ConstLabels,
		Buckets: o.Buckets}, labels)
}

// Describe sends the descriptors of o's metrics.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.received.Describe(ch)
	o.outcomes.Describe(ch)
	o.handler.Describe(ch)
}

// Collect sends o's metrics.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.received.Collect(ch)
	o.outcomes.Collect(ch)
	o.handler.Collect(ch)
}

// Received counts n messages claimed.
func (o *Observer) Received(queue string, n int) {
	o.received.WithLabelValues(queue).Add(float64(n))
}

// done counts one outcome and, for a handler that ran, its duration.
func (o *Observer) done(m mqlite.Message, outcome string, took time.Duration, ran bool) {
	o.outcomes.WithLabelValues(m.Queue, outcome).Inc()
	if ran {
		o.handler.WithLabelValues(m.Queue, outcome).Observe(took.Seconds())
	}
}

// Completed counts a completed delivery and times its handler.
func (o *Observer) Completed(m mqlite.Message, took time.Duration) {
	o.done(m, OutcomeCompleted, took, true)
}

// Abandoned counts an abandoned delivery and times its handler, when it
// ran (a message released at shutdown before its handler started did not).
func (o *Observer) Abandoned(m mqlite.Message, took, _ time.Duration, cause error) {
	o.done(m, OutcomeAbandoned, took, cause != nil || took > 0)
}

// Rejected counts a dead-lettered delivery and times its handler.
func (o *Observer) Rejected(m mqlite.Message, took time.Duration, _ error) {
	o.done(m, OutcomeRejected, took, true)
}

// LockLost counts a delivery whose lease was lost.
func (o *Observer) LockLost(m mqlite.Message, _ error) { o.done(m, OutcomeLockLost, 0, false) }

// SettleFailed counts a settlement that failed.
func (o *Observer) SettleFailed(m mqlite.Message, _ error) {
	o.done(m, OutcomeSettleFailed, 0, false)
}
