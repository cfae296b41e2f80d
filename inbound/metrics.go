package inbound

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// Reasons of mqlite_inbound_refused_total: why a request stored nothing.
const (
	RefusedUnsigned      = "unsigned"        // ErrUnsigned
	RefusedBadSignature  = "bad_signature"   // ErrBadSignature
	RefusedUnknownSender = "unknown_source"  // no such sender (answered as a bad signature; the value keeps its word: dashboards and alerts hold it)
	RefusedStale         = "stale"           // ErrStale
	RefusedTooLarge      = "too_large"       // a body over MaxBodyBytes, or a message over the store's limit
	RefusedConflict      = "conflict"        // the same webhook-id with another body
	RefusedInvalid       = "invalid"         // a webhook-id or body the store refuses
	RefusedNoDedupWindow = "no_dedup_window" // the queue lost the window the sender needs
	RefusedBusy          = "busy"            // past the bytes of bodies held at once (503, Retry-After)
	RefusedError         = "error"           // the store failed (5xx: the provider retries)
)

// counters are the handler's Prometheus counters, by sender; refusals by
// sender and reason, under the label "source" (the name dashboards and
// alert rules already hold). An unknown sender counts under source "".
type counters struct {
	accepted, duplicates, refusals *prometheus.CounterVec
	held                           prometheus.GaugeFunc
}

func newCounters(sources map[string]*sender, held *room) *counters {
	c := &counters{
		held: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mqlite_inbound_held_bytes",
			Help: "Bytes of inbound webhook bodies held at once (counted from before each is read until its answer)."},
			func() float64 { return float64(held.bytes()) }),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mqlite_inbound_accepted_total",
			Help: "Inbound webhooks stored as a new message, by source."}, []string{"source"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mqlite_inbound_duplicates_total",
			Help: "Inbound webhooks whose webhook-id the queue already held (a provider's retry): answered 200, nothing stored."}, []string{"source"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mqlite_inbound_refused_total",
			Help: "Inbound webhooks refused with nothing stored, by source and reason."}, []string{"source", "reason"}),
	}
	for name := range sources { // every sender shows from the first scrape, at 0
		c.accepted.WithLabelValues(name)
		c.duplicates.WithLabelValues(name)
	}
	return c
}

func (c *counters) took(source string, duplicate bool) {
	if duplicate {
		c.duplicates.WithLabelValues(source).Inc()
		return
	}
	c.accepted.WithLabelValues(source).Inc()
}

func (c *counters) refused(source string, err error) {
	c.refusals.WithLabelValues(source, refusedReason(err)).Inc()
}

// refusedReason is the metric's reason of err.
func refusedReason(err error) string {
	var we *wireError
	switch {
	case errors.Is(err, errUnknownSender):
		return RefusedUnknownSender
	case errors.Is(err, ErrUnsigned):
		return RefusedUnsigned
	case errors.Is(err, ErrBadSignature):
		return RefusedBadSignature
	case errors.Is(err, ErrStale):
		return RefusedStale
	case errors.Is(err, mqlite.ErrDuplicateConflict):
		return RefusedConflict
	case errors.Is(err, mqlite.ErrMessageTooLarge):
		return RefusedTooLarge
	case errors.Is(err, mqlite.ErrInvalidArgument):
		return RefusedInvalid
	case errors.As(err, &we):
		switch we.reason {
		case wire.ReasonInboundBusy:
			return RefusedBusy
		case wire.ReasonBodyTooLarge:
			return RefusedTooLarge
		case wire.ReasonNoDedupWindow:
			return RefusedNoDedupWindow
		case wire.ReasonMalformed:
			return RefusedInvalid
		}
	}
	return RefusedError
}

// Describe implements prometheus.Collector: register a Handler to export
// mqlite_inbound_accepted_total, mqlite_inbound_duplicates_total and
// mqlite_inbound_refused_total, and the gauge mqlite_inbound_held_bytes.
func (h *Handler) Describe(ch chan<- *prometheus.Desc) {
	h.counts.accepted.Describe(ch)
	h.counts.duplicates.Describe(ch)
	h.counts.refusals.Describe(ch)
	h.counts.held.Describe(ch)
}

// Collect implements prometheus.Collector.
func (h *Handler) Collect(ch chan<- prometheus.Metric) {
	h.counts.accepted.Collect(ch)
	h.counts.duplicates.Collect(ch)
	h.counts.refusals.Collect(ch)
	h.counts.held.Collect(ch)
}

var _ prometheus.Collector = (*Handler)(nil)
