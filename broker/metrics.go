package broker

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mqlite/mqlite/internal/buildinfo"
	"github.com/mqlite/mqlite/metrics"
)

// metricsHandler serves the Prometheus text format of the store's
// per-queue counts (metrics.Collector), the counters of the inbound
// webhooks, mqlite_build_info and the broker process's Go and process
// collectors. A scrape reads no table: the store keeps the counts in
// memory.
func metricsHandler(src metrics.Store, in prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "mqlite_build_info",
		Help:        "Always 1; its version label is the mqlite version the broker was built with, (devel) from a checkout.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version()},
	})
	buildInfo.Set(1)
	reg.MustRegister(metrics.NewCollector(src, nil), in, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// metrics answers GET /metrics: an admin key over every queue, unless
// Config.PublicMetrics.
func (s *Server) metrics(r *http.Request) (result, error) {
	if !s.cfg.PublicMetrics {
		if err := requireAll(r.Context()); err != nil {
			return result{}, err
		}
	}
	return result{raw: s.metricsHTTP}, nil
}
