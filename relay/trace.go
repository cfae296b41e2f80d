package relay

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/tracing"
)

// TraceContext calls set with the W3C Trace Context m carries in its
// properties: "traceparent", and "tracestate" when present, checked (a
// malformed one is not passed on). Every sink calls it to pass the trace on
// (webhook: HTTP headers; NATS and AMQP: message headers); a Sink of your
// own should too. It calls set for nothing when m carries no trace context.
func TraceContext(m mqlite.Message, set func(key, value string)) {
	tracing.Headers(m.Properties, set)
}

// startSpans starts, when tracing is on, one "relay <queue>" span of kind
// producer per message of msgs, child of the context the message was sent
// in, and returns msgs with each message's trace context replaced by its
// span's (copies of the properties: the held messages are not changed) for
// the sink to pass on. With tracing off it returns msgs and no spans.
func (r *Relay) startSpans(ctx context.Context, msgs []mqlite.Message) ([]mqlite.Message, []trace.Span) {
	tr := tracing.Of(r.src)
	if tr == nil {
		return msgs, nil
	}
	out := make([]mqlite.Message, len(msgs))
	spans := make([]trace.Span, len(msgs))
	for i, m := range msgs {
		pctx := ctx
		if sc := tracing.Extract(m.Properties); sc.IsValid() {
			pctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
		sctx, span := tracing.Start(pctx, tr, trace.SpanKindProducer, tracing.OpSend, "relay", r.queue,
			trace.WithAttributes(tracing.MessageAttrs(m.Seq, m.MessageID, m.DeliveryCount)...))
		m.Properties = tracing.Replace(sctx, m.Properties, mqlite.MaxPropertiesBytes)
		out[i], spans[i] = m, span
	}
	return out, spans
}

// endSpans ends the spans of startSpans with the sink's outcomes (res has
// one per span, or is short when the sink broke its promise).
func endSpans(spans []trace.Span, res []Outcome, err error) {
	for i, span := range spans {
		e := err
		if e == nil && i < len(res) {
			e = res[i].Err
		}
		tracing.End(span, e)
	}
}
