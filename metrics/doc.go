// Package metrics exports mqlite's numbers to Prometheus
// (github.com/prometheus/client_golang).
//
// Three collectors, each a prometheus.Collector to register where the
// application keeps its registry:
//
//   - NewCollector reads a store's per-queue counts (Store.Metrics): the
//     messages per state with the dead-letter depth, the event counters
//     (sent, received, completed, abandoned, rejected, dead-lettered,
//     lock-lost, redelivered) and the claim and settle durations. The store
//     keeps those counts in memory as its commits land, so a scrape reads
//     no table and costs the same on a million-message queue as on an empty
//     one.
//   - NewObserver is a consumer.Observer: give it to consumer.Loop (or
//     LoopBatch) as LoopConfig.Observer for handler durations and the
//     loop's outcomes.
//   - NewRelayObserver counts a relay's outcomes per sink: give
//     RelayObserver.Sink("webhook") to relay.Config.Observer.
//
// Every metric name starts with mqlite_; docs/operations.md ("Metrics")
// lists them with their labels. The broker serves the store's collector at
// GET /metrics.
package metrics
