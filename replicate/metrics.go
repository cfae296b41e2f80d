package replicate

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The metric names of the Collector; docs/operations.md ("A standby on
// another machine") describes them.
const (
	MetricShipments = "mqlite_replication_shipments_total"
	MetricFailures  = "mqlite_replication_failures_total"
	MetricLastOK    = "mqlite_replication_last_success_timestamp_seconds"
	MetricFailing   = "mqlite_replication_failing"
)

// Collector is a prometheus.Collector of a Replicator's Stats: how many
// shipments it made and how many failed, when the last one succeeded (an
// alert on time() minus it is an alert on the loss window), and whether
// the replica is failing now. Register it where the store's metrics go
// (the broker's /metrics). It is safe for concurrent use.
type Collector struct {
	r                                *Replicator
	shipments, failures, last, fails *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector of r.
func NewCollector(r *Replicator) *Collector {
	return &Collector{
		r:         r,
		shipments: prometheus.NewDesc(MetricShipments, "Shipments of the store's file to its replica.", nil, nil),
		failures:  prometheus.NewDesc(MetricFailures, "Shipments to the replica that failed.", nil, nil),
		last:      prometheus.NewDesc(MetricLastOK, "When the last shipment to the replica succeeded (0 before the first).", nil, nil),
		fails:     prometheus.NewDesc(MetricFailing, "1 while the last shipment to the replica failed, else 0.", nil, nil),
	}
}

// Describe sends the descriptors of every metric of c.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.shipments
	ch <- c.failures
	ch <- c.last
	ch <- c.fails
}

// Collect sends every metric of c, from one Stats.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.Stats()
	last, failing := 0.0, 0.0
	if !s.LastOK.IsZero() {
		last = float64(s.LastOK.UnixNano()) / 1e9
	}
	if s.LastErr != nil {
		failing = 1
	}
	ch <- prometheus.MustNewConstMetric(c.shipments, prometheus.CounterValue, float64(s.Shipments))
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(s.Failures))
	ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, last)
	ch <- prometheus.MustNewConstMetric(c.fails, prometheus.GaugeValue, failing)
}
