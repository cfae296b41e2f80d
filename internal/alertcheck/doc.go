// Package alertcheck holds a test only: that the Prometheus alert rules
// and the Grafana dashboard shipped in deploy/ are valid (the rules parsed
// by Prometheus's own rule-file parser, every query by its PromQL parser)
// and that every metric their queries name is in a real scrape of the
// broker, or of the relay's metrics. It is a module of its own so that
// Prometheus's server code stays out of the library's dependencies.
package alertcheck
